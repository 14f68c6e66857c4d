"""Chaos on `corral up`: launches in waves while, at random every second or two, a worker of
some role (its whole process group, or one pool process), beat, the API or redis-server is
SIGKILLed, or Redis is paused (SIGSTOP, SIGCONT 1-3 s later). `corral up` restarts whatever
died. It prints the account: requests lost (never RUNNING), failed for a control-plane
reason, launched twice (a request on more than one machine, or a machine two requests hold),
leaked (machines still running once every request was cancelled); all must be 0.

The default run does one short wave (CORRAL_CHAOS_LAUNCHES=15, at most CORRAL_CHAOS_STRIKES=8
faults); ``make chaos`` does 300 launches in waves of 30."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from faults import (
    Account,
    Monkey,
    account,
    cancel_all,
    submit_patiently,
    wait_ready,
    wait_settled,
)
from harness import REPO, Up, processes_of, wait_for

pytestmark = pytest.mark.integration

LAUNCHES = int(os.environ.get("CORRAL_CHAOS_LAUNCHES", "15"))
WAVE = 30  # launches at once (the chaos cloud holds 120 machines)
STRIKES = int(os.environ.get("CORRAL_CHAOS_STRIKES", "8"))  # faults per wave, at most
SEED = int(os.environ.get("CORRAL_CHAOS_SEED", "13"))


def test_chaos_loses_fails_duplicates_and_leaks_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = Up(home, REPO / "tests/fixtures/localcloud/chaos.yaml", timers={})
    rng = random.Random(SEED)
    total = Account()
    faults: Counter[str] = Counter()
    unaccepted = 0
    try:
        url, headers = wait_ready(up)
        started = time.monotonic()
        redis_url = (home / "redis-url").read_text().strip()
        for wave, start in enumerate(range(0, LAUNCHES, WAVE)):
            names = [f"w{wave}-{i}" for i in range(start, min(LAUNCHES, start + WAVE))]
            with Monkey(up, rng, STRIKES) as monkey:
                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    got = pool.map(lambda n: submit_patiently(url, headers, n), names)
                    ids = [rid for rid in got if rid]
                rows = wait_settled(url, headers, ids, timeout_s=120)
            faults += monkey.faults
            unaccepted += len(names) - len(ids)
            _wait_api(url)  # the API may be restarting after the last strike
            rows = wait_settled(url, headers, ids, timeout_s=60)
            acc = account(url, headers, rows, redis_url)
            cancel_all(url, headers, ids)
            _wait_drained(home)
            acc.leaked = _still_running(home)  # leftovers of killed attempts are terminated
            _add(total, acc)
            print(f"wave {wave}: {acc.line()}; faults {dict(monkey.faults)}", flush=True)
        print(
            f"chaos: {LAUNCHES} launches, {sum(faults.values())} faults {dict(faults)}: "
            f"lost {len(total.not_settled) + unaccepted}, failed for a control-plane reason "
            f"{total.control_plane_failures} (failed in all {len(total.failed)}), launched "
            f"twice {len(total.launched_twice) + total.shared}, leaked {len(total.leaked)} "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        assert unaccepted == 0 and not total.not_settled, total.not_settled[:5]
        assert not total.failed, total.failed[:5]
        assert not total.launched_twice and not total.shared
        assert not total.leaked, total.leaked[:5]
    finally:
        assert up.stop() == 0, up.output()[-3000:]


def _add(total: Account, acc: Account) -> None:
    total.requests += acc.requests
    total.running += acc.running
    total.failed += acc.failed
    total.control_plane_failures += acc.control_plane_failures
    total.not_settled += acc.not_settled
    total.launched_twice += acc.launched_twice
    total.shared += acc.shared
    total.leaked += acc.leaked


def _agents(home: Path) -> list[int]:
    from local_processes import is_agent

    return [p for p in processes_of(home) if is_agent(Path(f"/proc/{p}"))]


def _wait_api(url: str) -> None:
    def answers() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        return False

    wait_for(answers, 60, "the API to answer")


def _wait_drained(home: Path) -> None:
    """Every machine of the wave gone (cancelled requests terminate theirs)."""
    with contextlib.suppress(pytest.fail.Exception):
        wait_for(lambda: not _agents(home), 90, "the wave's machines to be terminated")


def _still_running(home: Path) -> list[str]:
    return [f"agent pid {p}" for p in _agents(home)]
