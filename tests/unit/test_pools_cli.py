"""``corral pools resolve`` and ``corral pools route``, run as the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CORRAL = Path(sys.executable).parent / "corral"
SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def corral(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CORRAL), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_resolve_json_applies_all_or_nothing() -> None:
    result = corral(
        "pools", "resolve", SEEDS / "determined-master-round-robin-worst.yaml", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "default_aux_resource_pool": "pool1",
        "default_compute_resource_pool": "pool1",
        "pools": [
            {
                "pool_name": "pool1",
                "description": None,
                "scheduler": {
                    "type": "priority",
                    "fitting_policy": "worst",
                    "preemption": None,
                    "allow_heterogeneous_fits": None,
                    "default_priority": None,
                    "inherited": False,
                },
                "provider": None,
            }
        ],
    }


def test_resolve_table_for_people() -> None:
    result = corral("pools", "resolve", SEEDS / "determined-master-two-pools.yaml")
    assert result.returncode == 0, result.stderr
    header, cpu, v100 = result.stdout.splitlines()
    assert header.split() == [
        "POOL",
        "SCHEDULER",
        "FITTING",
        "PREEMPTION",
        "INHERITED",
        "PROVIDER",
        "DEFAULT",
        "FOR",
    ]
    assert cpu.split() == ["aws-cpu", "priority", "best", "true", "yes", "aws", "m5.large", "aux"]
    assert v100.split()[0] == "aws-v100" and v100.split()[-1] == "compute"
    assert "port: accepted; Corral is the master: its own settings and API apply" in result.stderr


def test_resolve_legacy() -> None:
    result = corral("pools", "resolve", SEEDS / "determined-master-legacy.yaml", "--json")
    resolved = json.loads(result.stdout)
    assert [p["pool_name"] for p in resolved["pools"]] == ["default"]
    assert resolved["default_aux_resource_pool"] == resolved["default_compute_resource_pool"]
    assert resolved["pools"][0]["provider"]["max_idle_agent_period_s"] == 1200.0


def test_resolve_refuses_a_missing_default_pool(tmp_path: Path) -> None:
    master = tmp_path / "master.yaml"
    master.write_text(
        "resource_manager:\n  default_aux_resource_pool: cpu\n"
        "  default_compute_resource_pool: gpu\nresource_pools:\n  - pool_name: cpu\n"
    )
    result = corral("pools", "resolve", master)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"{master}:3: resource_manager.default_compute_resource_pool: names no pool 'gpu'; "
        "expected one of cpu"
    )


def test_route(tmp_path: Path) -> None:
    master = SEEDS / "determined-master-two-pools.yaml"
    tensorboard = tmp_path / "tb.yaml"
    tensorboard.write_text("name: tb\nresources:\n  slots: 0\n")
    cases = {
        SEEDS / "skypilot-task-accelerators-a100.yaml": "aws-v100",
        tensorboard: "aws-cpu",
    }
    for task, pool in cases.items():
        result = corral("pools", "route", master, task, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"pool": pool}
    text = corral("pools", "route", master, tensorboard)
    assert text.stdout.strip() == "aws-cpu  (the default aux pool for a task of 0 slots)"


def test_route_to_an_unknown_pool_is_exit_2() -> None:
    result = corral(
        "pools",
        "route",
        SEEDS / "determined-master-two-pools.yaml",
        SEEDS / "determined-task-resource-pool.yaml",
    )
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "determined-task-resource-pool.yaml:2: resources.resource_pool: resource pool 'pool1' "
        "does not exist; expected one of aws-cpu, aws-v100"
    )
    ok = corral(
        "pools",
        "route",
        SEEDS / "determined-master-corrected.yaml",
        SEEDS / "determined-task-resource-pool.yaml",
        "--json",
    )
    assert json.loads(ok.stdout) == {"pool": "pool1"}
