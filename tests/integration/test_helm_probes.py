"""The chart's beat liveness probe, run as the kubelet would (its rendered command, in a
process of its own) against a real redis-server holding redbeat's schedule.

Workers' probes ask their /metrics port, served as tests/integration/test_metrics.py shows;
Flower's ask its /healthcheck; the API's its /healthz.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from helm_chart import BASE, FULL, merged, of_kind, render

from harness import free_port, wait_for

pytestmark = pytest.mark.integration

SCHEDULE = "corral:redbeat::schedule"  # the sorted set state_metrics reads beat lag from


def probe_command(max_lag_s: int = 300) -> list[str]:
    docs = render(merged(BASE, {"beat": {"maxLagSeconds": max_lag_s}}))
    [beat] = of_kind(docs, "Deployment")[f"{FULL}-beat"]["spec"]["template"]["spec"]["containers"]
    command: list[str] = beat["livenessProbe"]["exec"]["command"]
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def run_probe(url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CORRAL_REDIS_URL": url, "CORRAL_HOME": str(home)}
    return subprocess.run(probe_command(), env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("entries", "alive"),
    [
        ({}, True),  # nothing scheduled yet (a first install)
        ({"reconcile": +30}, True),  # due in 30 s
        ({"reconcile": -100}, True),  # 100 s late: within beat.maxLagSeconds (300)
        ({"reconcile": +30, "tick": -1000}, False),  # one entry 1000 s late
        # redbeat scores an entry that never runs again below zero: not lag.
        ({"once": "never", "reconcile": +5}, True),
    ],
)
def test_beat_probe_fails_only_when_the_schedule_falls_behind(
    redis_url: str, tmp_path: Path, entries: dict[str, int | str], alive: bool
) -> None:
    now = time.time()
    client = redis.Redis.from_url(redis_url)
    scores = {
        f"corral:redbeat:{name}": (-1.0 if due == "never" else now + float(due))
        for name, due in entries.items()
    }
    if scores:
        client.zadd(SCHEDULE, scores)
    done = run_probe(redis_url, tmp_path)
    assert (done.returncode == 0) is alive, done.stderr
    if not alive:  # 1000 s and the probe's own start-up
        assert re.fullmatch(r"beat is 10\d\d s behind\n", done.stderr), done.stderr


def test_beat_probe_passes_when_redis_is_not_there(tmp_path: Path) -> None:
    """A restart of beat would not bring Redis back: the probe says so and passes."""
    done = run_probe(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "redis not reached" in done.stdout


def test_beat_probe_reads_the_schedule_a_real_beat_keeps(
    make_system: Any, redis_url: str, tmp_path: Path
) -> None:
    """The key the probe reads is the one `corral run beat` (redbeat) writes: it passes while
    beat runs, and fails once beat is gone and its entries have fallen 1000 s behind."""
    system = make_system()
    system.start_beat()
    client = redis.Redis.from_url(redis_url)
    wait_for(lambda: client.zcard(SCHEDULE) > 0, 60, "beat to write its schedule")
    assert run_probe(redis_url, tmp_path).returncode == 0
    system.stop()
    late = time.time() - 1000
    client.zadd(SCHEDULE, {member: late for member in client.zrange(SCHEDULE, 0, -1)})
    done = run_probe(redis_url, tmp_path)
    assert done.returncode == 1 and "behind" in done.stderr, done.stderr
