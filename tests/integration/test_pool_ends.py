"""A pool's queue moves on as soon as its work ends, not at beat's next rebalancing: a job's exit
and a dead machine, noticed by reconcile (runtime/pooled/ends.py), wake the pool's pass.

The installation's rebalancing runs every 600 s (it would be 30 s as shipped), so it cannot be
what moves the queue within these tests' bounds."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.services.cli.pools_api_cmd import pool_body
from corral.services.client import Client

from harness import System, wait_for
from local_processes import processes_of

pytestmark = pytest.mark.integration

CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "pools.yaml"
REBALANCE_S = 600.0
# What a wake may take at most: reconcile's look (every 2 s) and a pass, on loaded cores. A
# dead machine's work also waits for a new machine to boot.
WAKE_BOUND_S = 10.0
RELAUNCH_BOUND_S = 25.0


@pytest.fixture(scope="module")
def system(make_module_system: Callable[..., System]) -> System:
    made: System = make_module_system(
        CLOUD, MIN_RUNTIME_S="1", POOL_REBALANCE_INTERVAL_S=str(REBALANCE_S)
    )
    made.start_api()
    made.start_worker("schedule")
    made.start_worker("provision")
    made.start_beat()
    return made


def one_machine_pool(system: System, tmp: Path, name: str) -> dict[str, Any]:
    """A pool of one cpu-2 machine registered as ``name``; the compute config that uses it."""
    doc = {
        "kind": "ANYSCALE_MANAGED",
        "machine_types": [
            {
                "machine_type": "cpu",
                "launch_templates": [{"instance_type": "cpu-2"}],
                "partitions": [{"name": "shared", "size": 1}],
            }
        ],
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    with Client(system.api_url, system.token) as client:
        client.apply_pool(**pool_body(path, name, None))
    flags = {"cloud_deployment": {"machine_pool": name}}
    return {"worker_nodes": [{"instance_type": "cpu", "flags": flags}]}


def launch(system: System, tmp: Path, name: str, compute: dict[str, Any], run: str) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "compute_config": compute, "run": run}))
    with Client(system.api_url, system.token) as client:
        return str(client.launch(path).id)


def machine_of(system: System, request_id: str) -> str:
    """The cloud's id of the pool machine the workload runs on (its running record's)."""
    found: list[str] = []

    def running() -> bool:
        found[:] = [
            i["provider_id"]
            for i in system.request(request_id)["instances"]
            if i["state"] == "RUNNING" and i.get("provider_id")
        ]
        return bool(found)

    wait_for(running, 30, f"{request_id}'s machine")
    return found[0]


def queued(system: System, request_id: str) -> None:
    """Wait until the workload waits in its pool's queue, and a little longer: no pass the
    placements sent is left to run when the test ends the work."""
    wait_for(lambda: system.request(request_id)["state"] == "PENDING", 30, "the queue")
    time.sleep(3)
    assert system.request(request_id)["state"] == "PENDING"


def test_the_next_workload_starts_within_seconds_of_a_jobs_exit(
    system: System, tmp_path: Path
) -> None:
    compute = one_machine_pool(system, tmp_path, "one-exit")
    release = tmp_path / "may-end"
    first = launch(
        system, tmp_path, "first", compute, f"while [ ! -e {release} ]; do sleep 0.1; done"
    )
    system.wait_state(first, {"RUNNING"}, 60)
    second = launch(system, tmp_path, "second", compute, "sleep 300")
    queued(system, second)
    release.touch()
    ended_at = time.monotonic()
    system.wait_state(second, {"RUNNING"}, WAKE_BOUND_S)
    took_s = time.monotonic() - ended_at
    print(f"the second workload ran {took_s:.1f} s after the first's job exited")
    assert system.request(first)["state"] == "SUCCEEDED"
    system.clear()


def test_a_workload_whose_machine_died_runs_again_within_seconds(
    system: System, tmp_path: Path
) -> None:
    compute = one_machine_pool(system, tmp_path, "one-dead")
    rid = launch(system, tmp_path, "survivor", compute, "sleep 300")
    system.wait_state(rid, {"RUNNING"}, 60)
    dead = machine_of(system, rid)
    time.sleep(3)  # no pass of the placement left to run
    for pid in processes_of(dead):  # every process of the machine: it died
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    died_at = time.monotonic()

    def elsewhere() -> bool:
        req = system.request(rid)
        return req["state"] == "RUNNING" and any(
            i["state"] == "RUNNING" and i.get("provider_id") not in (None, dead)
            for i in req["instances"]
        )

    wait_for(elsewhere, RELAUNCH_BOUND_S, f"{rid} on a new machine")
    took_s = time.monotonic() - died_at
    print(f"the workload ran on a new machine {took_s:.1f} s after its machine died")
    texts = [e["text"] for e in system.get(f"/v1/requests/{rid}/events").json()["events"]]
    assert any("was lost" in t for t in texts), texts
    system.clear()


def test_the_next_workload_starts_within_seconds_of_a_cancel(
    system: System, tmp_path: Path
) -> None:
    compute = one_machine_pool(system, tmp_path, "one-cancel")
    first = launch(system, tmp_path, "cancelled", compute, "sleep 300")
    system.wait_state(first, {"RUNNING"}, 60)
    second = launch(system, tmp_path, "after-cancel", compute, "sleep 300")
    queued(system, second)
    with Client(system.api_url, system.token) as client:
        client.terminate(first)
    system.wait_state(second, {"RUNNING"}, WAKE_BOUND_S)
    system.clear()
