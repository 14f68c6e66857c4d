"""Node agents on cloud machines, each cloud played end to end: Corral launches on moto's EC2
(or the Compute API fake), the test takes the boot script the cloud received (RunInstances
UserData, the startup-script metadata) and runs it in a sandbox folder as the VM would, with
nothing but the system's Python on PATH. The agent installs itself from the API's wheel,
registers, runs the work and reports it through the API."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.aws_faults import FaultyMoto
from fakes.gcp_compute import FakeCompute
from harness import CORRAL, System, wait_for

pytestmark = pytest.mark.integration

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
AWS_TASK = {"resources": {"cloud": "aws", "instance_type": "m5.large", "region": "us-east-1"}}
GCP_TASK = {"resources": {"cloud": "gcp", "instance_type": "n2-standard-2"}}


class Vm:
    """A cloud machine played on this one: its boot script run in its own folder."""

    def __init__(self, root: Path, script: str) -> None:
        self.root = root
        root.mkdir(parents=True)
        (root / "boot.sh").write_text(script)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "CORRAL_NODE_ROOT": str(root)}
        self.proc = subprocess.Popen(
            ["bash", str(root / "boot.sh")],
            env=env,
            cwd=root,
            start_new_session=True,
            stdout=(root / "boot.out").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.proc.wait(120)
        assert self.proc.returncode == 0, (root / "boot.out").read_text()

    @property
    def token(self) -> str:
        return (self.root / "node-token").read_text()

    def log(self) -> str:
        path = self.root / "node.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def power_off(self) -> None:
        """The machine goes: its agent is told to stop, as a shutdown would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        wait_for(lambda: not self.alive(), 20, "the played machine's processes to end")

    def alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.fixture
def vms(tmp_path: Path) -> Iterator[Callable[[str], Vm]]:
    started: list[Vm] = []

    def boot(script: str) -> Vm:
        vm = Vm(tmp_path / f"vm-{len(started)}", script)
        started.append(vm)
        return vm

    yield boot
    for vm in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(vm.proc.pid, signal.SIGKILL)


def _start(system: System) -> System:
    system.start_api()
    system.env["CORRAL_NODE_API_URL"] = system.api_url  # the machines reach the API here
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


def _aws_script(moto: FaultyMoto, request_id: str) -> str:
    def found() -> list[Any]:
        return [
            r
            for r in moto.requests("RunInstances")
            if r.fault is None and r.tags().get("corral-request") == request_id
        ]

    wait_for(lambda: bool(found()), 60, "the launch to reach EC2")
    return base64.b64decode(found()[-1].params["UserData"]).decode()


def _gcp_script(fake: FakeCompute, request_id: str) -> str:
    def found() -> list[dict[str, Any]]:
        return [
            i["body"]
            for i in fake.inserts
            if i["body"].get("labels", {}).get("corral-request") == request_id
        ]

    wait_for(lambda: bool(found()), 60, "the insert to reach the Compute API")
    items = found()[-1]["metadata"]["items"]
    return str(next(i["value"] for i in items if i["key"] == "startup-script"))


def _no_secrets(script: str, system: System) -> None:
    assert len(script.encode()) < 16 * 1024
    assert system.token not in script  # never the admin token
    for value in AWS_ENV.values():
        if value != "us-east-1" and value != "true":
            assert f"={value}" not in script  # no cloud key


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
        yield _start(make_system(env=env, ATTEMPT_DEADLINE_S="60")), moto


def test_aws_a_job_runs_on_its_agent_and_ends_by_its_exit_code(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm]
) -> None:
    system, moto = aws
    rid = system.submit(
        {**AWS_TASK, "name": "hello", "run": "echo hello from the vm rank=$CORRAL_NODE_RANK"}
    )
    script = _aws_script(moto, rid)
    _no_secrets(script, system)
    # EC2 says running, but nothing registered yet: the machine is not up.
    time.sleep(2)
    assert system.request(rid)["state"] == "PROVISIONING"
    follower = subprocess.Popen(
        [CORRAL, "logs", rid, "--follow"],
        env={**system.env, "CORRAL_API_URL": system.api_url},
        stdout=subprocess.PIPE,
        text=True,
    )
    vm = vms(script)
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "SUCCEEDED", done
    assert done["exit_code"] == 0
    out, _ = follower.communicate(timeout=30)  # it ends by itself once the request ended
    assert follower.returncode == 0 and "hello from the vm rank=0" in out
    logs = system.cli("logs", rid)
    assert logs.returncode == 0 and "hello from the vm rank=0" in logs.stdout, vm.log()
    # The machine is released, and its token died with its run.
    wait_for(lambda: _ec2_states(moto, rid) == {"terminated"}, 30, "the VM terminated")
    resp = httpx.post(f"{system.api_url}/v1/node/heartbeat", json={"activity": "idle", "ttl_s": 5},
                      headers={"Authorization": f"Bearer {vm.token}"})  # fmt: skip
    assert resp.status_code == 403, resp.text

    # A failing run ends FAILED with its exit code, its output kept.
    rid = system.submit({**AWS_TASK, "name": "bad", "run": "echo about to fail; exit 7"})
    vms(_aws_script(moto, rid))
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "FAILED" and done["exit_code"] == 7, done
    assert "about to fail" in system.cli("logs", rid).stdout


