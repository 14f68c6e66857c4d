"""Managed-job recovery end to end on the local cloud (real API, workers and beat): a failed
run restarts up to ``max_restarts_on_errors`` times and always on a listed exit code, each
restart on a new machine down the chain (other regions first, as EAGER_NEXT_REGION says), and
`corral status` shows every run with its cost summed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from harness import System

pytestmark = pytest.mark.integration

WHERE = {"cloud": "local", "instance_type": "cpu-2"}


@pytest.fixture(scope="module")
def system(make_module_system: Callable[..., System]) -> System:
    """One installation for the module (the pool test's passes every half second): each test
    launches requests of its own, and the pool is the pool test's alone."""
    system = make_module_system(POOL_REBALANCE_INTERVAL_S="0.5")
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


def test_a_failing_job_restarts_up_to_its_limit_then_fails_with_every_run_shown(
    system: System,
) -> None:
    rid = system.submit(
        {
            "name": "flaky",
            "resources": {**WHERE, "job_recovery": {"max_restarts_on_errors": 1}},
            "run": "echo attempt; exit 5",
        }
    )
    done = system.wait_state(rid, {"FAILED", "SUCCEEDED"}, 90)
    assert done["state"] == "FAILED" and done["exit_code"] == 5, done
    assert done["restarts"] == 1
    assert [r["outcome"] for r in done["runs"]] == ["exited 5", "exited 5"]
    # EAGER_NEXT_REGION: the restart went to the other region first.
    assert done["runs"][0]["region"] != done["runs"][1]["region"]
    assert done["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in done["runs"]), abs=1e-5)
    assert all(r["cost_usd"] > 0 for r in done["runs"])

    shown = system.cli("status", rid)
    assert shown.returncode == 0, shown.stderr
    assert "runs" in shown.stdout and shown.stdout.count("exited 5") == 2, shown.stdout
    assert "$" in shown.stdout  # the summed cost


def test_a_listed_exit_code_always_restarts_and_the_job_then_succeeds(
    system: System, tmp_path: Path
) -> None:
    marker = tmp_path / "second-time"
    run = f"if [ -e {marker} ]; then echo recovered; exit 0; fi; touch {marker}; exit 33"
    # Without job_recovery a failing job fails at once (checked below): submitted first, it
    # runs while the other restarts.
    plain = system.submit({"name": "plain", "resources": WHERE, "run": "exit 33"})
    rid = system.submit(
        {
            "name": "nccl-timeout",
            "resources": {
                **WHERE,
                "job_recovery": {"max_restarts_on_errors": 0, "recover_on_exit_codes": [33]},
            },
            "run": run,
        }
    )
    done = system.wait_state(rid, {"FAILED", "SUCCEEDED"}, 90)
    assert done["state"] == "SUCCEEDED", done
    assert done["restarts"] == 1  # a listed code restarts past max_restarts_on_errors: 0
    assert [r["outcome"] for r in done["runs"]] == ["exited 33", "exited 0"]
    as_json = json.loads(system.cli("status", rid, "--json").stdout)
    assert len(as_json["runs"]) == 2 and as_json["cost_usd"] > 0

    # Without job_recovery a failing job fails at once: one run.
    done = system.wait_state(plain, {"FAILED", "SUCCEEDED"}, 60)
    assert done["state"] == "FAILED" and len(done["runs"]) == 1


POOL = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "cpu-2"}],
            "partitions": [{"name": "any", "size": 1}],
        }
    ],
}
COMPUTE = {
    "worker_nodes": [
        {"instance_type": "cpu", "flags": {"cloud_deployment": {"machine_pool": "small"}}}
    ]
}


def test_a_pool_workload_that_fails_restarts_in_its_pool_then_succeeds(
    system: System, tmp_path: Path
) -> None:
    pool = tmp_path / "small.yaml"
    pool.write_text(yaml.safe_dump(POOL))
    assert system.cli("pools", "apply", str(pool), "--name", "small").returncode == 0
    marker = tmp_path / "ran-once"
    task = {
        "name": "pooled-flaky",
        "compute_config": COMPUTE,
        "resources": {"job_recovery": {"max_restarts_on_errors": 2}},
        "run": f"if [ -e {marker} ]; then echo second; exit 0; fi; touch {marker}; exit 4",
    }
    rid = system.submit(task)
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "SUCCEEDED", done
    assert done["restarts"] == 1
    assert [r["outcome"] for r in done["runs"]] == ["exited 4", "exited 0"]
    # Both runs on the pool's one warm machine: the restart was queued in the pool again.
    assert len({i["provider_id"] for i in done["instances"]}) == 1
    assert all(r["cost_usd"] > 0 for r in done["runs"])  # priced by the catalog, as planned
