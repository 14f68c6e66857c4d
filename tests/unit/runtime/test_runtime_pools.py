"""One pass of each pool kind on the fake provider: a machine pool places a workload and
launches its machine; a Determined pool grows an agent for a task and starts it there."""

from __future__ import annotations

from pathlib import Path

import yaml
from runtime_driver import SMALL_POOL, Driver
from runtime_driver import SMALL_POOL_WORKLOAD as WORKLOAD

from corral.services.providers.base import TAG_MACHINE, TAG_POOL
from corral.services.queues import dispatch
from corral.services.runtime import requests
from corral.services.runtime.pooled.registry import apply_pool, pool_view
from corral.shared.config.task import Task
from corral.shared.routing import DeterminedRoute, MachinePoolRoute

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _submit(driver: Driver, task: dict) -> str:
    return requests.submit(driver.deps, Task.model_validate(task)).id


def test_a_machine_pool_pass_places_the_first_workload_and_queues_the_second(
    driver: Driver,
) -> None:
    apply_pool(
        driver.deps, name="small", kind="machine_pool", file_name="small.yaml",
        spec=SMALL_POOL, cloud="local",
    )  # fmt: skip
    driver.queue.clear()  # the pass applying publishes: nothing to do yet
    first = _submit(driver, {**WORKLOAD, "name": "first"})
    second = _submit(driver, {**WORKLOAD, "name": "second"})
    req = driver.deps.store.get_request(first)
    assert req is not None and req.route == MachinePoolRoute(pool="small")
    driver.step()  # the first admission: queued in the pool, and a pass run over it
    driver.step()  # the second
    view = pool_view(driver.deps, "small")
    phases = {w["id"]: w["phase"] for w in view["workloads"]}
    assert phases == {first: "running", second: "pending"}
    [machine] = view["machines"]
    assert machine["status"] == "launching" and machine["workload"] == first
    # Carried out: the machine is handed to the provisioning worker, which launches it.
    driver.run(until=lambda: bool(driver.fake.launched()))
    [spec] = driver.fake.launched()
    assert spec.tags[TAG_POOL] == "small" and spec.tags[TAG_MACHINE] == machine["id"]


def _apply_master(driver: Driver, master: dict | None = None) -> None:
    """Register the fixture's master config (or ``master``) on the local cloud; the pass
    applying publishes, and there is nothing to do yet."""
    if master is None:
        master = yaml.safe_load((FIXTURES / "pools" / "master-local.yaml").read_text())
    apply_pool(
        driver.deps, name="det", kind="master_config", file_name="master.yaml",
        spec=master, cloud="local",
    )  # fmt: skip
    driver.queue.clear()


def test_a_determined_pass_grows_an_agent_and_starts_the_task_on_it(driver: Driver) -> None:
    _apply_master(driver)
    rid = _submit(driver, {"name": "train", "resources": {"slots": 2}, "run": "sleep 1"})
    req = driver.deps.store.get_request(rid)
    assert isinstance(req.route, DeterminedRoute)  # type: ignore[union-attr]
    assert req.route.resource_pool == "compute"  # type: ignore[union-attr]
    driver.step()  # admission: queued in the pool, and a pass run over it
    view = pool_view(driver.deps, "det")
    # The pool grew an agent for the task, which waits for it.
    [agent] = [m for m in view["machines"] if m["pool"] == "compute"]
    assert agent["status"] == "launching" and agent["slots"] == 2
    assert {w["id"]: w["phase"] for w in view["workloads"]} == {rid: "pending"}
    # Carried out: the agent is launched, its boot watched; once up, the task starts there.
    driver.run(until=lambda: pool_view(driver.deps, "det")["workloads"][0]["phase"] == "running")
    assert pool_view(driver.deps, "det")["machines"][0]["status"] == "up"
    assert dispatch.POOL_MACHINE in driver.ran and dispatch.WATCH_BOOTS in driver.ran
    [spec] = driver.fake.launched()
    assert spec.tags[TAG_MACHINE] == agent["id"]