def test_aws_a_service_runs_until_terminated_and_a_node_token_is_its_own(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm]
) -> None:
    system, moto = aws
    svc = system.submit({**AWS_TASK, "name": "svc", "setup": "echo service set up"})
    other = system.submit({**AWS_TASK, "name": "other", "setup": "echo other"})
    vm = vms(_aws_script(moto, svc))
    vm_other = vms(_aws_script(moto, other))
    system.wait_state(svc, {"RUNNING"}, 60)
    system.wait_state(other, {"RUNNING"}, 60)
    time.sleep(3)  # several heartbeats: still up, still RUNNING
    assert system.request(svc)["state"] == "RUNNING"
    assert vm.alive()
    wait_for(lambda: "service set up" in system.cli("logs", svc).stdout, 20, "the setup's output")

    # The node token acts on its own node only: the routes take no node id, and nothing
    # else accepts it.
    node = {"Authorization": f"Bearer {vm.token}"}
    with httpx.Client(base_url=system.api_url, headers=node, timeout=10) as c:
        assert (
            c.post("/v1/requests", json={"task": {"name": "x", "run": "true"}}).status_code == 401
        )
        assert c.post(f"/v1/requests/{other}/terminate").status_code == 401
        assert c.post("/v1/pools", json={}).status_code in (401, 422)
        mine = c.post("/v1/node/register", json={}).json()
        assert mine["work"]["envs"]["CORRAL_REQUEST_ID"] == svc
        assert other not in json.dumps(mine)
        forged = vm.token.rsplit(".", 1)[0] + ".AAAA"
        bad = c.get("/v1/node/assignments", headers={"Authorization": f"Bearer {forged}"})
        assert bad.status_code == 401
        theirs = vm_other.token.split(".")
        swapped = ".".join([*theirs[:3], vm.token.split(".")[3], vm.token.split(".")[4]])
        assert (
            c.get(
                "/v1/node/assignments", headers={"Authorization": f"Bearer {swapped}"}
            ).status_code
            == 401
        )

    # Terminated: the VM goes, its agent is stopped as the shutdown would, its token expires.
    assert system.cli("terminate", svc).returncode == 0
    wait_for(lambda: system.request(svc)["state"] == "TERMINATED", 60, "the service terminated")
    vm.power_off()
    resp = httpx.get(f"{system.api_url}/v1/node/assignments", headers=node)
    assert resp.status_code == 403, resp.text
    assert system.request(other)["state"] == "RUNNING"


def _ec2_states(moto: FaultyMoto, request_id: str) -> set[str]:
    """The EC2 states of the request's machines (moto's state outlives one test's server)."""
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=moto.url, region_name="us-east-1", **{
        "aws_access_key_id": "testing", "aws_secret_access_key": "testing"})  # fmt: skip
    filters = [{"Name": "tag:corral-request", "Values": [request_id]}]
    pages = ec2.describe_instances(Filters=filters)["Reservations"]
    return {i["State"]["Name"] for r in pages for i in r["Instances"]}


def test_gcp_a_job_runs_on_its_agent_and_a_failing_one_fails(
    make_system: Callable[..., System], vms: Callable[[str], Vm]
) -> None:
    with FakeCompute(project="corral-test") as fake:
        env = {
            "CORRAL_CLOUDS": json.dumps(["gcp"]),
            "CORRAL_GCP_API_ENDPOINT": fake.url,
            "CORRAL_GCP_PROJECT": "corral-test",
            "CORRAL_GCP_ANONYMOUS": "true",
            "CORRAL_NODE_HEARTBEAT_S": "0.5",
        }
        system = _start(make_system(env=env, ATTEMPT_DEADLINE_S="60"))
        rid = system.submit({**GCP_TASK, "name": "hello", "run": "echo hello from gce"})
        script = _gcp_script(fake, rid)
        _no_secrets(script, system)
        time.sleep(2)
        assert system.request(rid)["state"] == "PROVISIONING"
        vms(script)
        done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
        assert done["state"] == "SUCCEEDED", done
        assert "hello from gce" in system.cli("logs", rid).stdout

        rid = system.submit({**GCP_TASK, "name": "bad", "run": "echo failing; exit 3"})
        vms(_gcp_script(fake, rid))
        done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
        assert done["state"] == "FAILED" and done["exit_code"] == 3, done
