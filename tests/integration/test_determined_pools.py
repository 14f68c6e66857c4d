"""Determined resource pools at run time, on a real system and the local cloud: a master
config registered with `corral pools apply`, tasks routed to its pools (zero-slot tasks to the
aux default), agents launched on demand and reaped when idle, the priority scheduler's
preemption with requeue, fallback pools, and tasks that can never fit refused at submit."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.services.cli.pools_api_cmd import pool_body
from corral.services.client import Client

from harness import System, wait_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLOUD = FIXTURES / "localcloud" / "pools.yaml"
MASTER = FIXTURES / "pools" / "master-local.yaml"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared(make_module_system: Any) -> System:
    system: System = make_module_system(CLOUD, POOL_REBALANCE_INTERVAL_S="0.5")
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    with api(system) as client:  # `corral pools apply MASTER --name determined`
        client.apply_pool(**pool_body(MASTER, "determined", None))
    return system


@pytest.fixture
def system(shared: System) -> Iterator[System]:
    """The module's installation: what a test launched is taken down after it (its idle
    agents go as their pools say: the spill pool's after 30 s)."""
    yield shared
    shared.take_all_down()


def api(system: System) -> Client:
    """The client `corral launch`, `why` and `terminate` use, called in this process: a
    `corral` process per call cost most of a second of CPU on a loaded machine (the refusals
    at submit are still the command line's own, exit code and message)."""
    return Client(system.api_url, system.token)


def launch(system: System, tmp: Path, name: str, **fields: Any) -> str:
    """`corral launch` of a task file with ``fields``."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **fields}))
    with api(system) as client:
        return str(client.launch(path).id)


def why(system: System, request_id: str) -> dict[str, Any]:
    """What `corral why ID --json` prints."""
    with api(system) as client:
        found: dict[str, Any] = client.why(request_id).document()
    return found


def agents(system: System) -> list[dict[str, Any]]:
    with system.client() as c:
        resp = c.get("/v1/pools/determined")
    assert resp.status_code == 200, resp.text
    found: list[dict[str, Any]] = resp.json()["machines"]
    return found


def test_a_task_that_can_never_fit_is_refused_at_submit(system: System, tmp_path: Path) -> None:
    cases = {
        "cpu-only": ({"resource_pool": "aux", "slots": 1}, "has no slots"),
        "too-big": ({"slots": 6}, "can never give 6 slots"),
        "no-pool": ({"resource_pool": "nope", "slots": 1}, "nope"),
        "static": ({"resource_pool": "static", "slots": 1}, "static pool"),
    }
    before = _request_ids(system)
    paths = {}
    for name, (resources, _) in cases.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(
            yaml.safe_dump({"name": name, "resources": resources, "run": "true"})
        )
    # The four `corral launch` processes at once: each is most of a second of start-up, and
    # the cases are independent.
    with ThreadPoolExecutor(len(paths)) as pool:
        runs = {name: pool.submit(system.cli, "launch", str(p)) for name, p in paths.items()}
    for name, (_, expected) in cases.items():
        done = runs[name].result()
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert expected in done.stderr, (name, done.stderr)
        assert "Traceback" not in done.stderr
    assert _request_ids(system) == before  # nothing was queued


def _request_ids(system: System) -> set[str]:
    return {r["id"] for r in system.get("/v1/requests?limit=1000").json()["requests"]}


def test_zero_slot_tasks_run_on_the_aux_pool_and_idle_agents_are_reaped(
    system: System, tmp_path: Path
) -> None:
    earlier = {a["id"] for a in agents(system)}  # an earlier test's, on their way out

    def new_agents() -> list[dict[str, Any]]:
        return [a for a in agents(system) if a["id"] not in earlier]

    rid = launch(system, tmp_path, "board", resources={"slots": 0}, run="echo board")
    done = system.wait_state(rid, {"SUCCEEDED"}, 60)
    assert why(system, rid)["code"] in ("not_queued", "queued", "started")
    [instance] = done["instances"]
    assert instance["instance_type"] == "cpu-2"
    assert [a["pool"] for a in new_agents()] in (["aux"], [])
    # max_idle_agent_period is 2 s and min_instances 0: the idle agent goes.
    wait_for(lambda: new_agents() == [], 30, "the idle aux agent to be reaped")


def test_priority_preemption_requeues_and_fallback_pools_take_overflow(
    system: System, tmp_path: Path
) -> None:
    low = [
        launch(
            system,
            tmp_path,
            f"low-{i}",
            resources={"slots": 2, "priority": 50},
            run="sleep 300",
        )
        for i in range(2)
    ]
    for rid in low:
        system.wait_state(rid, {"RUNNING"}, 60)
    assert sorted(a["pool"] for a in agents(system)) == ["compute", "compute"]
    # Equal priority, not preemptible: waits in compute, or moves to its fallback pool.
    spill = launch(
        system,
        tmp_path,
        "spill",
        resources={"slots": 2, "priority": 50},
        scheduling={"fallback_pools": ["spill"], "preemptible": False},
        run="sleep 300",
    )
    system.wait_state(spill, {"RUNNING"}, 60)
    told = why(system, spill)
    assert told["pool"] == "spill" and "fallback pool spill" in told["reason"], told

    # The high task runs until the test lets it end (its agent is a process on this machine),
    # so the victim is still waiting when it is asked why.
    release = tmp_path / "high-may-end"
    high = launch(
        system,
        tmp_path,
        "high",
        resources={"slots": 2, "priority": 10},
        run=f"while [ ! -e {release} ]; do sleep 0.1; done",
    )
    system.wait_state(low[1], {"PREEMPTED"}, 30)  # the newest of the lowest
    assert system.request(low[0])["state"] == "RUNNING"
    assert why(system, low[1]).get("preempted_by") == high
    release.touch()
    system.wait_state(high, {"SUCCEEDED"}, 60)
    system.wait_state(low[1], {"RUNNING"}, 30)  # requeued, and placed again when room returned
    with api(system) as client:
        for rid in [*low, spill]:
            client.terminate(rid)
