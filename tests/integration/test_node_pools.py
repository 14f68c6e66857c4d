"""Pools on a real cloud path: machine pools and Determined pools whose machines are EC2
instances (moto) running the node agent, every machine played on this one as it is launched
(tests/cloud_vms.py). Work reaches the machines as assignments through the API; idle machines
are reaped; a machine whose agent falls silent leaves its pool and its work runs again.

The tests share one installation, one moto and one player (each test's pool or cluster has a
name of its own); after each, its requests, pools and cluster are taken down and every machine
is gone. None stops or restarts a part of Corral."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from cloud_vms import AWS_ENV, Fleet, Player, Vm, ec2_state, start_with_agents
from fakes.aws_faults import FaultyMoto
from harness import System, wait_for

pytestmark = pytest.mark.integration

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
SEED_POOL = SEEDS / "anyscale-machine-pool-aws.yaml"  # as written: p4de.24xlarge, cr-xxx
SEED_COMPUTE = SEEDS / "anyscale-compute-config-aws.yaml"
POOL = "demo-machine-pool"


@pytest.fixture(scope="module")
def shared(
    make_module_system: Callable[..., System], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[System, Player]]:
    fleet = Fleet(tmp_path_factory.mktemp("vms"))
    with FaultyMoto() as moto:
        env = {
            **AWS_ENV,
            "CORRAL_CLOUDS": json.dumps(["aws"]),
            "CORRAL_AWS_ENDPOINT_URL": moto.url,
            "CORRAL_AWS_DEFAULT_IMAGE_ID": "ami-12c6146b",
            "CORRAL_NODE_HEARTBEAT_S": "0.5",
        }
        system = make_module_system(
            env=env,
            ATTEMPT_DEADLINE_S="60",
            MIN_RUNTIME_S="1",
            POOL_REBALANCE_INTERVAL_S="0.5",
        )
        try:
            with Player(moto, fleet) as player:
                start_with_agents(system)
                # The Ray cluster test's autoscale worker, started with the others: its
                # start-up (seconds of CPU) overlaps theirs instead of holding that test's
                # first nodes back. The other tests make no cluster: it has no work for them.
                system.start_worker("autoscale")
                yield system, player
        finally:
            fleet.kill_all()


@pytest.fixture
def aws(shared: tuple[System, Player]) -> Iterator[tuple[System, Player]]:
    """The module's installation as a fresh one: what the test left is taken down after it."""
    yield shared
    shared[0].clear(timeout_s=90)


def _played_since(player: Player, earlier: set[str]) -> list[Vm]:
    """The machines played since ``earlier`` (the boot scripts played before), oldest first."""
    return [vm for script, vm in list(player.played.items()) if script not in earlier]


