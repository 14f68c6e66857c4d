"""Managed-job recovery end to end on the local cloud (real API, workers and beat): a failed
run restarts up to ``max_restarts_on_errors`` times and always on a listed exit code, each
restart on a new machine down the chain (other regions first, as EAGER_NEXT_REGION says), and
`corral status` shows every run with its cost summed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import System

pytestmark = pytest.mark.integration

WHERE = {"cloud": "local", "instance_type": "cpu-2"}


def _system(make_system: Callable[..., System]) -> System:
    system = make_system()
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


def test_a_failing_job_restarts_up_to_its_limit_then_fails_with_every_run_shown(
    make_system: Callable[..., System],
) -> None:
    system = _system(make_system)
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
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    system = _system(make_system)
    marker = tmp_path / "second-time"
    run = f"if [ -e {marker} ]; then echo recovered; exit 0; fi; touch {marker}; exit 33"
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
    plain = system.submit({"name": "plain", "resources": WHERE, "run": "exit 33"})
    done = system.wait_state(plain, {"FAILED", "SUCCEEDED"}, 60)
    assert done["state"] == "FAILED" and len(done["runs"]) == 1
