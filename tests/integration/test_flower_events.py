"""Flower shows the work users caused: beat's periodic ticks (reconcile, the autoscaler's tick,
the pools' rebalance) send no task events, neither from beat nor from the workers, so never reach
Flower's task list (issue #28: 216 of 308 tasks in a four-minute demo were beat's). Real
worker processes and beat on a real redis-server; the events are read as Flower reads them,
with Celery's event receiver on the broker."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from harness import System, wait_for

pytestmark = pytest.mark.integration

PERIODIC = {"corral.provision.reconcile", "corral.autoscale.tick", "corral.schedule.pool_rebalance"}


def _watch(broker: str, seen: list[dict[str, Any]], stop: threading.Event) -> None:
    app = Celery(broker=broker)
    with app.connection_for_read() as conn:
        recv = app.events.Receiver(conn, handlers={"*": seen.append})
        for _ in recv.itercapture(limit=None, timeout=None, wakeup=False):
            if stop.is_set():
                return


def _count_messages(url: str, senders: list[str], stop: threading.Event) -> None:
    """Count the event messages published on the broker (a message may carry many events),
    by the hostname of their sender."""
    sub = redis.Redis.from_url(url).pubsub()
    sub.psubscribe("*celeryev/task.*")
    while not stop.is_set():
        msg = sub.get_message(timeout=0.2)
        if msg is not None and msg["type"] == "pmessage":
            senders.append(json.loads(msg["data"])["headers"]["hostname"])
    sub.close()


def _ran(logs: Path) -> dict[str, int]:
    """How many times a worker ran each periodic task, as their logs say (not how many it
    received: a copy that expired before it started is discarded)."""
    text = "".join(f.read_text(errors="replace") for f in logs.glob("*.log"))
    return {t: len(re.findall(rf"Task {re.escape(t)}\[[^]]+\] succeeded", text)) for t in PERIODIC}


def test_beats_ticks_send_no_events_and_a_users_request_does(
    make_system: Callable[..., System],
) -> None:
    system = make_system(RECONCILE_INTERVAL_S="0.5", POOL_REBALANCE_INTERVAL_S="0.5")
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(system.env["CORRAL_REDIS_URL"], seen, stop), daemon=True
    )
    watcher.start()
    senders: list[str] = []
    counter = threading.Thread(
        target=_count_messages,
        args=(system.env["CORRAL_REDIS_URL"], senders, stop),
        daemon=True,
    )
    counter.start()
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_worker("autoscale")
        system.start_beat()
        # Beat is ticking once workers report in: a worker heartbeat event proves the
        # receiver hears this broker.
        wait_for(lambda: any(e["type"] == "worker-heartbeat" for e in seen), 60, "a heartbeat")
        request_id = system.submit(
            {"resources": {"cloud": "local", "instance_type": "cpu-2"}, "run": "true"}
        )
        system.wait_state(request_id, {"RUNNING", "SUCCEEDED"}, 90)
        # Until each periodic task has run three more times (every half second) while the
        # receiver hears the broker: the events of all but the last of those runs, had any
        # been sent, went out 0.5 s or more before the end, five times the workers' event
        # flush interval. (A fixed 4 s sleep here also passed when beat never ticked.)
        logs = system.home / "logs"
        before = _ran(logs)
        wait_for(
            lambda: all(n >= before[t] + 3 for t, n in _ran(logs).items()),
            30,
            "each periodic task to run three times more",
            logs,
        )
    finally:
        stop.set()
        watcher.join(5)
        counter.join(5)
    names = {e.get("name") for e in seen if e["type"] in ("task-received", "task-sent")}
    assert "corral.schedule.admit" in names  # the user's request shows
    tasks = {e.get("name") for e in seen if e["type"].startswith("task-")}
    # Admitted on its cloud's provisioning queue, where the same task runs its first attempt.
    where = {e.get("hostname", "") for e in seen if e["type"] == "task-received"}
    assert any(h.startswith("provision") for h in where), where
    assert not (tasks & PERIODIC), tasks & PERIODIC
    # A worker sends its task events together (received and started, at least, go out in one
    # message), not one message each: fewer messages than events.
    # (The API gathers its "task-sent" events too: test_sent_events.py.)
    workers = {e["hostname"] for e in seen if e["type"] == "worker-heartbeat"}
    from_workers = [e for e in seen if e["type"].startswith("task-") and e["hostname"] in workers]
    messages = [host for host in senders if host in workers]
    assert from_workers and len(messages) < len(from_workers), (len(messages), len(from_workers))