def _launch(system: System, tmp: Path, name: str, **fields: Any) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **fields}))
    done = system.cli("launch", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def _apply(system: System, path: Path, name: str) -> None:
    done = system.cli("pools", "apply", str(path), "--name", name, "--cloud", "aws")
    assert done.returncode == 0, done.stderr


def _why(system: System, request_id: str) -> dict[str, Any]:
    done = system.cli("why", request_id, "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _why_code(system: System, request_id: str) -> str:
    """Why the request waits, in one word, of the API (for a look repeated in a wait)."""
    return str(system.get(f"/v1/requests/{request_id}/why").json()["code"])


def _pool(system: System, name: str) -> dict[str, Any]:
    resp = system.get(f"/v1/pools/{name}")
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _pool_machines(system: System, name: str) -> set[str]:
    """The ids of the pool's machines (its workloads' heads left out)."""
    return {m["id"] for m in _pool(system, name)["machines"] if m["machine_type"] != "head_node"}


def _ec2(system: System, provider_id: str) -> str:
    return ec2_state(system.env["CORRAL_AWS_ENDPOINT_URL"], provider_id)


def _events(system: System, request_id: str) -> list[str]:
    resp = system.get(f"/v1/requests/{request_id}/events")
    assert resp.status_code == 200, resp.text
    return [str(e["text"]) for e in resp.json()["events"]]


def _workers(system: System, request_id: str) -> list[dict[str, Any]]:
    """The request's running worker nodes (not its head)."""
    return [
        i
        for i in system.request(request_id)["instances"]
        if i["state"] == "RUNNING" and i["machine_type"] != "head_node"
    ]


def test_the_seed_pool_runs_workloads_on_ec2_machines_and_the_third_waits(
    aws: tuple[System, Player], tmp_path: Path
) -> None:
    system, _ = aws
    _apply(system, SEED_POOL, POOL)
    compute = str(SEED_COMPUTE)
    run = "echo pool work on rank $CORRAL_NODE_RANK of $CORRAL_NUM_NODES; sleep 600"
    first = _launch(system, tmp_path, "train-1", compute_config=compute, num_nodes=3, run=run)
    second = _launch(system, tmp_path, "train-2", compute_config=compute, num_nodes=3, run=run)
    for rid in (first, second):
        system.wait_state(rid, {"RUNNING"}, 120)
    # Three nodes each: reserved, then spot, then on-demand, spanning groups as they fill.
    markets = sorted(i["market"] for rid in (first, second) for i in _workers(system, rid))
    assert markets == ["on_demand", "on_demand", "reserved", "reserved", "spot", "spot"]
    assert all(i["cloud"] == "aws" for i in _workers(system, first))
    wait_for(
        lambda: "pool work on rank" in system.cli("logs", first).stdout, 30, "the work's output"
    )
    # Its exec runs in its own assignment on the EC2 machine: that assignment's folder is its
    # HOME and working directory (issue #47 item 1), not the machine's.
    ran = system.cli("exec", first, "--", "echo HOME=$HOME; echo PWD=$PWD")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    home = ran.stdout.split("HOME=", 1)[1].split()[0]
    assert f"PWD={home}" in ran.stdout and "/assignments/" in home, ran.stdout

    third = _launch(system, tmp_path, "train-3", compute_config=compute, num_nodes=3, run=run)
    wait_for(lambda: _why_code(system, third) == "partition_full", 30, "the third to wait")
    assert system.request(third)["state"] == "PENDING"
    assert "2 of 2 held" in _why(system, third)["reason"]

    # The first ends: the third takes its machines warm, no new pool machine launched.
    machines = {
        m["id"] for m in _pool(system, POOL)["machines"] if m["machine_type"] != "head_node"
    }
    assert system.cli("terminate", first).returncode == 0
    system.wait_state(third, {"RUNNING"}, 90)
    after = {m["id"] for m in _pool(system, POOL)["machines"] if m["machine_type"] != "head_node"}
    assert after == machines
    wait_for(
        lambda: "pool work on rank" in system.cli("logs", third).stdout, 30, "the third's output"
    )


SMALL_POOL = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "m5.large"}],
            "partitions": [{"name": "any", "size": 2}],
            "recycle_policy": {"max_idle_duration": "2s"},
        }
    ],
}
SMALL_COMPUTE = {
    "worker_nodes": [
        {"instance_type": "cpu", "flags": {"cloud_deployment": {"machine_pool": "small"}}}
    ]
}


def test_a_job_ends_by_its_exit_code_an_idle_machine_is_reaped_and_a_lost_one_replaced(
    aws: tuple[System, Player], tmp_path: Path
) -> None:
    system, player = aws
    earlier = set(player.played)
    pool_file = tmp_path / "small.yaml"
    pool_file.write_text(yaml.safe_dump(SMALL_POOL))
    _apply(system, pool_file, "small")

    # A job on a pool machine ends by its exit code; its machine goes idle, then is reaped.
    job = _launch(system, tmp_path, "job", compute_config=SMALL_COMPUTE, run="echo ran; exit 4")
    done = system.wait_state(job, {"SUCCEEDED", "FAILED"}, 120)
    assert done["state"] == "FAILED" and done["exit_code"] == 4, done
    [inst] = [i for i in done["instances"] if i["machine_type"] == "cpu"]
    wait_for(
        lambda: _ec2(system, inst["provider_id"]) == "terminated",
        60,
        "idle reaping",
    )
    wait_for(lambda: not _pool(system, "small")["machines"], 30, "the reaped machine to leave")
    [vm] = [v for v in _played_since(player, earlier) if v.node.startswith("aws/")]
    wait_for(lambda: not vm.alive(), 30, "the reaped machine's agent to stop (token refused)")

    # A service whose machine dies: the machine leaves the pool, the work runs on a new one.
    svc = _launch(system, tmp_path, "svc", compute_config=SMALL_COMPUTE, setup="echo serving")
    system.wait_state(svc, {"RUNNING"}, 120)
    [first] = _workers(system, svc)
    [machine] = [m for m in _pool(system, "small")["machines"] if m["workload"] == svc]
    [dying] = player.vm_of(f"aws/{machine['id']}/")  # a pool machine's attempt is its id
    dying.crash()
    wait_for(
        lambda: any(i["provider_id"] != first["provider_id"] for i in _workers(system, svc)),
        90,
        "the service to run again on a new machine",
    )
    events = _events(system, svc)
    assert any("was lost" in e and "requeued" in e for e in events), events
    assert _ec2(system, first["provider_id"]) in (
        "shutting-down",
        "terminated",
    )


