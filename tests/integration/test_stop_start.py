"""`corral stop` / `corral start` on AWS (moto's EC2 behind Corral's fault proxy) and Google
Cloud (the Compute API fake), the VM's
agent played on this machine (tests/cloud_vms.py): the service is stopped (StopInstances, the
request and its machine STOPPED, the agent's last words as the machine shuts down keep its
node token), then started (StartInstances, STARTING) and RUNNING again once the agent, booted
anew with the token it kept, reports."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloud_vms import (
    AWS_ENV,
    Fleet,
    Vm,
    aws_script,
    ec2_state,
    gcp_env,
    gcp_script,
    start_with_agents,
)
from fakes.aws_faults import FaultyMoto
from fakes.gcp_compute import FakeCompute
from harness import System, wait_for

pytestmark = pytest.mark.integration

# The heartbeat timeout of the stop/start tests (their agents beat every 0.5 s): a stopped
# machine is then watched for longer than it, so a stopped service taken for lost would show.
SILENT_S = "3"

AWS_TASK = {"resources": {"cloud": "aws", "instance_type": "m5.large", "region": "us-east-1"}}


@pytest.fixture
def vms(tmp_path: Path) -> Iterator[Callable[..., Vm]]:
    fleet = Fleet(tmp_path)
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
        # Silent after 3 s (six 0.5 s heartbeats): shorter than the 4 s a stopped machine is
        # watched saying nothing, so taking its silence for a lost machine would show.
        yield (
            start_with_agents(
                make_system(env=env, ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S=SILENT_S)
            ),
            moto,
        )


def _boot_again(vm: Vm) -> None:
    """The stopped VM is started: its boot script runs again in the same folder (its disk
    kept the node token the agent wrote), as Compute Engine's startup script or cloud-init's
    per-boot copy does."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(vm.root),
        "CORRAL_NODE_ROOT": str(vm.root),
        "CORRAL_NODE_METADATA_URL": "off",
    }
    vm.proc = subprocess.Popen(
        ["bash", str(vm.root / "boot.sh")],
        env=env,
        cwd=vm.root,
        start_new_session=True,
        stdout=(vm.root / "boot-2.out").open("wb"),
        stderr=subprocess.STDOUT,
    )
    vm.proc.wait(120)
    assert vm.proc.returncode == 0, (vm.root / "boot-2.out").read_text()


def _ec2_address(endpoint_url: str, provider_id: str) -> str | None:
    import boto3

    ec2 = boto3.client(
        "ec2",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    [inst] = ec2.describe_instances(InstanceIds=[provider_id])["Reservations"][0]["Instances"]
    return inst.get("PublicIpAddress") or inst.get("PrivateIpAddress")


def _ids(moto: FaultyMoto, action: str) -> list[str]:
    return [
        v
        for r in moto.requests(action)
        for k, v in r.params.items()
        if k.startswith("InstanceId.") and r.fault is None
    ]


def _actions_on(moto: FaultyMoto, provider_id: str) -> list[str]:
    """The actions EC2 took on one machine (answered without a fault), oldest first."""
    return [
        r.action
        for r in moto.all_requests()
        if r.fault is None
        and any(k.startswith("InstanceId.") and v == provider_id for k, v in r.params.items())
    ]


def _states(system: System, rid: str) -> list[str]:
    with system.client() as c:
        events = c.get(f"/v1/requests/{rid}/events").json()["events"]
    return [e["text"].split()[1] for e in events if e["text"].startswith("state: ")]


def test_aws_a_service_stops_and_starts_again_on_its_agents_report(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm]
) -> None:
    system, moto = aws
    rid = system.submit({**AWS_TASK, "name": "svc", "setup": "echo service set up"})
    vm = vms(aws_script(moto, rid))
    view = system.wait_state(rid, {"RUNNING"}, 60)
    [inst] = view["instances"]
    pid = inst["provider_id"]
    token = vm.token
    assert token.startswith("cn2.n.")

    got = system.cli("stop", rid)
    assert got.returncode == 0, got.stderr
    stopped = system.wait_state(rid, {"STOPPED"}, 60)
    assert stopped["instances"][0]["state"] == "STOPPED"
    wait_for(lambda: pid in _ids(moto, "StopInstances"), 30, "StopInstances for the VM")
    wait_for(lambda: ec2_state(moto.url, pid) == "stopped", 30, "moto to say stopped")
    vm.power_off()  # the machine shuts down: its agent's last report, no end
    silent = time.monotonic()
    assert vm.token == token
    again = system.cli("stop", rid)  # asked while the machine says nothing
    assert again.returncode == 2 and "only a RUNNING request can stop" in again.stderr
    # Past the heartbeat timeout of its silence, several reconcile passes: a stopped service
    # that says nothing is neither lost nor relaunched.
    time.sleep(max(0.0, silent + float(SILENT_S) + 1 - time.monotonic()))
    assert system.request(rid)["state"] == "STOPPED"
    assert len(moto.requests("RunInstances")) == 1
    assert set(_ids(moto, "StopInstances")) == {pid}  # (asked again while it still ran: fine)

    got = system.cli("start", rid, "--json")
    assert got.returncode == 0, got.stderr
    wait_for(lambda: pid in _ids(moto, "StartInstances"), 30, "StartInstances for the VM")
    assert system.request(rid)["state"] == "STARTING"
    wait_for(lambda: ec2_state(moto.url, pid) == "running", 30, "moto to say running")
    _boot_again(vm)  # its agent resumes with the token it kept
    back = system.wait_state(rid, {"RUNNING"}, 60)
    assert back["instances"][0]["state"] == "RUNNING"
    assert back["instances"][0]["provider_id"] == pid  # the same machine, not a relaunch
    assert back["instances"][0]["address"] == _ec2_address(moto.url, pid)  # as EC2 says now
    assert _states(system, rid)[-3:] == ["STOPPED", "STARTING", "RUNNING"]
    wait_for(lambda: vm.log().count("service set up") >= 2, 30, "setup to run again on boot")

    # Terminated from here, it ends for good (its token with it).
    assert system.cli("terminate", rid).returncode == 0
    system.wait_state(rid, {"TERMINATED"}, 60)
    wait_for(lambda: ec2_state(moto.url, pid) == "terminated", 30, "the VM terminated")


