"""`corral pools apply` checks its file before talking to the API, `pools list` prints a plain
table, and `corral launch` sends a compute config given as a path inline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from corral.services.cli.launch_cmd import task_for_api
from corral.services.cli.pools_api_cmd import load_pool_file, pool_body, pools_table
from corral.shared.configio import ConfigError

CORRAL = str(Path(sys.executable).parent / "corral")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED_POOL = FIXTURES / "pools" / "seed-pool-local.yaml"
SEED_COMPUTE = FIXTURES / "seeds" / "anyscale-compute-config-aws.yaml"


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CORRAL_HOME": str(tmp / "home")}
    return subprocess.run([CORRAL, *args], capture_output=True, text=True, env=env, timeout=60)


def test_a_broken_pool_file_is_exit_2_naming_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "pool.yaml"
    bad.write_text(
        "kind: ANYSCALE_MANAGED\n"
        "machine_types:\n"
        "  - machine_type: a\n"
        "    launch_templates: [{instance_type: cpu-2}]\n"
        "    partitions:\n"
        "      - name: any\n"
        "        size: -2\n"
    )
    done = _run(tmp_path, "pools", "apply", str(bad))
    assert done.returncode == 2, done.stderr
    assert f"{bad}:7: machine_types[0].partitions[0].size:" in done.stderr
    assert "greater than or equal to 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_task_file_is_refused_naming_the_kinds_accepted(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nrun: echo hi\n")
    done = _run(tmp_path, "pools", "apply", str(task), "--json")
    assert done.returncode == 2
    assert f"{task}: a task file; `corral pools apply` takes a machine_pool or a " in done.stderr
    assert "master_config file" in done.stderr
    assert '"error": "invalid input"' in done.stdout


def test_a_good_file_without_an_api_is_exit_2_saying_so(tmp_path: Path) -> None:
    done = _run(tmp_path, "pools", "apply", str(SEED_POOL))
    assert done.returncode == 2
    assert "no Corral API address" in done.stderr


def test_the_body_sends_the_file_as_written_under_its_stem() -> None:
    body = pool_body(SEED_POOL, None, None)
    assert body["name"] == "seed-pool-local" and body["kind"] == "machine_pool"
    assert body["file_name"] == "seed-pool-local.yaml" and body["cloud"] is None
    first = body["spec"]["machine_types"][0]["launch_templates"][0]
    target = first["advanced_instance_config"]["CapacityReservationSpecification"]
    assert target["CapacityReservationTarget"] == {"CapacityReservationId": "r-pool-cpu"}
    assert pool_body(SEED_POOL, "other", "LOCAL")["name"] == "other"
    assert pool_body(SEED_POOL, "other", "LOCAL")["cloud"] == "local"


def test_a_duration_keeps_its_unit_so_the_api_reads_it_again(tmp_path: Path) -> None:
    pool = tmp_path / "idle.yaml"
    pool.write_text(
        "kind: ANYSCALE_MANAGED\nmachine_types:\n  - machine_type: a\n"
        "    launch_templates: [{instance_type: cpu-2}]\n"
        "    recycle_policy: {max_idle_duration: 5m}\n"
        "    partitions: [{name: any, size: 1}]\n"
    )
    spec = pool_body(pool, None, None)["spec"]
    assert spec["machine_types"][0]["recycle_policy"] == {"max_idle_duration": "5m"}


def test_a_master_config_with_a_local_provider_is_accepted(tmp_path: Path) -> None:
    master = tmp_path / "master.yaml"
    master.write_text(
        "resource_manager: {default_aux_resource_pool: cpu, default_compute_resource_pool: cpu}\n"
        "resource_pools:\n"
        "  - pool_name: cpu\n"
        "    provider: {type: local, instance_type: cpu-2, max_instances: 4}\n"
    )
    loaded = load_pool_file(master)
    assert loaded.kind == "master_config"
    assert pool_body(master, None, None)["spec"]["resource_pools"][0]["provider"]["type"] == "local"


def test_pools_table_lines_up_pools_and_their_partitions() -> None:
    views = [
        {
            "name": "seed",
            "kind": "machine_pool",
            "cloud": "local",
            "machines": [{}],
            "workloads": [{}, {}],
            "machine_types": [
                {
                    "machine_type": "reserved-a100",
                    "market": "reserved",
                    "partitions": [{"name": "any", "size": 2, "held": 1}],
                },
                {
                    "machine_type": "spot",
                    "market": "spot",
                    "partitions": [{"name": "jobs", "size": 12, "held": 0}],
                },
            ],
        },
        {"name": "det", "kind": "master_config", "cloud": "aws", "machines": [], "workloads": []},
    ]
    assert pools_table(views) == [
        "NAME  KIND           CLOUD  MACHINES  WORKLOADS",
        "seed  machine_pool   local  1         2",
        "  reserved-a100/any  1/2   reserved",
        "  spot/jobs          0/12  spot",
        "det   master_config  aws    0         0",
    ]


# ---- corral launch: compute_config given as a path -------------------------------------------


def _task(tmp_path: Path, compute_config: str) -> Path:
    task = tmp_path / "jobs" / "train.yaml"
    task.parent.mkdir(parents=True, exist_ok=True)
    task.write_text(f"name: train-a\nnum_nodes: 2\ncompute_config: {compute_config}\nrun: 'true'\n")
    return task


def test_a_relative_compute_config_path_is_read_and_sent_inline(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "cc.yaml").write_text(SEED_COMPUTE.read_text())
    data, _notices = task_for_api(_task(tmp_path, "../configs/cc.yaml"))
    assert isinstance(data["compute_config"], dict)
    assert data["compute_config"]["head_node"] == {"instance_type": "m5.2xlarge"}
    # As written (a duration keeps its unit), so the API validates what the file says.
    assert data["compute_config"]["flags"]["replacement_threshold"] == "1m"
    assert data["name"] == "train-a" and data["num_nodes"] == 2


def test_an_inline_compute_config_is_left_as_written(tmp_path: Path) -> None:
    data, _ = task_for_api(_task(tmp_path, "{head_node: {instance_type: cpu-2}}"))
    assert data["compute_config"] == {"head_node": {"instance_type": "cpu-2"}}


def test_a_broken_compute_config_file_names_its_own_line(tmp_path: Path) -> None:
    cc = tmp_path / "jobs" / "cc.yaml"
    cc.parent.mkdir(parents=True)
    cc.write_text("head_node:\n  instance_type: cpu-2\nworker_nodes:\n  - min_nodes: 1\n")
    with pytest.raises(ConfigError) as caught:
        task_for_api(_task(tmp_path, "cc.yaml"))
    [issue] = caught.value.issues
    assert (issue.file, issue.line, issue.loc) == (str(cc), 4, "worker_nodes[0].instance_type")


def test_a_missing_compute_config_file_names_the_task_line(tmp_path: Path) -> None:
    task = _task(tmp_path, "nowhere.yaml")
    with pytest.raises(ConfigError) as caught:
        task_for_api(task)
    [issue] = caught.value.issues
    assert (issue.file, issue.line, issue.loc) == (str(task), 3, "compute_config")
    assert "no compute config file" in issue.message and "nowhere.yaml" in issue.message


def test_launch_with_a_broken_compute_config_is_exit_2(tmp_path: Path) -> None:
    cc = tmp_path / "jobs" / "cc.yaml"
    cc.parent.mkdir(parents=True)
    cc.write_text("head_node: {instance_type: cpu-2}\nflags: {replacement_threshold: 5}\n")
    done = _run(tmp_path, "launch", str(_task(tmp_path, "cc.yaml")))
    assert done.returncode == 2, done.stderr
    assert f"{cc}:2: flags.replacement_threshold:" in done.stderr
    assert "Traceback" not in done.stderr
