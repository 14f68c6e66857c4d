"""Ray's launcher steps on a node (shared/autoscaler/launcher.py), the script run by real bash.

Translated from Ray's own cases (python/ray/tests/test_autoscaler.py):
- testSetupCommandsWithStoppedNodeCaching / testConfiguresNewNodes: initialization, setup and
  start commands run in that order on a new node, with the head's address set (RAY_HEAD_IP);
- testNodeTypeNameChange / testUpdateConfig... per-type worker_setup_commands replace the
  top-level lists, setup_commands included (util.merge_setup_commands merges setup_commands
  into the global lists before a type's own list takes their place; ray-schema.json: "This
  node specfic list will override the global setup_commands and worker_setup_commands");
- testScaleUpFailure-style MockProcessRunner(fail_cmds=...): a failing setup command fails the
  node, naming the command.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from corral.shared.autoscaler.launcher import (
    FAILED_MARK,
    Mounts,
    drops_ray_autoscaler,
    failed_step,
    launcher_script,
    node_launch,
    runs_ray,
    step_times,
)
from corral.shared.autoscaler.ray_report import RayReport
from corral.shared.config.cluster import Cluster


def _cluster(**extra: object) -> Cluster:
    data: dict[str, object] = {
        "cluster_name": "c",
        "provider": {"type": "local"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {}, "resources": {"CPU": 0}},
            "wa": {
                "node_config": {},
                "resources": {"CPU": 1, "A": 2},
                "labels": {"zone": "x"},
                "worker_setup_commands": ["echo wa-own-setup"],
            },
            "wb": {"node_config": {}, "resources": {"CPU": 1}},
        },
        "initialization_commands": ["echo init"],
        "setup_commands": ["echo common"],
        "head_setup_commands": ["echo head-setup"],
        "worker_setup_commands": ["echo worker-setup"],
        "head_start_ray_commands": ["echo start-head"],
        "worker_start_ray_commands": ['echo "join $RAY_HEAD_IP:6379"'],
    }
    data.update(extra)
    return Cluster.model_validate(data)


TOOLS = (
    "bash",
    "date",
    "base64",
    "sha256sum",
    "cut",
    "tar",
    "gzip",
    "mkdir",
    "rm",
    "cp",
    "dirname",
)


def _bin(tmp: Path) -> Path:
    """A PATH of the tools the script uses, and nothing else (no docker, whatever the host)."""
    found = tmp / "tools"
    if not found.exists():
        found.mkdir()
        for tool in (*TOOLS, "mktemp"):
            where = shutil.which(tool)
            assert where is not None, tool
            (found / tool).symlink_to(where)
    return found


def _run(script: str | None, tmp: Path) -> subprocess.CompletedProcess[str]:
    assert script is not None
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": str(_bin(tmp)), "HOME": str(tmp)},
        timeout=30,
    )


def test_steps_run_in_rays_order_with_the_launcher_variables(tmp_path: Path) -> None:
    cluster = _cluster()
    assert runs_ray(cluster)
    head = node_launch(cluster, "head", head=True, node_id="n-head", head_ip=None)
    ran = _run(launcher_script(head), tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["init", "common", "head-setup", "start-head"]

    worker = node_launch(cluster, "wa", head=False, node_id="n-1", head_ip="10.0.0.5")
    assert worker.env == {
        "RAY_CLOUD_INSTANCE_ID": "n-1",
        "RAY_NODE_TYPE_NAME": "wa",
        "RAY_HEAD_IP": "10.0.0.5",
        "RAY_OVERRIDE_RESOURCES": json.dumps({"A": 2.0, "CPU": 1.0}, sort_keys=True),
        "RAY_OVERRIDE_LABELS": json.dumps({"zone": "x"}),
    }
    ran = _run(launcher_script(worker), tmp_path)
    assert ran.returncode == 0, ran.stderr
    # The type's own worker_setup_commands replace both top-level lists ("common" too).
    assert ran.stdout.splitlines() == ["init", "wa-own-setup", "join 10.0.0.5:6379"]
    assert "start_ray 1 at " in ran.stderr  # each command announced, with its time
    phases = [phase for phase, _at in step_times(ran.stderr)]
    assert phases == ["initialization", "setup", "start_ray", "node up"]
    other = node_launch(cluster, "wb", head=False, node_id="n-2", head_ip="10.0.0.5")
    ran = _run(launcher_script(other), tmp_path)  # no list of its own: the top-level two
    assert ran.stdout.splitlines()[1:3] == ["common", "worker-setup"]


def test_a_failing_command_stops_the_node_naming_it_and_its_exit_code(tmp_path: Path) -> None:
    cluster = _cluster(setup_commands=["echo one", "exit 3", "echo never"])
    plan = node_launch(cluster, "wb", head=False, node_id="n-1", head_ip="h")
    ran = _run(launcher_script(plan), tmp_path)
    assert ran.returncode == 3
    assert ran.stdout.split() == ["init", "one"]
    assert failed_step(ran.stderr) == "setup command 2 exited 3: exit 3"
    assert FAILED_MARK in ran.stderr


def test_file_mounts_arrive_checked_and_a_wrong_sha256_fails(tmp_path: Path) -> None:
    buf = io.BytesIO()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("hello")
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(str(src / "f.txt"), arcname="m0")
        tar.add(str(src), arcname="m1")
    raw = buf.getvalue()
    mounts = Mounts(
        archive_b64=base64.b64encode(raw).decode(),
        sha256=hashlib.sha256(raw).hexdigest(),
        targets=[str(tmp_path / "dst" / "file.txt"), "~/folder"],
        size_bytes=len(raw),
    )
    plan = node_launch(_cluster(), "wb", head=False, node_id="n-1", head_ip="h")
    ran = _run(launcher_script(plan, mounts), tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "dst" / "file.txt").read_text() == "hello"
    assert (tmp_path / "folder" / "f.txt").read_text() == "hello"  # ~ is the node's home

    bad = mounts.model_copy(update={"sha256": "0" * 64})
    ran = _run(launcher_script(plan, bad), tmp_path)
    assert ran.returncode == 65 and "file_mounts: sha256" in ran.stderr


def test_docker_runs_the_steps_in_the_container_and_no_docker_fails_loudly(
    tmp_path: Path,
) -> None:
    cluster = _cluster(docker={"image": "rayproject/ray:2.60.0", "run_options": ["--ulimit x"]})
    plan = node_launch(cluster, "wb", head=False, node_id="n-1", head_ip="h")
    script = launcher_script(plan)
    assert script is not None
    assert "docker run -d --name ray_container-n-1 --network host" in script
    assert "docker pull" in script
    ran = _run(script, tmp_path)  # this PATH has no docker
    assert ran.returncode == 127
    assert "has no docker" in ran.stderr
    assert ran.stdout.split() == ["init"]  # initialization runs on the host, before it

    # A fake docker on the PATH records what it is asked: the setup runs through `docker exec`.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text('#!/bin/sh\necho "docker $*" >> "$HOME/docker.calls"\n')
    (fake / "docker").chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": f"{fake}:{_bin(tmp_path)}", "HOME": str(tmp_path)},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "docker.calls").read_text().splitlines()
    assert calls[0] == "docker pull rayproject/ray:2.60.0"
    assert calls[1].startswith("docker run -d --name ray_container-n-1 --network host")
    assert all(c.startswith("docker exec -e RAY_CLOUD_INSTANCE_ID") for c in calls[2:])
    assert "echo common" in calls[2] and "join" in calls[-1]


def test_the_head_report_is_ray_demand_and_node_use() -> None:
    report = RayReport.model_validate(
        {
            "at": 1.0,
            "head_ip": "10.0.0.5",
            "nodes": [
                {
                    "ray_node_id": "aa",
                    "instance_id": "n-1",
                    "node_type": "wa",
                    "status": "RUNNING",
                    "total": {"CPU": 1, "A": 2, "memory": 5, "node:10.0.0.6": 1},
                    "available": {"CPU": 1, "A": 0.5, "memory": 5, "node:10.0.0.6": 1},
                },
                {"ray_node_id": "bb", "instance_id": "n-2", "status": "IDLE", "idle_s": 30},
                {"ray_node_id": "cc", "instance_id": "n-3", "status": "DEAD"},
            ],
            "pending": [{"resources": {"A": 1, "CPU": 0}, "count": 8}],
            "gangs": [{"strategy": "STRICT_SPREAD", "bundles": [{"B": 1}, {"B": 1}]}],
            "constraints": [{"resources": {"CPU": 1}, "count": 4}],
        }
    )
    nodes = report.by_instance()
    assert set(nodes) == {"n-1", "n-2"}  # a DEAD node is gone
    assert nodes["n-1"].used() == {"A": 1.5} and not nodes["n-1"].is_idle()
    assert nodes["n-2"].is_idle() and nodes["n-2"].idle_s == 30
    queued = report.queued()
    assert [(b.resources, b.count) for b in queued.bundles] == [({"A": 1.0}, 8)]
    [group] = queued.placement_groups
    assert group.strategy == "STRICT_SPREAD" and group.bundles == [{"B": 1.0}, {"B": 1.0}]
    assert [(b.resources, b.count) for b in report.requested().bundles] == [({"CPU": 1.0}, 4)]


@pytest.mark.parametrize("field", ["file_mounts", "cluster_synced_files"])
def test_mount_paths_must_exist_where_cluster_up_runs(tmp_path: Path, field: str) -> None:
    from corral.services.client.mounts import pack
    from corral.shared.configio import ConfigError

    value: object = {"/remote": "nope"} if field == "file_mounts" else ["nope"]
    with pytest.raises(ConfigError) as err:
        pack(_cluster(**{field: value}), "c.yaml", cwd=tmp_path)
    assert err.value.issues[0].loc.startswith(field)
    (tmp_path / "nope").write_text("x")
    packed = pack(_cluster(**{field: value}), "c.yaml", cwd=tmp_path)
    assert packed is not None and Mounts.model_validate(packed).size_bytes > 0


def test_rays_autoscaling_config_is_dropped_from_the_heads_start_only() -> None:
    """Ray's example files start the head with --autoscaling-config=~/ray_bootstrap_config.yaml
    (a file Ray's launcher writes so Ray's own autoscaler runs there); Corral is the
    autoscaler, so the head starts without it; workers' commands are untouched."""
    start = [
        "ray stop",
        "ulimit -n 65536; ray start --head --port=6379 --object-manager-port=8076 "
        "--autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=0.0.0.0",
        "ray start --head --autoscaling-config /x/y.yaml",
    ]
    cluster = _cluster(head_start_ray_commands=start)
    plan = node_launch(cluster, "head", head=True, node_id="n-1", head_ip=None)
    assert plan.start_ray == [
        "ray stop",
        "ulimit -n 65536; ray start --head --port=6379 --object-manager-port=8076 "
        "--dashboard-host=0.0.0.0",
        "ray start --head",
    ]
    assert drops_ray_autoscaler(cluster)
    assert not drops_ray_autoscaler(_cluster())
    worker = node_launch(
        _cluster(worker_start_ray_commands=["ray start --autoscaling-config=x"]),
        "wa",
        head=False,
        node_id="n-2",
        head_ip="10.0.0.1",
    )
    assert worker.start_ray == ["ray start --autoscaling-config=x"]