def test_a_determined_experiment_keeps_to_its_max_slots(driver: Driver) -> None:
    """resources.max_slots reaches the fair-share pass: an experiment limited to one slot runs
    one of its one-slot tasks, the other waits (at_max_slots), and no agent is grown for it."""
    from corral.services.runtime.why import why

    master = yaml.safe_load((FIXTURES / "pools" / "master-local.yaml").read_text())
    master["resource_pools"].append(
        {
            "pool_name": "fair",
            "scheduler": {"type": "fair_share"},
            "provider": {
                "type": "local", "instance_type": "cpu-2", "instance_slots": 1,
                "max_instances": 2, "max_idle_agent_period": "30s",
            },
        }
    )  # fmt: skip
    _apply_master(driver, master)
    task = {
        "resources": {"resource_pool": "fair", "slots": 1, "max_slots": 1},
        "labels": {"experiment": "exp1"},
        "run": "sleep 1",
    }
    first = _submit(driver, {**task, "name": "first"})
    driver.fake.advance(1.0)  # submitted later: the runtime's clock is the fake's, and at
    second = _submit(driver, {**task, "name": "second"})  # one instant ids break the tie
    driver.step()
    driver.step()
    driver.run(until=lambda: dict(_phases(driver)).get(first) == "running")
    assert _phases(driver)[second] == "pending"
    told = why(driver.deps, second)
    assert told["code"] == "at_max_slots" and "max_slots is 1" in told["reason"], told
    assert len([m for m in pool_view(driver.deps, "det")["machines"] if m["pool"] == "fair"]) == 1


def _phases(driver: Driver) -> dict[str, str]:
    return {w["id"]: w["phase"] for w in pool_view(driver.deps, "det")["workloads"]}


def test_a_determined_pool_whose_every_agent_place_is_blocked_grows_no_agent(
    driver: Driver,
) -> None:
    """Every place the compute pool's agents launch in (cpu-2 in lab-east-a, lab-east-b and
    lab-west-a) blocked: the pass grows no agent there (before, it grew one whose launch was
    refused by the blocks alone, the pass grew another, and so on), and `why` names the
    blocks; once they end, the next pass grows the agent and the task runs."""
    from corral.services.runtime.pooled import passes
    from corral.services.runtime.why import why
    from corral.shared.placement import Block

    _apply_master(driver)
    now = driver.deps.now()
    for block in (
        Block("local", region="lab-east"),
        Block("local", "lab-west", "lab-west-a", "cpu-2", "on_demand"),
    ):
        driver.deps.blocks.add(block, now=now, ttl_s=600, reason="sold out", outcome="capacity")
    rid = _submit(driver, {"name": "train", "resources": {"slots": 2}, "run": "sleep 1"})
    driver.run()
    assert driver.fake.launched() == []
    assert [m for m in pool_view(driver.deps, "det")["machines"] if m["pool"] == "compute"] == []
    told = why(driver.deps, rid)
    assert told["code"] == "pool_full", told
    assert (
        "; pool compute: no new agent: its 3 places blocked (local lab-east: every instance "
        "type; local lab-west-a: cpu-2 (on_demand)) until the first of these blocks ends"
    ) in told["reason"], told
    # The reason names the blocks, not their ends (a renewal moves those): `why` lists them.
    assert driver.blocks_listed(told) == [
        ("capacity", "local lab-west-a: cpu-2 (on_demand)"),
        ("region", "local lab-east: every instance type"),
    ], told
    assert "sold out" not in told["reason"], told  # the scopes only, not what was refused
    driver.deps.blocks.clear()
    passes.run_pass(driver.deps, "det")
    driver.run(until=lambda: _phases(driver).get(rid) == "running")
    assert [s.zone for s in driver.fake.launched()] == ["lab-east-a"]
    assert "no new agent" not in why(driver.deps, rid)["reason"]
