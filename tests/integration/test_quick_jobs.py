"""Quick multi-node jobs under load end by their exit codes, never taken for lost.

Issue #46: under load (about one run in six), one node of a 2-node job whose run exited within
about 2 s was marked ``LOST: its process is gone``: reconcile asked the cloud, then read the
store, and a machine launched and up between the two was missing from the cloud's answer. The
zone was blocked for 150 s and the request relaunched (left WAITING) instead of ending by its
exit code. The unit test pinning the order is
``tests/unit/runtime/test_runtime_steps.py::test_a_machine_that_came_up_while_reconcile_asked_its_cloud_is_not_taken_for_lost``.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from corral.services.state.blocks import BlockStore

from harness import REPO, System, wait_for

pytestmark = pytest.mark.integration

FINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"}
JOBS = 50


def _job(i: int) -> dict[str, Any]:
    """A 2-node job that exits within a second: every third with code 3, the rest 0."""
    code = 3 if i % 3 == 0 else 0
    return {
        "name": f"quick-{i}",
        "num_nodes": 2,
        "resources": {"cloud": "local", "instance_type": "cpu-2"},
        "run": f"sleep 0.{i % 10}; exit {code}",
    }


def test_fifty_quick_two_node_jobs_end_by_their_exit_codes_with_no_node_lost(
    make_system: Callable[..., System],
) -> None:
    # Reconcile looks four times as often as by default: more looks overlap the launches.
    system = make_system(
        REPO / "tests" / "fixtures" / "localcloud" / "quick.yaml", RECONCILE_INTERVAL_S="0.5"
    )
    system.start_api()
    for i in range(2):
        system.start_worker("schedule", f"schedule-{i}")
        system.start_worker("provision", f"provision-{i}")
    system.start_beat()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        ids = list(pool.map(lambda i: system.submit(_job(i)), range(JOBS)))
    rows: dict[str, dict[str, Any]] = {}

    def all_final() -> bool:
        time.sleep(0.4)  # a listing of 50 requests with their instances, twice a second
        listed = system.get(f"/v1/requests?limit={4 * JOBS}").json()["requests"]
        rows.clear()
        rows.update((r["id"], r) for r in listed)
        return all(rows.get(rid, {}).get("state") in FINAL for rid in ids)

    wait_for(all_final, 120, "all 50 jobs to end", system.home / "logs")
    lost = [
        (rid, i["id"], i.get("state"))
        for rid in ids
        for i in rows[rid]["instances"]
        if i.get("state") == "LOST"
    ]
    assert lost == [], lost
    for i, rid in enumerate(ids):
        req = rows[rid]
        want = ("FAILED", 3) if i % 3 == 0 else ("SUCCEEDED", 0)
        assert (req["state"], req["exit_code"]) == want, req
        assert not req.get("relaunches"), req
        assert len(req["instances"]) == 2, req["instances"]
    # No zone was blocked for a machine taken for lost (a lost machine blocks its zone for
    # 150 s). A zone whose 60 machines were all busy at a moment (100 nodes in all, slower to
    # end on a loaded host) may be remembered as sold out: that one is true.
    blocks = BlockStore(redis.Redis.from_url(system.env["CORRAL_REDIS_URL"])).active(time.time())
    assert [b for b in blocks if b.outcome != "capacity"] == [], blocks
