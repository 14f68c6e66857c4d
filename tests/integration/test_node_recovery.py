"""Node agents on cloud machines that go wrong, each cloud played end to end (as in
test_node_agents): a machine whose agent falls silent, one the cloud reclaims (EC2's spot
interruption notice, Compute Engine's preemption), and the API stopped while machines run.

The silent agent and the spot notice share one AWS installation and one moto (the class
TestOneAwsInstallation): each test's request, its relaunch and its machines are its own, and
what it left is taken down after it; the zone one marks silent or reclaiming is not the other's
to assert on. The API outage stops a part of Corral, so it has an installation of its own, as
the Compute Engine test has. moto keeps one EC2 for the whole test process, and an installation
terminates every Corral machine it does not own (a stray), so no two AWS installations run at
once: the class's is stopped when its tests are done, and test_node_agents' shared installation
is gone before this module starts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloud_vms import (
    Fleet,
    Metadata,
    Vm,
    aws_agents_system,
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
from harness import System, kill_agents, wait_for

pytestmark = pytest.mark.integration

AWS_TASK = {"resources": {"cloud": "aws", "instance_type": "m5.large", "region": "us-east-1"}}
GCP_TASK = {"resources": {"cloud": "gcp", "instance_type": "n2-standard-2"}}


@pytest.fixture
def vms(tmp_path: Path) -> Iterator[Callable[..., Vm]]:
    fleet = Fleet(tmp_path)
    yield fleet.boot
    fleet.kill_all()


# How long an agent's silence takes to lose its machine here: six of its 0.5 s heartbeats
# (aws_agents_system's 6 s, halved, as FAST_TIMERS has it for the local cloud's agents). The
# ratios the tests rest on hold: an agent's backoff while the API is away is capped at a third
# of it, and the API outage test stays down for twice it.
HEARTBEAT_TIMEOUT_S = 3.0


def _aws_system(make_system: Callable[..., System], moto: FaultyMoto) -> System:
    """An AWS installation on ``moto``, started, machines lost after HEARTBEAT_TIMEOUT_S."""

    def make(**kwargs: object) -> System:
        return make_system(**{**kwargs, "HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S)})

    return aws_agents_system(make, moto)


@pytest.fixture
def aws(make_system: Callable[..., System]) -> Iterator[tuple[System, FaultyMoto]]:
    """An AWS installation of the test's own."""
    with FaultyMoto() as moto:
        yield _aws_system(make_system, moto), moto


@pytest.fixture(scope="class")
def class_aws(
    make_module_system: Callable[..., System],
) -> Iterator[tuple[System, FaultyMoto]]:
    """One AWS installation for a class's tests (an installation's start is seconds of CPU
    for the API, the workers and beat), stopped once they are done: the module's other AWS
    installation must not run beside it."""
    with FaultyMoto() as moto:
        system = _aws_system(make_module_system, moto)
        try:
            yield system, moto
        finally:
            system.stop(grace_s=0)
            kill_agents(system)


@pytest.fixture
def shared_aws(
    class_aws: tuple[System, FaultyMoto], vms: Callable[..., Vm]
) -> Iterator[tuple[System, FaultyMoto]]:
    """The class's installation as a fresh one: after the test its requests are taken down
    and their machines gone (before the test's played machines are killed)."""
    yield class_aws
    class_aws[0].take_all_down()


def _instances_of(system: System, request_id: str) -> dict[str, str]:
    """The request's instances: id -> state."""
    return {i["id"]: i["state"] for i in system.request(request_id)["instances"]}


class TestOneAwsInstallation:
    """A silent agent and a spot notice, on the class's AWS installation (class_aws)."""

    def test_aws_a_silent_agent_is_lost_and_its_request_relaunched_on_a_new_machine(
        self, shared_aws: tuple[System, FaultyMoto], vms: Callable[..., Vm]
    ) -> None:
        system, moto = shared_aws
        rid = system.submit({**AWS_TASK, "name": "svc", "setup": "echo first machine"})
        first = vms(aws_script(moto, rid))
        [old] = system.wait_state(rid, {"RUNNING"}, 60)["instances"]
        first.crash()  # no last report: its heartbeats just stop
        tagged = {"corral-request": rid}
        wait_for(lambda: len(aws_scripts(moto, **tagged)) == 2, 60, "the relaunch to reach EC2")
        vms(aws_scripts(moto, **tagged)[-1])
        wait_for(
            lambda: list(_instances_of(system, rid).values()) == ["LOST", "RUNNING"],
            60,
            "the request RUNNING again on a new machine",
        )
        done = system.request(rid)
        assert done["state"] == "RUNNING" and done["relaunches"] == 1
        assert [r["outcome"] for r in done["runs"]] == ["lost", "running"]
        assert done["instances"][1]["zone"] != old["zone"]  # the silent zone is remembered
        wait_for(
            lambda: ec2_state(moto.url, old["provider_id"]) == "terminated", 30, "the old VM gone"
        )

    def test_aws_a_spot_interruption_notice_starts_recovery_before_the_machine_goes(
        self, shared_aws: tuple[System, FaultyMoto], vms: Callable[..., Vm]
    ) -> None:
        system, moto = shared_aws
        metadata = Metadata()
        fresh = Metadata()  # the replacement is another machine: its metadata holds no notice
        try:
            spot = {"resources": {**AWS_TASK["resources"], "use_spot": True}}
            rid = system.submit({**spot, "name": "spot-svc", "setup": "echo on spot"})
            vm = vms(aws_script(moto, rid), metadata.url)
            [old] = system.wait_state(rid, {"RUNNING"}, 60)["instances"]
            assert old["market"] == "spot"
            # The notice is posted as soon as the machine runs: the agent's next look at its
            # metadata finds it (every 0.5 s here, cloud_vms.PLAYED_CLOUD_TIMERS; 5 s as shipped).
            metadata.interrupt_spot()
            tagged = {"corral-request": rid}
            wait_for(lambda: len(aws_scripts(moto, **tagged)) == 2, 60, "the relaunch to reach EC2")
            assert metadata.calls > 0  # the agent looked (IMDSv2: a session token, then a GET)
            # Recovery started while the machine still runs: the cloud had only warned.
            with system.client() as c:
                events = [e["text"] for e in c.get(f"/v1/requests/{rid}/events").json()["events"]]
            assert any("reclaiming" in e and "spot interruption" in e for e in events), events
            # Booted against the warned machine's metadata, the replacement read the same notice
            # and was reclaimed in turn (the test then watched for a RUNNING window of one 0.5 s
            # notice poll, and two loaded CI runs missed it).
            vms(aws_scripts(moto, **tagged)[-1], fresh.url)
            seen: dict[str, str] = {}

            def running_again() -> bool:
                seen.update(_instances_of(system, rid))
                return list(seen.values()) == ["LOST", "RUNNING"]

            # The machines' last states and the logs go into the message if it times out.
            try:
                wait_for(running_again, 60, "the request RUNNING again", system.home / "logs")
            except pytest.fail.Exception as exc:
                raise pytest.fail.Exception(f"{exc} (its machines: {seen})") from None
            # Terminated by Corral, the warned machine's agent is refused and stops by itself.
            wait_for(lambda: not vm.alive(), 30, "the warned machine's agent to stop")
            # The replacement, unwarned, stays: nothing was launched a third time.
            assert list(_instances_of(system, rid).values()) == ["LOST", "RUNNING"]
            assert len(aws_scripts(moto, **tagged)) == 2
        finally:
            metadata.close()
            fresh.close()


