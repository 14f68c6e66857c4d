"""Two beat processes never both fire (celery-redbeat's lock in Redis), and the standby takes
over when the leader dies; a beat told to stop while Redis is down stops."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from corral.services.queues.dispatch import RECONCILE

from harness import LOCAL_ONLY, REPO, System, wait_for

pytestmark = pytest.mark.integration


def _queued(client: redis.Redis, queue: str) -> int:
    """The reconcile messages on ``queue`` (beat also sends the serving pass there, at the
    same interval: counting every message would count two entries of one beat)."""
    found = 0
    for raw in client.lrange(queue, 0, -1):
        if json.loads(raw).get("headers", {}).get("task") == RECONCILE:
            found += 1
    return found


def test_two_beats_fire_once_and_the_standby_takes_over(make_system: Callable[..., System]) -> None:
    # No workers: every reconcile message beat sends stays on the `provision` queue, countable.
    system = make_system(RECONCILE_INTERVAL_S="0.5", BEAT_LOCK_TIMEOUT_S="3")
    client = redis.Redis.from_url(system.env["CORRAL_REDIS_URL"])
    # Both start at once (a beat's start is a second or two of CPU, one after the other was
    # the test's first seconds) and race for the lock: the one that took it is the leader.
    beats = {name: system.start_beat(name) for name in ("beat-1", "beat-2")}

    def log(name: str) -> str:
        path = system.home / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    wait_for(lambda: _queued(client, "provision") > 0, 30, "a beat to fire")
    wait_for(lambda: all("beat: Starting" in log(n) for n in beats), 30, "both beats to start")
    leaders = [name for name in beats if "Acquired lock" in log(name)]
    assert len(leaders) == 1, leaders
    leader, standby = beats.pop(leaders[0]), beats.popitem()[1]
    time.sleep(1)  # past the standby's first ticks (BEAT_MAX_LOOP_INTERVAL_S 0.5): both running
    start, t0 = _queued(client, "provision"), time.monotonic()
    time.sleep(3)  # about 6 reconciles from one beat, 12 from two
    rate = (_queued(client, "provision") - start) / (time.monotonic() - t0)
    # Two reconciles a second (plus expiry of stale messages aside): one beat's worth, not two.
    assert 1.0 <= rate <= 3.0, rate

    os.killpg(leader.pid, signal.SIGKILL)
    time.sleep(1)
    before = _queued(client, "provision")
    wait_for(lambda: _queued(client, "provision") > before + 2, 30, "the standby beat to fire")
    assert standby.poll() is None


def test_a_standby_beat_takes_over_soon_with_the_shipped_lock(
    make_system: Callable[..., System],
) -> None:
    """With beat's lock timeout and loop interval as shipped, the standby fires again within
    about 7 s of the leader's death. Every periodic pass (a pool's rebalancing: a machine
    that died found, its work placed again) waits for it: 11-14 s a beat kill under `make
    chaos` with the 10 s lock this replaces, the lock's TTL at the kill at least 9.5 s."""
    system = make_system(RECONCILE_INTERVAL_S="0.5")
    for name in ("BEAT_LOCK_TIMEOUT_S", "BEAT_MAX_LOOP_INTERVAL_S"):
        system.env.pop(f"CORRAL_TIMERS__{name}")  # the shipped values
    client = redis.Redis.from_url(system.env["CORRAL_REDIS_URL"], decode_responses=True)

    def log(name: str) -> str:
        path = system.home / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    leader = system.start_beat("beat-1")
    wait_for(lambda: "Acquired lock" in log("beat-1"), 60, "the first beat to lead")
    system.start_beat("beat-2")
    wait_for(lambda: "beat: Starting" in log("beat-2"), 60, "the standby to start")
    found = re.search(r"lock -> `([^`]+)`", log("beat-1"))
    assert found, log("beat-1")
    time.sleep(1)  # a few ticks: the leader renews its lock on each (every 0.5 s here)
    os.killpg(leader.pid, signal.SIGKILL)
    dead_at = time.monotonic()
    left_ms = client.pttl(found.group(1))
    wait_for(lambda: "Acquired lock" in log("beat-2"), 30, "the standby to take the lock")
    took_s = time.monotonic() - dead_at
    print(f"the lock had {left_ms} ms left; the standby led {took_s:.1f} s after the kill")
    assert 0 < left_ms <= 5000, left_ms  # a dead leader's lock lapses within 5 s
    assert took_s < 9.0, took_s  # its TTL, the standby's next look (2 s) and some slack


def test_a_beat_told_to_stop_while_redis_is_down_stops(
    tmp_path: Path, own_redis_server: Any
) -> None:
    server = own_redis_server
    cloud = REPO / "tests/fixtures/localcloud/runtime.yaml"
    # Redis unreachable for 2 s is an outage to this beat (30 s as shipped).
    system = System(tmp_path / "home", server.url, cloud, LOCAL_ONLY, REDIS_PATIENCE_S="2")
    try:
        beat = system.start_beat()
        log = system.home / "logs" / "beat.log"
        wait_for(lambda: "Acquired lock" in log.read_text(errors="replace"), 60, "beat to lead")
        server.stop()
        wait_for(lambda: "Redis unreachable" in log.read_text(errors="replace"), 30, "the outage")
        os.killpg(beat.pid, signal.SIGTERM)
        try:
            code = beat.wait(15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"beat did not stop on SIGTERM\n{log.read_text(errors='replace')[-2000:]}")
        assert code == 0, log.read_text(errors="replace")[-2000:]
        assert "the lock will expire" in log.read_text(errors="replace")
    finally:
        system.stop(grace_s=0)
