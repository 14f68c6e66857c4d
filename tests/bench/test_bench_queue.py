"""Queue-path benchmark: launch requests per second end to end on the local cloud (HTTP submit
-> admission -> attempt -> node agent up -> RUNNING), against no-op Celery tasks per second
through the same Redis and the same kind of worker, in the same run.

Prints both rates and their ratio. The ratio says how much of a launch is Corral's own work
(planning, compare-and-set writes, the agent process) beyond the queue itself.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from corral.services.queues import dispatch
from corral.services.settings import Settings

from harness import REPO, System, wait_for

pytestmark = [pytest.mark.bench, pytest.mark.integration]


def _scale() -> tuple[int, int]:
    """(launch requests, no-op tasks)."""
    return (20, 200) if os.environ.get("CORRAL_BENCH_SCALE") == "small" else (100, 2000)


def _noop_rate(system: System, count: int) -> float:
    settings = Settings(redis_url=system.env["CORRAL_REDIS_URL"])
    app = Celery("bench", set_as_current=False)
    app.conf.update(dispatch.celery_config(settings))
    client = redis.Redis.from_url(settings.redis_url or "")
    start = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for _ in range(count):
            app.send_task(dispatch.PING, queue=dispatch.SCHEDULE_QUEUE, producer=producer)

    def drained() -> bool:
        return client.llen(dispatch.SCHEDULE_QUEUE) == 0 and client.hlen("unacked") == 0

    wait_for(drained, 300, "the no-op tasks to drain")
    return count / (time.perf_counter() - start)


def _launch_rate(system: System, count: int) -> float:
    task = {"resources": {"cloud": "local", "instance_type": "cpu-2"}}
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: system.submit({**task, "name": f"b{i}"}), range(count)))

    def all_running() -> bool:
        with system.client() as c:
            rows = c.get("/v1/requests", params={"state": "RUNNING", "limit": count + 10}).json()
        rows = rows["requests"] if isinstance(rows, dict) else rows
        return len(rows) >= count

    wait_for(all_running, 600, f"{count} requests to run", system.home / "logs")
    elapsed = time.perf_counter() - start
    with system.client() as c:
        for rid in ids:
            c.post(f"/v1/requests/{rid}/terminate")
    return count / elapsed


def test_launch_path_against_noop_tasks(make_system: Callable[..., System]) -> None:
    launches, noops = _scale()
    system = make_system(REPO / "tests" / "fixtures" / "localcloud" / "bench.yaml")
    system.start_api()
    system.start_worker("schedule", concurrency=2)
    system.start_worker("provision", concurrency=2)
    time.sleep(3)  # workers ready
    noop_per_s = _noop_rate(system, noops)
    launch_per_s = _launch_rate(system, launches)
    ratio = noop_per_s / launch_per_s
    print(
        f"\nqueue path: {launch_per_s:.1f} launch requests/s end to end ({launches} requests); "
        f"{noop_per_s:.0f} no-op tasks/s ({noops} tasks); a launch costs {ratio:.1f} no-op tasks"
    )
    assert launch_per_s > 0.5  # a floor far below what 2 cores do, to catch a stall
