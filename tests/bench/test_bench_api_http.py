"""The API's CPU per HTTP request as `corral run api` serves it (uvicorn on a real socket, the
guards, the access log, the thread pool), read from the API process's own CPU counters:

- ``GET /healthz``: the floor of any call (the HTTP parsing and answer, the middleware, the
  hop to the thread pool and back, one Redis PING);
- ``POST /v1/requests``: a submit, with its store writes and the admission's send.

The in-process submit benchmark (``test_bench_api_submit_cpu.py``) times the app alone; what
this one adds over it is the server. Eight client threads on kept-alive connections, as the
boots benchmark submits. Each figure is the best of ``ROUNDS`` bursts (contention on a shared
host only ever adds CPU time). ``CORRAL_BENCH_SCALE=small``: bursts of 100; full: 1,000. The
assertion is a stall guard.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import System, one_zone_cloud

pytestmark = [pytest.mark.bench, pytest.mark.integration]

SMALL = os.environ.get("CORRAL_BENCH_SCALE") == "small"
CALLS = 100 if SMALL else 1000
ROUNDS = 3
TICKS = os.sysconf("SC_CLK_TCK")
TASK = {"resources": {"cloud": "local", "instance_type": "cpu-2"}}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _burst(pid: int, call: Callable[[int], None]) -> float:
    """The API's CPU ms per call over ``CALLS`` calls from eight threads."""
    before = _cpu_s(pid)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(call, range(CALLS)))
    return (_cpu_s(pid) - before) / CALLS * 1000


def test_the_apis_cpu_per_http_request(make_system: Callable[..., System], tmp_path: Path) -> None:
    # Machines that never boot within the test: the submits' admissions are not run (no
    # worker), so only the API's part of a launch is counted.
    system = make_system(one_zone_cloud(tmp_path / "cloud.yaml", CALLS * ROUNDS + 10, 600.0))
    system.start_api()
    pid = system.procs["api"].pid

    with system.client() as client:

        def health(_: int) -> None:
            assert client.get("/healthz").status_code == 200

        def submit(i: int) -> None:
            resp = client.post("/v1/requests", json={"task": {**TASK, "name": f"h{i}"}})
            assert resp.status_code == 201, resp.text

        health(0), submit(0)  # connections, the routes' first calls
        floor = min(_burst(pid, health) for _ in range(ROUNDS))
        submits = min(_burst(pid, submit) for _ in range(ROUNDS))
    print(
        f"\nAPI over HTTP: {floor:.2f} ms of the API's CPU per GET /healthz (the floor of a "
        f"call), {submits:.2f} ms per submit; the floor is {floor / submits:.0%} of a submit "
        f"(best of {ROUNDS} bursts of {CALLS}, 8 client threads)"
    )
    assert floor < 100 and submits < 200  # a stall guard, not a target