def test_gcp_a_service_stops_and_starts_again_on_its_agents_report(
    make_system: Callable[..., System], vms: Callable[[str], Vm]
) -> None:
    """The same on Google Cloud: instances.stop and instances.start on the Compute fake."""
    task = {"resources": {"cloud": "gcp", "instance_type": "n2-standard-2"}}
    with FakeCompute(project="corral-test") as fake:
        system = start_with_agents(
            make_system(env=gcp_env(fake), ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S=SILENT_S)
        )
        rid = system.submit({**task, "name": "svc", "setup": "echo gce service up"})
        vm = vms(gcp_script(fake, rid))
        [inst] = system.wait_state(rid, {"RUNNING"}, 60)["instances"]
        zone, name = inst["provider_id"].rsplit("/", 1)
        assert system.cli("stop", rid).returncode == 0
        system.wait_state(rid, {"STOPPED"}, 60)
        wait_for(
            lambda: ("stop", zone, name) in fake.power_calls, 30, f"instances.stop {fake.calls}"
        )
        vm.power_off()
        time.sleep(float(SILENT_S) + 1)  # past the heartbeat timeout: neither lost nor relaunched
        assert system.request(rid)["state"] == "STOPPED"
        assert len(fake.inserts) == 1
        assert system.cli("start", rid).returncode == 0
        wait_for(lambda: fake.power_calls[-1] == ("start", zone, name), 30, "instances.start")
        _boot_again(vm)  # the startup script runs on every boot
        back = system.wait_state(rid, {"RUNNING"}, 60)
        assert back["instances"][0]["provider_id"] == inst["provider_id"]
        assert _states(system, rid)[-3:] == ["STOPPED", "STARTING", "RUNNING"]
        assert system.cli("terminate", rid).returncode == 0
        system.wait_state(rid, {"TERMINATED"}, 60)


def test_aws_a_start_whose_agent_never_reports_is_stopped_again(
    make_system: Callable[..., System], vms: Callable[[str], Vm]
) -> None:
    """Started, but the machine's agent never reports (a broken boot): past the start
    deadline the request is STOPPED again, with the reason, and the machine stopped again
    rather than left billing unseen."""
    with FaultyMoto() as moto:
        env = {
            **AWS_ENV,
            "CORRAL_CLOUDS": json.dumps(["aws"]),
            "CORRAL_AWS_ENDPOINT_URL": moto.url,
            "CORRAL_AWS_DEFAULT_IMAGE_ID": "ami-12c6146b",
            "CORRAL_NODE_HEARTBEAT_S": "0.5",
        }
        # A start deadline of its own, shorter than the launch's (a first boot installs the
        # agent; a start waits for nothing of the kind here): 3 s, six reconcile passes
        # (FAST_TIMERS), and six of the agent's 0.5 s heartbeats it would have sent.
        system = start_with_agents(
            make_system(
                env=env, ATTEMPT_DEADLINE_S="60", START_DEADLINE_S="3", HEARTBEAT_TIMEOUT_S="6"
            )
        )
        rid = system.submit({**AWS_TASK, "name": "svc", "setup": "true"})
        vm = vms(aws_script(moto, rid))
        [inst] = system.wait_state(rid, {"RUNNING"}, 60)["instances"]
        pid = inst["provider_id"]
        assert system.cli("stop", rid).returncode == 0
        system.wait_state(rid, {"STOPPED"}, 60)
        vm.power_off()
        assert system.cli("start", rid).returncode == 0
        wait_for(lambda: pid in _ids(moto, "StartInstances"), 30, "StartInstances")
        # Not booted again: nothing reports. STOPPED again after the 3 s start deadline.
        done = system.wait_state(rid, {"STOPPED", "RUNNING"}, 60)
        assert done["state"] == "STOPPED", done
        with system.client() as c:
            texts = [e["text"] for e in c.get(f"/v1/requests/{rid}/events").json()["events"]]
        assert any("did not report within 3 s of the start" in t for t in texts), texts

        def stopped_after_start() -> bool:
            actions = _actions_on(moto, pid)
            last_start = len(actions) - 1 - actions[::-1].index("StartInstances")
            return "StopInstances" in actions[last_start:]

        wait_for(stopped_after_start, 30, "the machine stopped again")
        wait_for(lambda: ec2_state(moto.url, pid) == "stopped", 30, "moto to say stopped")
