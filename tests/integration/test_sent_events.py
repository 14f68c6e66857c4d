"""The "task-sent" events of the publishing side (the API, the CLI, a worker sending a task)
go out gathered, several in one message (services/queues/sent_events.py), and reach Flower's
side whole: read here with Celery's event receiver, as Flower reads them, on a real
redis-server. A process that exits publishes what it gathered; a forked child publishes its
own events and not its parent's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from celery import Celery

from corral.services.queues import dispatch
from corral.services.settings import Settings

from harness import wait_for

pytestmark = pytest.mark.integration

QUEUE = "nobody-consumes"  # the tasks wait there: only their events matter here


class Heard:
    """Every task event on the broker (Celery's receiver), and every event message's routing
    key and sender (the broker's pub/sub), from a thread each."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.events: list[dict[str, Any]] = []
        self.messages: list[tuple[str, str]] = []  # (routing key, sender's hostname)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._threads = [
            threading.Thread(target=self._receive, daemon=True),
            threading.Thread(target=self._count, daemon=True),
        ]

    def __enter__(self) -> Heard:
        for t in self._threads:
            t.start()
        self._ready.wait(10)
        time.sleep(0.3)  # the receiver's binding made
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def sent(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "task-sent"]

    def _receive(self) -> None:
        app = Celery(broker=self.url)
        with app.connection_for_read() as conn:
            recv = app.events.Receiver(conn, handlers={"*": self.events.append})
            while not self._stop.is_set():
                try:  # until a quiet spell, then the stop is checked
                    recv.capture(limit=None, timeout=0.2, wakeup=False)
                except TimeoutError:
                    continue

    def _count(self) -> None:
        sub = redis.Redis.from_url(self.url).pubsub()
        sub.psubscribe("*celeryev/task.*")
        self._ready.set()
        while not self._stop.is_set():
            msg = sub.get_message(timeout=0.2)
            if msg is not None and msg["type"] == "pmessage":
                envelope = json.loads(msg["data"])
                key = msg["channel"].decode().rsplit("/", 1)[-1]
                self.messages.append((key, envelope["headers"]["hostname"]))
        sub.close()


@pytest.fixture
def heard(redis_url: str) -> Iterator[Heard]:
    with Heard(redis_url) as h:
        yield h


def _send(settings: Settings, n: int) -> str:
    return dispatch.send(dispatch.PING, [n], queue=QUEUE, settings=settings)


def test_a_burst_of_sends_publishes_its_events_together(redis_url: str, heard: Heard) -> None:
    settings = Settings(redis_url=redis_url)
    with ThreadPoolExecutor(4) as pool:  # as the API's thread pool sends
        ids = set(pool.map(lambda n: _send(settings, n), range(200)))
    wait_for(lambda: len(heard.sent()) >= 200, 10, "200 task-sent events")
    time.sleep(0.3)  # nothing more comes
    sent = heard.sent()
    assert {e["uuid"] for e in sent} == ids and len(sent) == 200  # each once
    assert {e["name"] for e in sent} == {dispatch.PING}
    assert {e["queue"] for e in sent} == {QUEUE}
    ours = [key for key, host in heard.messages if host == sent[0]["hostname"]]
    # Gathered: at most 64 a message, and a few messages for the burst, not one per task.
    assert set(ours) == {"task.multi"}, set(ours)
    assert 200 / 64 <= len(ours) <= 40, len(ours)
    # The tasks themselves were not held back: all of them are queued.
    assert redis.Redis.from_url(redis_url).llen(QUEUE) == 200


def test_one_send_is_heard_at_once(redis_url: str, heard: Heard) -> None:
    settings = Settings(redis_url=redis_url)
    _send(settings, 0)  # the dispatcher built (its first send opens connections)
    wait_for(lambda: len(heard.sent()) == 1, 10, "the first event")
    began = time.monotonic()
    task_id = _send(settings, 1)
    wait_for(lambda: len(heard.sent()) == 2, 10, "the second event")
    assert heard.sent()[-1]["uuid"] == task_id
    assert time.monotonic() - began < 1.0  # the batch waits 0.05 s for company, not more


def test_a_process_that_exits_publishes_what_it_gathered(redis_url: str, heard: Heard) -> None:
    code = (
        "from corral.services.queues import dispatch\n"
        f"for n in range(3): print(dispatch.send(dispatch.PING, [n], queue={QUEUE!r}))\n"
    )
    _run_and_hear(code, redis_url, heard)


def _run_and_hear(code: str, redis_url: str, heard: Heard) -> None:
    """Run ``code`` (it prints the ids of the tasks it sends) in a process of its own, and
    hear each of its tasks' events once it has exited."""
    env = {**os.environ, "CORRAL_REDIS_URL": redis_url}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    ids = set(out.stdout.decode().split())
    wait_for(lambda: len(heard.sent()) >= len(ids), 10, "the exited process's events")
    assert {e["uuid"] for e in heard.sent()} == ids


def test_a_process_that_exits_while_its_batch_is_published_waits_for_it(
    redis_url: str, heard: Heard
) -> None:
    # The gathering thread has taken the batch and is publishing it (slowly, here) when the
    # process exits: the exit's flush waits for that batch; a daemon thread would die mid-way.
    code = (
        "import time\n"
        "from kombu.messaging import Producer\n"
        "from corral.services.queues import dispatch\n"
        "slow = Producer.publish\n"
        "def publish(self, body, *a, **kw):\n"
        "    if kw.get('routing_key') == 'task.multi': time.sleep(0.5)\n"
        "    return slow(self, body, *a, **kw)\n"
        "Producer.publish = publish\n"
        f"print(dispatch.send(dispatch.PING, [0], queue={QUEUE!r}))\n"
        "time.sleep(0.2)  # the batch taken, its publishing under way\n"
    )
    _run_and_hear(code, redis_url, heard)


def test_a_forked_child_sends_its_own_events_not_its_parents(redis_url: str, heard: Heard) -> None:
    settings = Settings(redis_url=redis_url)
    parent_id = _send(settings, 0)  # gathered, not yet published when the child is forked
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: as a worker's pool process that sends a task
        code = 1
        try:
            os.close(read)
            ids = [_send(settings, n) for n in (1, 2)]
            os.write(write, " ".join(ids).encode())
            time.sleep(0.5)  # its gathering thread publishes (a pool process lives on)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_ids = set(pipe.read().split())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    wait_for(lambda: len(heard.sent()) >= 3, 10, "three events")
    time.sleep(0.3)
    sent = heard.sent()
    assert sorted(e["uuid"] for e in sent) == sorted({parent_id, *child_ids})  # none twice
    by_pid = {e["uuid"]: e["pid"] for e in sent}
    assert by_pid[parent_id] == os.getpid()
    assert {by_pid[i] for i in child_ids} == {pid}