MASTER = {
    "resource_manager": {
        "type": "agent",
        "default_aux_resource_pool": "compute",
        "default_compute_resource_pool": "compute",
    },
    "resource_pools": [
        {
            "pool_name": "compute",
            "provider": {
                "type": "aws",
                "instance_type": "m5.large",
                "instance_slots": 2,
                "max_instances": 1,
                "max_idle_agent_period": "2s",
            },
        }
    ],
}


def test_a_determined_agent_on_ec2_runs_two_tasks_at_once_and_is_reaped_when_idle(
    aws: tuple[System, Player], tmp_path: Path
) -> None:
    system, _ = aws
    master = tmp_path / "master.yaml"
    master.write_text(yaml.safe_dump(MASTER))
    _apply(system, master, "determined")
    # Both start before either ends: each waits for the other's mark in a folder both name
    # (each assignment starts in a folder of its own: issue #47 item 1).
    marks = tmp_path / "marks"
    marks.mkdir()
    run = (
        f"touch {marks}/mark-$NAME; "
        f"for i in $(seq 100); do [ -e {marks}/mark-$OTHER ] && exit 0; sleep 0.2; done; exit 9"
    )
    a = _launch(system, tmp_path, "a", resources={"slots": 1}, run=run,
                envs={"NAME": "a", "OTHER": "b"})  # fmt: skip
    b = _launch(system, tmp_path, "b", resources={"slots": 1}, run=run,
                envs={"NAME": "b", "OTHER": "a"})  # fmt: skip
    for rid in (a, b):
        done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 120)
        assert done["state"] == "SUCCEEDED", done
    on = {i["provider_id"] for rid in (a, b) for i in system.request(rid)["instances"]}
    assert len(on) == 1  # one agent, two assignments side by side
    [agent] = on
    wait_for(
        lambda: _ec2(system, agent) == "terminated",
        60,
        "the idle agent reaped",
    )


