"""``provider.cache_stopped_nodes`` on AWS played end to end: moto's EC2 behind Corral's fault
proxy, each VM's boot script run on this machine (tests/cloud_vms.py), the API, workers,
autoscaling worker and beat as real processes.

A cluster scales up a worker for a standing demand; the demand cleared, the worker idles past
the timeout and is stopped (StopInstances: EC2 says stopped, nothing terminated); new demand
starts that same instance again (StartInstances, no RunInstances), its agent resumes with the
token it kept and the node is RUNNING again; ``corral cluster down`` terminates every machine,
the stopped ones included (Corral forgets the cluster: no later ``cluster up`` would start
them again, so, unlike ``ray down``, it does not leave them stopped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloud_vms import AWS_ENV, Fleet, Vm, aws_script, aws_scripts, ec2_state, start_with_agents
from fakes.aws_faults import FaultyMoto
from harness import System, wait_for

pytestmark = pytest.mark.integration

NAME = "stop-lab"


@pytest.fixture
def vms(tmp_path: Path) -> Iterator[Callable[..., Vm]]:
    fleet = Fleet(tmp_path / "vms")
    yield fleet.boot
    fleet.kill_all()


@pytest.fixture
def aws(make_system: Callable[..., System]) -> Iterator[tuple[System, FaultyMoto]]:
    with FaultyMoto() as moto:
        env = {
            **AWS_ENV,
            "CORRAL_CLOUDS": json.dumps(["aws"]),
            "CORRAL_AWS_ENDPOINT_URL": moto.url,
            "CORRAL_AWS_DEFAULT_IMAGE_ID": "ami-12c6146b",
            "CORRAL_NODE_HEARTBEAT_S": "0.5",
        }
        system = start_with_agents(
            make_system(env=env, ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6")
        )
        system.start_worker("autoscale")
        yield system, moto


def _ids(moto: FaultyMoto, action: str) -> list[str]:
    return [
        v
        for r in moto.requests(action)
        for k, v in r.params.items()
        if k.startswith("InstanceId.") and r.fault is None
    ]


def _nodes(system: System) -> list[dict[str, Any]]:
    resp = system.get(f"/v1/clusters/{NAME}")
    assert resp.status_code == 200, resp.text
    nodes: list[dict[str, Any]] = resp.json()["nodes"]
    return nodes


def _node_of(system: System, node_type: str) -> str | None:
    return next((n["id"] for n in _nodes(system) if n["node_type"] == node_type), None)


def _state_of(system: System, node_id: str) -> str | None:
    return next((n["state"] for n in _nodes(system) if n["id"] == node_id), None)


def _demand(system: System, tmp_path: Path, text: str) -> None:
    path = tmp_path / "demand.yaml"
    path.write_text(text)
    got = system.cli("cluster", "demand", NAME, str(path))
    assert got.returncode == 0, got.stderr


def test_aws_an_idle_worker_is_stopped_started_again_and_terminated_by_down(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    system, moto = aws
    cluster = {
        "cluster_name": NAME,
        "provider": {"type": "aws", "region": "us-east-1", "cache_stopped_nodes": True},
        "idle_timeout_minutes": 0.05,  # 3 s
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "m5.large"}, "resources": {"CPU": 0}},
            "cpu": {
                "node_config": {"InstanceType": "m5.large"},
                "resources": {"CPU": 2},
                "min_workers": 0,
                "max_workers": 2,
            },
        },
        "setup_commands": ['echo "setup on $RAY_NODE_TYPE_NAME"'],
    }
    path = tmp_path / "stop-lab.yaml"
    path.write_text(yaml.safe_dump(cluster))
    up = system.cli("cluster", "up", str(path))
    assert up.returncode == 0, up.stderr
    assert "cache_stopped_nodes" not in up.stdout + up.stderr  # honoured on AWS: no notice

    wait_for(lambda: _node_of(system, "head"), 60, "the head to be launched", system.home / "logs")
    head = str(_node_of(system, "head"))
    vms(aws_script(moto, head))
    system.wait_state(head, {"RUNNING"}, 90)

    # Demand for a CPU: a worker is launched and comes up.
    _demand(system, tmp_path, "bundles: [{resources: {CPU: 1}}]\n")
    wait_for(lambda: _node_of(system, "cpu"), 60, "a worker to be launched", system.home / "logs")
    worker = str(_node_of(system, "cpu"))
    vm = vms(aws_script(moto, worker))
    system.wait_state(worker, {"RUNNING"}, 90)
    [pid] = [i["provider_id"] for i in system.request(worker)["instances"] if i["provider_id"]]

    # The demand cleared, it idles past the timeout: stopped, not terminated.
    _demand(system, tmp_path, "")
    wait_for(lambda: pid in _ids(moto, "StopInstances"), 60, "StopInstances for the worker")
    wait_for(lambda: ec2_state(moto.url, pid) == "stopped", 30, "EC2 to say stopped")
    vm.power_off()  # the machine shuts down; its disk (and node token) kept
    assert system.wait_state(worker, {"STOPPED"}, 30)["state"] == "STOPPED"
    wait_for(lambda: _state_of(system, worker) == "STOPPED", 30, "status to show it stopped")
    assert pid not in _ids(moto, "TerminateInstances")
    decisions = system.get(f"/v1/clusters/{NAME}").json()["decisions"]
    assert any(worker in d.get("stop", []) for d in decisions), decisions

    # New demand: the same instance is started again, nothing new is launched.
    _demand(system, tmp_path, "bundles: [{resources: {CPU: 1}}]\n")
    wait_for(lambda: pid in _ids(moto, "StartInstances"), 60, "StartInstances for the worker")
    wait_for(lambda: ec2_state(moto.url, pid) == "running", 30, "EC2 to say running")
    vm.boot_again()  # its agent resumes with the token it kept, and runs the launcher again
    back = system.wait_state(worker, {"RUNNING"}, 90)
    assert [i["provider_id"] for i in back["instances"] if i["provider_id"]] == [pid]
    wait_for(lambda: _state_of(system, worker) == "RUNNING", 30, "status to show it running")
    assert [n["id"] for n in _nodes(system) if n["node_type"] == "cpu"] == [worker]
    assert len(aws_scripts(moto, **{"corral-request": worker})) == 1  # one RunInstances
    assert len(aws_scripts(moto, **{"corral-managed": "true"})) == 2  # head + worker, ever
    wait_for(lambda: vm.log().count("setup on cpu") >= 2, 30, "the launcher steps to run again")

    # Down: every machine terminated, the worker too.
    assert system.cli("cluster", "down", NAME).returncode == 0
    for node in (head, worker):
        [machine] = [i["provider_id"] for i in system.request(node)["instances"]]
        wait_for(
            lambda m=machine: ec2_state(moto.url, m) in {"shutting-down", "terminated"},
            60,
            f"{node}'s VM to be terminated",
        )
