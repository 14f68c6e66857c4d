"""``corral validate``, run as the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CORRAL = Path(sys.executable).parent / "corral"
SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def corral(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CORRAL), *map(str, args)], capture_output=True, text=True, timeout=120
    )


# fmt: off
# (seed file, text replaced, replacement, line, field, what the message must say)
BROKEN = [
    # machine pool: a typo'd key, a wrong enum, a wrong type
    ("anyscale-machine-pool-aws.yaml", "  market_type: ON_DEMAND", "  market_typ: ON_DEMAND",
     6, "machine_types[0].launch_templates[0].market_typ", "unknown field"),
    ("anyscale-machine-pool-aws.yaml", "market_type: SPOT", "market_type: SPOTTY",
     17, "machine_types[1].launch_templates[0].market_type", "expected one of ON_DEMAND, SPOT"),
    ("anyscale-machine-pool-aws.yaml", "        size: 2\n  - machine_type: spot-a100",
     "        size: two\n  - machine_type: spot-a100",
     13, "machine_types[0].partitions[0].size", "valid integer"),
    ("anyscale-machine-pool-gcp.yaml", "kind: ANYSCALE_MANAGED", "kind: ANYSCALE",
     1, "kind", "expected one of ANYSCALE_MANAGED, CUSTOMER_MANAGED"),
    # compute config
    ("anyscale-compute-config-aws.yaml", "replacement_threshold: 1m", "replacement_treshold: 1m",
     17, "flags.replacement_treshold", "unknown field"),
    ("anyscale-compute-config-aws.yaml", "ranker_type: custom_group_order", "ranker_type: custom",
     19, "flags.instance_ranking_strategy[0].ranker_type", "expected one of custom_group_order"),
    ("anyscale-compute-config-gcp.yaml", "replacement_threshold: 1m", "replacement_threshold: 1",
     17, "flags.replacement_threshold", "expected a duration like 30s, 1m or 2h"),
    ("anyscale-compute-config-gcp.yaml", "enable_replacement: true", "enable_replacement: often",
     21, "flags.instance_ranking_strategy[0].ranker_config.enable_replacement", "valid boolean"),
    # Determined master config
    ("determined-master-round-robin-worst.yaml", "  fitting_policy: best", "  fiting_policy: best",
     5, "resource_manager.scheduler.fiting_policy", "unknown field"),
    ("determined-master-round-robin-worst.yaml", "type: round_robin", "type: round_robbin",
     4, "resource_manager.scheduler.type", "expected one of fair_share, priority, round_robin"),
    ("determined-master-two-pools.yaml", "max_instances: 2", "max_instances: two",
     32, "resource_pools[0].provider.max_instances", "valid integer"),
    ("determined-master-legacy.yaml", "  type: priority", "  type: prio",
     5, "scheduler.type", "expected one of fair_share, priority, round_robin"),
    # task
    ("skypilot-task-ordered.yaml", "accelerators: A100-80GB", "accelerator: A100-80GB",
     4, "resources.ordered[0].accelerator", "unknown field"),
    ("skypilot-task-ordered.yaml", "cloud: azure", "cloud: azur",
     6, "resources.ordered[2].cloud", "expected a cloud name"),
    ("skypilot-task-accelerators-a100.yaml", "accelerators: A100\n", "accelerators: A100:eight\n",
     2, "resources.accelerators", "whole accelerator count >= 1"),
    ("determined-task-resource-pool.yaml", "resource_pool: pool1", "resource_pool: [pool1]",
     2, "resources.resource_pool", "valid string"),
    # Ray cluster
    ("ray-cluster-node-types.yaml", "        min_workers: 1", "        min_worker: 1",
     14, "available_node_types.cpu_4_ondemand.min_worker", "unknown field"),
    ("ray-cluster-autoscaling.yaml", "upscaling_speed: 1.0", "upscaling_speed: quick",
     12, "upscaling_speed", "valid number"),
    ("ray-cluster-basic.yaml", "max_workers: 0", "max_workers: -1",
     5, "max_workers", "greater than or equal to 0"),
]
# fmt: on


@pytest.fixture(scope="module")
def broken_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """One broken copy of a seed per case (one mistake each)."""
    folder = tmp_path_factory.mktemp("broken")
    paths = []
    for i, (seed, old, new, *_rest) in enumerate(BROKEN):
        text = (SEEDS / seed).read_text()
        assert old in text, f"{seed} no longer contains {old!r}"
        path = folder / f"{i:02d}-{seed}"
        path.write_text(text.replace(old, new, 1))
        paths.append(path)
    return paths


def test_every_seed_validates_as_written() -> None:
    seeds = sorted(SEEDS.glob("*.yaml"))
    result = corral("validate", *seeds)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(seeds)
    assert f"{SEEDS / 'anyscale-machine-pool-aws.yaml'}: ok (machine_pool)" in lines
    assert f"{SEEDS / 'ray-cluster-basic.yaml'}: ok (cluster)" in lines
    # Notices go to stderr, one line each, naming file, line and field.
    notice = "auth: accepted; Corral's node agents connect out to Corral: no SSH login is made"
    assert f"{SEEDS / 'ray-cluster-basic.yaml'}:12: {notice}" in result.stderr


def test_broken_copies_fail_with_field_and_line(broken_files: list[Path]) -> None:
    result = corral("validate", "--json", *broken_files)
    assert result.returncode == 2
    report = json.loads(result.stdout)["files"]
    assert [r["file"] for r in report] == [str(p) for p in broken_files]
    for entry, (seed, _old, _new, line, field, needle) in zip(report, BROKEN, strict=True):
        assert entry["ok"] is False, seed
        assert [(i["line"], i["field"]) for i in entry["issues"]] == [(line, field)], seed
        assert needle in entry["issues"][0]["message"], (seed, entry["issues"])


def test_text_output_is_file_line_field_message(broken_files: list[Path]) -> None:
    result = corral("validate", broken_files[9], SEEDS / "determined-master-corrected.yaml")
    assert result.returncode == 2
    assert result.stdout == f"{SEEDS / 'determined-master-corrected.yaml'}: ok (master_config)\n"
    assert result.stderr == (
        f"{broken_files[9]}:4: resource_manager.scheduler.type: expected one of fair_share, "
        "priority, round_robin, got 'round_robbin'\n"
    )


def test_unknown_kind_lists_the_kinds(tmp_path: Path) -> None:
    path = tmp_path / "mystery.yaml"
    path.write_text("colour: blue\n")
    result = corral("validate", path)
    assert result.returncode == 2
    assert "machine_pool, compute_config, master_config, task, cluster" in result.stderr
    assert "Traceback" not in result.stderr


def test_kind_option_overrides_detection(tmp_path: Path) -> None:
    path = tmp_path / "just-a-name.yaml"
    path.write_text("name: hello\n")
    assert corral("validate", "--kind", "task", path).stdout.strip().endswith("ok (task)")
    as_cluster = corral("validate", "--kind", "cluster", "--json", path)
    assert as_cluster.returncode == 2
    [entry] = json.loads(as_cluster.stdout)["files"]
    assert entry["kind"] == "cluster"
    assert {i["field"] for i in entry["issues"]} == {"name", "cluster_name", "provider"}
    assert corral("validate", "--kind", "nonsense", path).returncode == 2


def test_json_report_shape(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nevent_callback: echo\n")
    result = corral("validate", "--json", task, tmp_path / "missing.yaml")
    assert result.returncode == 2
    assert json.loads(result.stdout) == {
        "files": [
            {
                "file": str(task),
                "kind": "task",
                "ok": True,
                "issues": [],
                "notices": [
                    f"{task}:2: event_callback: accepted; no callback is run: follow "
                    "`corral status` and the events API"
                ],
            },
            {
                "file": str(tmp_path / "missing.yaml"),
                "kind": None,
                "ok": False,
                "issues": [
                    {
                        "file": str(tmp_path / "missing.yaml"),
                        "line": None,
                        "field": "",
                        "message": "no such file",
                    }
                ],
                "notices": [],
            },
        ],
        "count": 2,
    }


def test_json_input_validates(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    path.write_text(
        json.dumps(
            {
                "kind": "ANYSCALE_MANAGED",
                "machine_types": [
                    {
                        "machine_type": "m",
                        "launch_templates": [{"instance_type": "p4d.24xlarge"}],
                        "partitions": [{"name": "any", "size": 1}],
                    }
                ],
            }
        )
    )
    result = corral("validate", path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{path}: ok (machine_pool)"
