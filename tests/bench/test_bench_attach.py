"""What a relayed session costs (docs/attach.md), on the local cloud: the API, the workers
and beat as processes over the test's redis-server, one service running.

- ``corral attach`` end to end (the CLI starting, the session queued, taken on the agent's next
  heartbeat, a shell on pipes running ``exit 0``): median wall seconds;
- a byte's round trip once the session runs (user -> API -> Redis -> agent -> ``cat`` and
  back): median and 90th percentile milliseconds, next to one bare API read (``status``);
- throughput from the node to the user (``head -c N /dev/zero`` read to its end): MB/s.

``CORRAL_BENCH_SCALE=small``: 3 attaches, 20 round trips, 4 MB; full: 9, 100, 32 MB. The
assertions are stall guards (a shared machine); the figures are printed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from corral.services.client import Client

from harness import CORRAL

pytestmark = [pytest.mark.bench, pytest.mark.integration]

SMALL = os.environ.get("CORRAL_BENCH_SCALE") == "small"
ATTACHES, TRIPS, BYTES = (3, 20, 4_000_000) if SMALL else (9, 100, 32_000_000)


def test_bench_attach_costs(make_system: Callable[..., Any]) -> None:
    system = make_system()
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    with Client(system.api_url, system.token, timeout_s=120) as client:
        rid = client.launch({"resources": {"cloud": "local", "instance_type": "cpu-2"}}).id
        assert client.wait(rid, timeout_s=120).state == "RUNNING"

        walls = []
        for _ in range(ATTACHES):
            started = time.perf_counter()
            done = subprocess.run(
                [CORRAL, "attach", rid], input=b"exit 0\n", env=env, capture_output=True,
                timeout=60,
            )  # fmt: skip
            walls.append(time.perf_counter() - started)
            assert done.returncode == 0, done.stderr

        bare = []  # an authenticated API read that waits for nothing: the floor of a hop
        for _ in range(TRIPS):
            started = time.perf_counter()
            client.status(rid)
            bare.append(time.perf_counter() - started)

        sid = client.open_session(rid, "shell", command="cat")
        client.session_write(sid, b"w")
        assert client.session_read(sid, 20).data == b"w"  # the agent has taken it
        trips = []
        for _ in range(TRIPS):
            started = time.perf_counter()
            client.session_write(sid, b"x")
            got = b""
            while got != b"x":
                got += client.session_read(sid, 10).data
            trips.append(time.perf_counter() - started)
        client.session_write(sid, b"", eof=True)

        sid = client.open_session(rid, "shell", command=f"head -c {BYTES} /dev/zero")
        first = client.session_read(sid, 20)
        started, total = time.perf_counter(), len(first.data)
        while not (got := client.session_read(sid, 10)).eof:
            total += len(got.data)
        total += len(got.data)
        seconds = time.perf_counter() - started
        client.terminate(rid)

    assert total == BYTES
    trips.sort()
    print(
        f"\nattach end to end: median {statistics.median(walls):.2f} s over {ATTACHES} "
        f"(heartbeat 1 s)\nround trip: median {1000 * statistics.median(trips):.1f} ms, "
        f"p90 {1000 * trips[int(0.9 * len(trips))]:.1f} ms over {TRIPS} (one bare API read "
        f"{1000 * statistics.median(bare):.1f} ms; a trip is a write and a read)\n"
        f"node -> user: {BYTES / seconds / 1e6:.1f} MB/s ({BYTES:,} bytes)"
    )
    assert statistics.median(walls) < 20 and statistics.median(trips) < 2.0
