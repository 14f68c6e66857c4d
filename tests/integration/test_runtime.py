"""The runtime end to end: a real redis-server, the API, a worker per role and beat, all as
real processes, launching through the HTTP API onto the local cloud."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import System, agent_pids, wait_for

pytestmark = pytest.mark.integration

SERVICE = {
    "name": "svc",
    "resources": {"cloud": "local", "instance_type": "cpu-2"},
    "setup": "echo service-ready",
}


@pytest.fixture(scope="module")
def system(make_module_system: Callable[..., System]) -> System:
    """One installation for the module: each test launches requests of its own, and none
    stops a component (a killed machine is the local cloud's, not the system's)."""
    system = make_module_system()
    system.start_api()
    for role in ("schedule", "provision", "autoscale"):
        system.start_worker(role)
    system.start_beat()
    return system


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in (Path(f"/proc/{pid}/stat").read_text().split()[2])
    )


def test_service_runs_until_terminated_and_leaves_no_process(system: System) -> None:
    rid = system.submit(SERVICE)
    req = system.wait_state(rid, {"RUNNING"}, 60)
    [inst] = req["instances"]
    assert inst["state"] == "RUNNING" and inst["cloud"] == "local"
    assert inst["pid"] and _alive(inst["pid"])
    assert req["attempts"][-1]["outcome"] == "ok"

    with system.client() as c:
        assert c.post(f"/v1/requests/{rid}/terminate").status_code == 200
    req = system.wait_state(rid, {"TERMINATED"}, 30)
    assert [i["state"] for i in req["instances"]] == ["TERMINATED"]
    wait_for(lambda: not _alive(inst["pid"]), 10, "the agent process to exit")
    assert agent_pids([inst["provider_id"]]) == []


def test_job_runs_to_success_and_its_output_is_kept(system: System) -> None:
    ok = system.submit(
        {
            "name": "ok",
            "resources": {"cloud": "local", "cpus": 2},
            "setup": "echo preparing",
            "run": "echo hello-from-job; echo rank=$CORRAL_NODE_RANK",
        }
    )
    bad = system.submit(
        {"name": "bad", "resources": {"cloud": "local", "cpus": 2}, "run": "echo failing; exit 3"}
    )
    done = system.wait_state(ok, {"SUCCEEDED", "FAILED"}, 60)
    assert done["state"] == "SUCCEEDED"
    assert [i["state"] for i in done["instances"]] == ["TERMINATED"]
    failed = system.wait_state(bad, {"SUCCEEDED", "FAILED"}, 60)
    assert failed["state"] == "FAILED"
    logs = system.cli("logs", ok)
    assert logs.returncode == 0, logs.stderr
    assert (
        "preparing" in logs.stdout and "hello-from-job" in logs.stdout and "rank=0" in logs.stdout
    )


def test_lost_instance_is_relaunched_through_the_chain(system: System) -> None:
    rid = system.submit(SERVICE)
    first = system.wait_state(rid, {"RUNNING"}, 60)["instances"][0]
    os.killpg(first["pid"], signal.SIGKILL)  # the machine dies under the service

    def relaunched() -> bool:
        req = system.request(rid)
        running = [i for i in req["instances"] if i["state"] == "RUNNING"]
        return req["state"] == "RUNNING" and bool(running) and running[0]["id"] != first["id"]

    wait_for(relaunched, 60, "the request to run again on a new instance", system.home / "logs")
    req = system.request(rid)
    states = {i["id"]: i["state"] for i in req["instances"]}
    assert states[first["id"]] == "LOST"
    # The lost zone is remembered, so the relaunch went to another zone.
    new = next(i for i in req["instances"] if i["state"] == "RUNNING")
    assert new["zone"] != first["zone"]
