"""``provider.cache_stopped_nodes`` played end to end on AWS (moto's EC2 behind Corral's fault
proxy) and Google Cloud (the Compute API fake), each VM's boot script run on this machine
(tests/cloud_vms.py), the API, workers, autoscaling worker and beat as real processes.

A cluster scales up a worker for a standing demand; the demand cleared, the worker idles past
the timeout and is stopped (StopInstances or instances.stop: the cloud says stopped, nothing
terminated); new demand starts that same machine again (StartInstances or instances.start, no
new launch), its agent resumes with the token it kept and the node is RUNNING again;
``corral cluster down`` terminates every machine, the stopped ones included (Corral forgets
the cluster: no later ``cluster up`` would start them again, so, unlike ``ray down``, it does
not leave them stopped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloud_vms import (
    AWS_ENV,
    Fleet,
    Vm,
    aws_script,
    aws_scripts,
    ec2_state,
    gcp_env,
    gcp_script,
    gcp_scripts,
    start_with_agents,
)
from fakes.aws_faults import FaultyMoto
from fakes.gcp_compute import FakeCompute
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


@dataclass
class Cloud:
    """How the scenario reads one played cloud: the file's provider and node config, the boot
    script of a node's launch, the machine's state as the cloud says it, its stop and start
    calls, and how many launches the cloud took for a node (and in all)."""

    provider: dict[str, Any]
    node_config: dict[str, Any]
    script: Callable[[str], str]
    state: Callable[[str], str | None]  # running | stopped | gone
    stops: Callable[[], list[str]]
    starts: Callable[[], list[str]]
    launches: Callable[[str | None], int]


def _scenario(system: System, cloud: Cloud, vms: Callable[[str], Vm], tmp_path: Path) -> None:
    cluster = {
        "cluster_name": NAME,
        "provider": cloud.provider,
        "idle_timeout_minutes": 0.05,  # 3 s
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": cloud.node_config, "resources": {"CPU": 0}},
            "cpu": {
                "node_config": cloud.node_config,
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
    assert "cache_stopped_nodes" not in up.stdout + up.stderr  # honoured here: no notice

    wait_for(lambda: _node_of(system, "head"), 60, "the head to be launched", system.home / "logs")
    head = str(_node_of(system, "head"))
    vms(cloud.script(head))
    system.wait_state(head, {"RUNNING"}, 90)

    # Demand for a CPU: a worker is launched and comes up.
    _demand(system, tmp_path, "bundles: [{resources: {CPU: 1}}]\n")
    wait_for(lambda: _node_of(system, "cpu"), 60, "a worker to be launched", system.home / "logs")
    worker = str(_node_of(system, "cpu"))
    vm = vms(cloud.script(worker))
    system.wait_state(worker, {"RUNNING"}, 90)
    [pid] = [i["provider_id"] for i in system.request(worker)["instances"] if i["provider_id"]]

    # The demand cleared, it idles past the timeout: stopped, not terminated.
    _demand(system, tmp_path, "")
    wait_for(lambda: pid in cloud.stops(), 60, "the cloud's stop of the worker")
    wait_for(lambda: cloud.state(pid) == "stopped", 30, "the cloud to say stopped")
    vm.power_off()  # the machine shuts down; its disk (and node token) kept
    assert system.wait_state(worker, {"STOPPED"}, 30)["state"] == "STOPPED"
    wait_for(lambda: _state_of(system, worker) == "STOPPED", 30, "status to show it stopped")
    decisions = system.get(f"/v1/clusters/{NAME}").json()["decisions"]
    assert any(worker in d.get("stop", []) for d in decisions), decisions
    assert cloud.state(pid) == "stopped"  # not terminated

    # New demand: the same machine is started again, nothing new is launched.
    _demand(system, tmp_path, "bundles: [{resources: {CPU: 1}}]\n")
    wait_for(lambda: pid in cloud.starts(), 60, "the cloud's start of the worker")
    wait_for(lambda: cloud.state(pid) == "running", 30, "the cloud to say running")
    vm.boot_again()  # its agent resumes with the token it kept, and runs the launcher again
    back = system.wait_state(worker, {"RUNNING"}, 90)
    assert [i["provider_id"] for i in back["instances"] if i["provider_id"]] == [pid]
    wait_for(lambda: _state_of(system, worker) == "RUNNING", 30, "status to show it running")
    assert [n["id"] for n in _nodes(system) if n["node_type"] == "cpu"] == [worker]
    assert cloud.launches(worker) == 1  # started again, not launched again
    assert cloud.launches(None) == 2  # head + worker, ever
    wait_for(lambda: vm.log().count("setup on cpu") >= 2, 30, "the launcher steps to run again")

    # Down: every machine terminated, the worker too.
    assert system.cli("cluster", "down", NAME).returncode == 0
    for node in (head, worker):
        [machine] = [i["provider_id"] for i in system.request(node)["instances"]]
        wait_for(lambda m=machine: cloud.state(m) == "gone", 60, f"{node}'s machine to be gone")


def test_aws_an_idle_worker_is_stopped_started_again_and_terminated_by_down(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    system, moto = aws

    def state(pid: str) -> str:
        said = ec2_state(moto.url, pid)
        return "gone" if said in ("shutting-down", "terminated") else said

    cloud = Cloud(
        provider={"type": "aws", "region": "us-east-1", "cache_stopped_nodes": True},
        node_config={"InstanceType": "m5.large"},
        script=lambda node: aws_script(moto, node),
        state=state,
        stops=lambda: _ids(moto, "StopInstances"),
        starts=lambda: _ids(moto, "StartInstances"),
        launches=lambda node: len(
            aws_scripts(moto, **({"corral-request": node} if node else {"corral-managed": "true"}))
        ),
    )
    _scenario(system, cloud, vms, tmp_path)


def test_gcp_an_idle_worker_is_stopped_started_again_and_terminated_by_down(
    make_system: Callable[..., System], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    """The same on Google Cloud (instances.stop and instances.start on the Compute API fake),
    the file leaving cache_stopped_nodes out: Ray's default for a gcp file is true."""
    with FakeCompute(project="corral-test") as fake:
        system = start_with_agents(
            make_system(env=gcp_env(fake), ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6")
        )
        system.start_worker("autoscale")

        def state(pid: str) -> str:
            zone, name = pid.rsplit("/", 1)
            inst = fake.instances.get((zone, name))
            if inst is None:
                return "gone"
            return {"TERMINATED": "stopped", "RUNNING": "running"}.get(inst["status"], "other")

        def calls(action: str) -> list[str]:
            return [f"{zone}/{name}" for act, zone, name in list(fake.power_calls) if act == action]

        def launches(node: str | None) -> int:
            labels = {"corral-request": node} if node else {"corral-managed": "true"}
            return len(gcp_scripts(fake, **labels))

        cloud = Cloud(
            provider={"type": "gcp", "region": "us-central1", "project_id": fake.project},
            node_config={"machineType": "n2-standard-2"},
            script=lambda node: gcp_script(fake, node),
            state=state,
            stops=lambda: calls("stop"),
            starts=lambda: calls("start"),
            launches=launches,
        )
        _scenario(system, cloud, vms, tmp_path)
