"""Two beat processes never both fire (celery-redbeat's lock in Redis), and the standby takes
over when the leader dies."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
import redis

from harness import System, wait_for

pytestmark = pytest.mark.integration


def _queued(client: redis.Redis, queue: str) -> int:
    return int(client.llen(queue))


def test_two_beats_fire_once_and_the_standby_takes_over(make_system: Callable[..., System]) -> None:
    # No workers: every reconcile message beat sends stays on the `provision` queue, countable.
    system = make_system(RECONCILE_INTERVAL_S="0.5", BEAT_LOCK_TIMEOUT_S="3")
    client = redis.Redis.from_url(system.env["CORRAL_REDIS_URL"])
    first = system.start_beat("beat-1")
    wait_for(lambda: _queued(client, "provision") > 0, 30, "the first beat to fire")
    second = system.start_beat("beat-2")
    log = system.home / "logs" / "beat-2.log"
    wait_for(lambda: "beat: Starting" in log.read_text(errors="replace"), 30, "beat-2 to start")
    time.sleep(1)  # past its first ticks (BEAT_MAX_LOOP_INTERVAL_S 0.5): both running now
    start, t0 = _queued(client, "provision"), time.monotonic()
    time.sleep(5)
    rate = (_queued(client, "provision") - start) / (time.monotonic() - t0)
    # Two reconciles a second (plus expiry of stale messages aside): one beat's worth, not two.
    assert 1.0 <= rate <= 3.0, rate

    os.killpg(first.pid, signal.SIGKILL)
    time.sleep(1)
    before = _queued(client, "provision")
    wait_for(lambda: _queued(client, "provision") > before + 2, 30, "the standby beat to fire")
    assert second.poll() is None