def test_a_determined_aws_pool_launches_in_the_files_region_with_its_image_and_subnet(
    aws: tuple[System, Player], tmp_path: Path
) -> None:
    """Issue #45 item 4: with region us-west-2, agents were tried from us-east-1 on, with
    Corral's default image. The pool's provider fields are what EC2 receives: the region, the
    AMI, the subnet (and so its zone), the security group, key, root volume and tags."""
    system, player = aws
    west = boto3.client(
        "ec2",
        endpoint_url=system.env["CORRAL_AWS_ENDPOINT_URL"],
        region_name="us-west-2",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    default_image = system.env["CORRAL_AWS_DEFAULT_IMAGE_ID"]
    image = next(
        i["ImageId"]
        for i in west.describe_images(Owners=["amazon"])["Images"]
        if i["ImageId"] != default_image
    )
    subnet = next(
        s for s in west.describe_subnets()["Subnets"] if s["AvailabilityZone"] == "us-west-2c"
    )
    group = west.create_security_group(
        GroupName="det-agents", Description="agents", VpcId=subnet["VpcId"]
    )["GroupId"]
    west.create_key_pair(KeyName="det-key")
    master = tmp_path / "master.yaml"
    provider = {
        "type": "aws",
        "region": "us-west-2",
        "image_id": image,
        "instance_type": "m5.large",
        "instance_slots": 1,
        "ssh_key_name": "det-key",
        "root_volume_size": 120,
        "instance_name": "det-agent",
        "tag_key": "team",
        "tag_value": "vision",
        "network_interface": {
            "public_ip": True,
            "subnet_id": subnet["SubnetId"],
            "security_group_id": group,
        },
        "max_instances": 1,
        "max_idle_agent_period": "2s",
    }
    master.write_text(
        yaml.safe_dump(
            {
                "resource_manager": {
                    "default_aux_resource_pool": "west",
                    "default_compute_resource_pool": "west",
                },
                "resource_pools": [{"pool_name": "west", "provider": provider}],
            }
        )
    )
    _apply(system, master, "det-west")
    job = _launch(system, tmp_path, "west-job", resources={"slots": 1}, run="echo ran in the west")
    done = system.wait_state(job, {"SUCCEEDED", "FAILED"}, 120)
    assert done["state"] == "SUCCEEDED", done
    [agent] = {i["provider_id"] for i in system.request(job)["instances"]}
    [sent] = [
        r
        for r in player.moto.requests("RunInstances")
        if r.fault is None and r.tags().get("corral-pool") == "det-west"
    ]
    assert sent.region == "us-west-2"
    assert sent.zone == "us-west-2c"  # the subnet's zone, not the first the catalog lists
    assert sent.params["ImageId"] == image
    assert sent.params["KeyName"] == "det-key"
    assert sent.params["NetworkInterface.1.SubnetId"] == subnet["SubnetId"]
    assert sent.params["NetworkInterface.1.SecurityGroupId.1"] == group
    assert sent.params["BlockDeviceMapping.1.Ebs.VolumeSize"] == "120"
    assert {"Name": "det-agent", "team": "vision"}.items() <= sent.tags().items()
    [found] = west.describe_instances(InstanceIds=[agent])["Reservations"][0]["Instances"]
    assert (found["ImageId"], found["SubnetId"]) == (image, subnet["SubnetId"])
    assert found["Placement"]["AvailabilityZone"] == "us-west-2c"
    wait_for(lambda: _ec2_in(west, agent) == "terminated", 60, "the idle agent reaped")


def _ec2_in(client: Any, provider_id: str) -> str:
    found = client.describe_instances(InstanceIds=[provider_id])["Reservations"]
    return str(found[0]["Instances"][0]["State"]["Name"])


RAY_SEED = SEEDS / "ray-cluster-node-types.yaml"  # written for AWS (us-west-2)


def test_a_ray_cluster_on_ec2_grows_for_queued_work_and_reaps_its_idle_node(
    aws: tuple[System, Player], tmp_path: Path
) -> None:
    system, player = aws  # its autoscale worker started with the module's installation
    earlier = set(player.played)
    data = yaml.safe_load(RAY_SEED.read_text())
    data["idle_timeout_minutes"] = 0.05  # 3 s
    for node_type in data["available_node_types"].values():
        node_type.pop("worker_setup_commands", None)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(data))
    done = system.cli("cluster", "up", str(cluster), "--json")
    assert done.returncode == 0, done.stderr

    def running(cli: bool = False) -> dict[str, int]:
        """Running nodes by type, of the API (a look in a wait) or of `corral cluster status`."""
        out: dict[str, int] = {}
        name = data["cluster_name"]
        if cli:
            view = json.loads(system.cli("cluster", "status", name, "--json").stdout)
        else:
            view = system.get(f"/v1/clusters/{name}").json()
        for node in view["nodes"]:
            if node["state"] == "RUNNING":
                out[node["node_type"]] = out.get(node["node_type"], 0) + 1
        return out

    # The head and min_workers' one worker come up on EC2, played as they launch.
    wait_for(lambda: running() == {"cpu_4_ondemand": 2}, 120, "the head and its min worker")
    # A node's workload (a Ray head's pending tasks) queues work only a GPU type has
    # (Custom2): its agent reports it with its heartbeats, and the autoscaler brings one up.
    node = _played_since(player, earlier)[0]
    queued = {"bundles": [{"resources": {"Custom2": 1}, "count": 1}]}
    (node.root / "demand.json").write_text(json.dumps(queued))
    wait_for(lambda: running().get("gpu_1_ondemand") == 1, 120, "a GPU node for the queued work")
    # The work is taken (nothing queued): the GPU node goes idle and is reaped after 3 s.
    (node.root / "demand.json").write_text("{}")
    wait_for(lambda: "gpu_1_ondemand" not in running(), 90, "the idle GPU node reaped")
    assert node.alive() and running(cli=True) == {"cpu_4_ondemand": 2}
    done = system.cli("cluster", "down", data["cluster_name"])
    assert done.returncode == 0, done.stderr
