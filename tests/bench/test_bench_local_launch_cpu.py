"""The runtime's CPU per launch on the real local cloud, in process (issue #48's launch cost).

The launch-cost benchmark counts every process of `corral up`, where a change of a fraction of
a millisecond in the runtime's own steps drowns in the shared host's noise. Here the steps run
as the Celery tasks run them, without Celery (``tests/runtime_driver.py``), against the real
local cloud (its Redis records, its launcher forking agents that run ``true``) on the test's
redis-server: a burst of short jobs is admitted (each admission runs its first attempt), the
jobs end, and the boot watch looks until every request is SUCCEEDED (the look finishes them:
RUNNING and SUCCEEDED in one write, their machines let go). Each part is timed with
``time.process_time`` and divided by the burst's size; the figure of each part is its best
burst (contention on a shared host only ever adds CPU time). The agents' and the launcher's
CPU is theirs, not this process's.

``CORRAL_BENCH_SCALE=small``: 3 bursts of 20 jobs. Full: 5 bursts of 60. The assertion is a
stall guard.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_driver import Driver

from corral.services.queues import dispatch
from corral.services.runtime import boots, provisioning, requests
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings
from corral.shared.config.task import Task
from corral.shared.lifecycle import RequestState

from harness import one_zone_cloud

pytestmark = [pytest.mark.bench, pytest.mark.integration]

SMALL = os.environ.get("CORRAL_BENCH_SCALE") == "small"
BURSTS, JOBS = (3, 20) if SMALL else (5, 60)
JOB = {"resources": {"cloud": "local", "instance_type": "cpu-2"}, "run": "true"}


@pytest.fixture
def driver(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Driver]:
    settings = Settings(
        redis_url=redis_url,
        prefix=f"b{uuid.uuid4().hex[:8]}",
        home=tmp_path / "home",
        clouds=["local"],
        local_cloud_file=one_zone_cloud(tmp_path / "cloud.yaml", JOBS * (BURSTS + 2)),
    )
    deps = Deps(settings)
    drv = Driver(deps, None)  # type: ignore[arg-type]  # the real local cloud, no fake
    monkeypatch.setattr(dispatch, "send", drv.send)
    yield drv
    deps.provider("local").stop_launcher()  # type: ignore[attr-defined]


def _burst(driver: Driver) -> tuple[float, float]:
    """CPU ms per launch of a burst's admissions and of the boot watch's looks that end it."""
    deps = driver.deps
    ids = [
        requests.submit(deps, Task.model_validate({**JOB, "name": f"j{n}"})).id for n in range(JOBS)
    ]
    admissions = [p for p in driver.queue if p.name == dispatch.ADMIT]
    driver.queue.clear()  # the watch is run below, by hand
    start = time.process_time()
    for published in admissions:
        provisioning.admit(deps, *published.args)
    admitted = time.process_time() - start
    watched, looks = 0.0, 0
    while True:
        time.sleep(0.5)  # the agents run `true` and report its end
        start = time.process_time()
        boots.watch(deps, "local")
        watched += time.process_time() - start
        looks += 1
        states = {r.state for r in deps.store.load_requests(ids)}
        if states == {RequestState.SUCCEEDED}:
            break
        assert looks < 40, f"still {states} after {looks} looks"
    driver.queue.clear()
    return admitted / JOBS * 1000, watched / JOBS * 1000


def test_the_runtimes_cpu_per_launch_on_the_local_cloud(driver: Driver) -> None:
    _burst(driver)  # connections, scripts, the launcher and the catalog warm
    runs = [_burst(driver) for _ in range(BURSTS)]
    admission, watch = (min(part) for part in zip(*runs, strict=True))
    print(
        f"\nlocal launch CPU: {admission + watch:.2f} ms of the runtime per launch "
        f"(admission with its attempt {admission:.2f}, boot watch {watch:.2f}; best of "
        f"{BURSTS} bursts of {JOBS} short jobs, in process)"
    )
    assert admission + watch < 200  # a stall guard, not a target