def test_gcp_a_preempted_machine_is_relaunched(
    make_system: Callable[..., System], vms: Callable[..., Vm]
) -> None:
    metadata = Metadata()
    with FakeCompute(project="corral-test") as fake:
        system = start_with_agents(
            make_system(env=gcp_env(fake), ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6")
        )
        task = {"resources": {**GCP_TASK["resources"], "use_spot": True}}
        rid = system.submit({**task, "name": "preemptible", "setup": "echo up"})
        vm = vms(gcp_script(fake, rid), metadata.url)
        system.wait_state(rid, {"RUNNING"}, 60)
        metadata.preempted = True
        tagged = {"corral-request": rid}
        wait_for(lambda: len(gcp_scripts(fake, **tagged)) == 2, 60, "the relaunch insert")
        wait_for(lambda: not vm.alive(), 30, "the preempted machine's agent to stop")
        [lost] = [i for i in system.request(rid)["instances"] if i["state"] == "LOST"]
        assert lost["market"] == "spot"
    metadata.close()


def test_aws_an_api_outage_loses_no_machine_and_jobs_end_by_their_exit_codes(
    aws: tuple[System, FaultyMoto], vms: Callable[..., Vm]
) -> None:
    """Issue #23 item 8: the agents report through the API; with the API down for twice the
    heartbeat timeout, their silence is the control plane's, not theirs. No machine is LOST,
    nothing is relaunched, and a job that ended meanwhile ends by its exit code once its
    agent's last report gets through."""
    system, moto = aws
    timeout_s = HEARTBEAT_TIMEOUT_S
    # The jobs run until the test lets them end, during the outage (a file on their machine):
    # they are RUNNING when it begins and have ended well before it is over.
    wait_go = "until [ -e ~/outage-began ]; do sleep 0.1; done"
    svc = system.submit({**AWS_TASK, "name": "svc", "setup": "echo serving"})
    ok = system.submit({**AWS_TASK, "name": "ok", "run": f"{wait_go}; echo done"})
    bad = system.submit({**AWS_TASK, "name": "bad", "run": f"{wait_go}; exit 3"})
    machines = {rid: vms(aws_script(moto, rid)) for rid in (svc, ok, bad)}
    for rid in (svc, ok, bad):
        system.wait_state(rid, {"RUNNING"}, 60)
    port = int(system.api_url.rsplit(":", 1)[1])
    system.kill("api")  # a crash: no clean shutdown
    down = time.monotonic()
    for rid in (ok, bad):
        (machines[rid].root / "outage-began").touch()  # the jobs end; nobody can hear them
    time.sleep(max(0.0, down + 2 * timeout_s - time.monotonic()))
    # The workers and beat kept looking all along (the boot watch, reconcile): nothing moved.
    system.start_api(port)
    assert system.api_url  # waits for it to answer
    back = time.monotonic()
    done = system.wait_state(ok, {"SUCCEEDED", "FAILED"}, 60)
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0, done
    done = system.wait_state(bad, {"SUCCEEDED", "FAILED"}, 60)
    assert done["state"] == "FAILED" and done["exit_code"] == 3, done
    # A whole timeout after the API is back, and two reconcile passes more (FAST_TIMERS: one
    # every 0.5 s) for a verdict to show: still nothing lost.
    time.sleep(max(0.0, back + timeout_s + 1.0 - time.monotonic()))
    for rid in (svc, ok, bad):
        seen = system.request(rid)
        assert seen["relaunches"] == 0, seen
        assert "LOST" not in _instances_of(system, rid).values(), seen
        assert len(aws_scripts(moto, **{"corral-request": rid})) == 1  # nothing launched again
    assert system.request(svc)["state"] == "RUNNING"
