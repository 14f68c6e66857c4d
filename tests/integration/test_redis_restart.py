"""Redis SIGKILLed under load on `corral up` as shipped: services launched (machines boot
for 5 s), redis-server killed one second in; `corral up` restarts it from its append-only
file. Every request must end RUNNING on exactly one instance, none FAILED, none lost, nothing
leaked, all within 30 s of the crash; and the next round on the same installation too (a
machine wrongly taken for lost used to block its zone and fail the rounds after it).

The default run does one round of 20 launches (the kill still lands while they are being
submitted); ``make chaos`` does three rounds of 40 (CORRAL_REDIS_KILL_ROUNDS,
CORRAL_REDIS_KILL_LAUNCHES)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from faults import account, cancel_all, submit_many, supervised, wait_ready, wait_settled
from harness import Up, one_zone_cloud, wait_for

pytestmark = pytest.mark.integration

ROUNDS = int(os.environ.get("CORRAL_REDIS_KILL_ROUNDS", "1"))
LAUNCHES = int(os.environ.get("CORRAL_REDIS_KILL_LAUNCHES", "20"))
SETTLE_S = 30.0
# The machines' boot (it was 8 s; the round waits out one). `corral up` has Redis back 1-2 s
# after the kill (a supervision tick of 1 s at most, a 1 s restart backoff; 1.4 s measured on
# a loaded machine), so a machine launched before the kill, 1 s into the round, boots on for
# 2 s or more after Redis is back; the launches the outage held up boot after it.
BOOT_S = 5.0


def test_redis_killed_during_launches_loses_and_fails_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = Up(home, one_zone_cloud(tmp_path / "boot.yaml", 64, BOOT_S), timers={})
    try:
        url, headers = wait_ready(up)
        redis_url = (home / "redis-url").read_text().strip()
        for round_no in range(ROUNDS):
            _round(up, url, headers, redis_url, round_no)
    finally:
        assert up.stop() == 0, up.output()


def _round(up: Up, url: str, headers: dict[str, str], redis_url: str, round_no: int) -> None:
    names = [f"r{round_no}-{i}" for i in range(LAUNCHES)]
    victim = supervised(up, "redis-server")
    started = time.monotonic()
    killer_done: list[float] = []

    def kill_one_second_in() -> None:
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        os.kill(victim, signal.SIGKILL)
        killer_done.append(time.time())

    killer = threading.Thread(target=kill_one_second_in)
    killer.start()
    ids, refused = submit_many(url, headers, names)
    killer.join()
    crash_at = killer_done[0]
    assert not refused, f"round {round_no}: submits refused during the outage: {refused[:3]}"
    rows = wait_settled(url, headers, ids, timeout_s=120)
    acc = account(url, headers, rows, redis_url)
    took = acc.settled_at - crash_at
    print(f"round {round_no}: {acc.line()}; settled {took:.1f}s after the crash")
    assert not acc.failed, f"round {round_no}: {acc.failed[:5]}"
    assert not acc.not_settled and not acc.launched_twice and not acc.shared, acc.line()
    assert took <= SETTLE_S, f"round {round_no}: settled {took:.1f}s after the crash"

    def no_leak() -> bool:
        return not account(url, headers, rows, redis_url).leaked

    wait_for(no_leak, 60, f"round {round_no}: leftovers to be terminated", up.home / "logs")
    cancel_all(url, headers, ids)
