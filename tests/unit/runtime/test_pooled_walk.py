"""A pooled machine's launch walks its zones with the block memory every launch shares (issue
#48 item 2), on the fake provider standing in for tests/fixtures/localcloud/runtime.yaml
(cpu-2 in lab-east-a, lab-east-b and lab-west-a, in that order): a zone blocked for its type
and market is passed over without a cloud call, and its own refusals are remembered at the
cloud's scope for the next launch, pooled or direct. The walk's own cases:
tests/unit/test_machine_walk.py; on a real system: tests/integration/test_pool_zone_walk.py."""

from __future__ import annotations

from typing import Any

from runtime_driver import Driver

from corral.services.runtime import requests
from corral.services.runtime.pooled import passes
from corral.services.runtime.pooled.registry import apply_pool, pool_view
from corral.services.runtime.why import why
from corral.shared.config.task import Task
from corral.shared.errors import CapacityError
from corral.shared.placement import Block

POOL = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "cpu-2"}],
            "partitions": [{"name": "shared", "size": 2}],
        }
    ],
}
WORKLOAD = {
    "compute_config": {
        "worker_nodes": [
            {"instance_type": "cpu", "flags": {"cloud_deployment": {"machine_pool": "pool"}}}
        ]
    },
    "run": "sleep 100",
}


def _pool(driver: Driver) -> None:
    apply_pool(driver.deps, name="pool", kind="machine_pool", file_name="pool.yaml", spec=POOL,
               cloud="local")  # fmt: skip
    driver.queue.clear()


def _block(driver: Driver, block: Block, outcome: str = "capacity") -> None:
    driver.deps.blocks.add(block, now=driver.deps.now(), ttl_s=600, reason="sold out",
                           outcome=outcome)  # fmt: skip


def _launch_workload(driver: Driver, name: str) -> str:
    rid = requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "name": name})).id
    before = len(driver.fake.launched())
    driver.run(until=lambda: len(driver.fake.launched()) > before)
    return rid


def _zones(driver: Driver) -> list[tuple[str, str]]:
    return [(s.zone, s.market) for s in driver.fake.launched()]


def _east_a(itype: str = "cpu-2", market: str = "on_demand") -> Block:
    return Block("local", "lab-east", "lab-east-a", itype, market)


def test_a_pool_machine_skips_a_zone_blocked_for_its_type_and_market_only(driver: Driver) -> None:
    _pool(driver)
    # Blocks in lab-east-a for another type, and for cpu-2's other market: not this machine's.
    _block(driver, _east_a("cpu-8"))
    _block(driver, _east_a("cpu-2", "spot"))
    _launch_workload(driver, "first")
    assert _zones(driver) == [("lab-east-a", "on_demand")]
    # cpu-2 on-demand sold out there (a direct request learned it): the next machine goes to
    # lab-east-b with no call in lab-east-a.
    _block(driver, _east_a())
    _launch_workload(driver, "second")
    assert _zones(driver) == [("lab-east-a", "on_demand"), ("lab-east-b", "on_demand")]


def test_a_pool_machines_refusal_is_remembered_for_the_next_direct_launch(driver: Driver) -> None:
    _pool(driver)
    driver.fake.fail_next(CapacityError("lab-east-a sold out", code="X"), "lab-east-a")
    rid = _launch_workload(driver, "first")
    assert _zones(driver) == [("lab-east-a", "on_demand"), ("lab-east-b", "on_demand")]
    [remembered] = driver.deps.blocks.active(driver.deps.now())
    assert remembered.block == _east_a() and remembered.outcome == "capacity"
    driver.run(until=lambda: _machines(driver) == ["up"])
    assert _machines(driver) == ["up"] and rid
    # A direct request for cpu-2 passes lab-east-a over as blocked: no call there.
    task = {"name": "direct", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    direct = requests.submit(driver.deps, Task.model_validate(task)).id
    driver.run(until=lambda: len(driver.fake.launched()) > 2)
    req = driver.deps.store.get_request(direct)
    assert req is not None
    assert [(a.zone, a.outcome) for a in req.attempts] == [
        ("lab-east-a", "blocked"),
        ("lab-east-b", "ok"),
    ]
    assert "remembered as capacity" in (req.attempts[0].error or "")
    assert _zones(driver)[-1] == ("lab-east-b", "on_demand")


def test_a_pool_machine_with_every_zone_blocked_is_not_booked_and_its_work_is_told_why(
    driver: Driver,
) -> None:
    # Every place of the type blocked: the pass books no new machine there (before, it
    # booked one whose launch could only fail, walked without a call, and the workload
    # backed off and was placed again), and `why` names the blocks.
    _pool(driver)
    _block(driver, Block("local", region="lab-east"), outcome="timeout")
    _block(driver, Block("local", "lab-west", "lab-west-a", "cpu-2", "on_demand"))
    rid = requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "name": "w"})).id
    driver.run()
    assert driver.fake.launched() == []
    assert _machines(driver) == []
    assert not [t for t in _events(driver, rid) if "could not be launched" in t]
    told = why(driver.deps, rid)
    assert told["code"] == "partition_full", told
    assert (
        "cpu/shared: 0 of 2 held; no new machine: its 3 places blocked (local lab-east: every "
        "instance type; local lab-west-a: cpu-2 (on_demand)) until the first of these blocks ends"
    ) in told["reason"], told
    # The reason names the blocks, not their ends (a renewal moves those): `why` lists them.
    assert driver.blocks_listed(told) == [
        ("capacity", "local lab-west-a: cpu-2 (on_demand)"),
        ("region", "local lab-east: every instance type"),
    ], told
    # Only the blocks' scopes are told (cloud-wide facts a direct request's `why` names too):
    # not what the refusal said, which may name another project's request.
    assert "sold out" not in told["reason"] and "timeout" not in told["reason"], told
    # Once a block ends the next pass books it: the first place the walk may try takes it.
    driver.deps.blocks.clear()
    passes.run_pass(driver.deps, "pool")
    driver.run(until=lambda: bool(driver.fake.launched()))
    assert _zones(driver) == [("lab-east-a", "on_demand")]


def _machines(driver: Driver) -> list[Any]:
    return [m["status"] for m in pool_view(driver.deps, "pool")["machines"]]


def _events(driver: Driver, rid: str) -> list[str]:
    return [e.text for e in driver.deps.store.events(rid)]


def test_a_pool_machine_lost_while_booting_blocks_its_zone_as_a_direct_attempts_would(
    driver: Driver,
) -> None:
    """A failed boot is remembered as ``provisioning.boot_failed`` remembers a direct
    attempt's: a machine the cloud lost while starting blocks its zone's type and market
    (``InstanceLost``, outcome ``error``, as a direct attempt's); the next launch of that type
    goes to the next zone."""
    _pool(driver)
    driver.fake.boot_delay_s = 60.0  # pending for a minute: lost on its way up
    rid = requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "name": "w"})).id
    driver.run(until=lambda: len(driver.fake.launched()) == 1)
    [pid] = list(driver.fake.machines)
    driver.fake.lose(pid)
    driver.run(until=lambda: any("could not be launched" in t for t in _events(driver, rid)))
    [remembered] = driver.deps.blocks.active(driver.deps.now())
    assert remembered.block == _east_a() and remembered.outcome == "error"
    assert "InstanceLost" in remembered.reason
    driver.fake.boot_delay_s = 0.0
    task = {"name": "direct", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    requests.submit(driver.deps, Task.model_validate(task))
    driver.run(until=lambda: len(driver.fake.launched()) == 2)
    assert _zones(driver) == [("lab-east-a", "on_demand"), ("lab-east-b", "on_demand")]


def test_a_pool_machine_whose_agent_never_registers_blocks_nothing(driver: Driver) -> None:
    """Issue #46's rule for direct attempts, for pooled machines too: machines the cloud
    started whose agents never register are a fault of those machines, not of the zone."""
    _pool(driver)
    driver.fake.mute_zones.add("lab-east-a")
    rid = requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "name": "w"})).id
    driver.run(until=lambda: any("could not be launched" in t for t in _events(driver, rid)))
    [failed] = [t for t in _events(driver, rid) if "could not be launched" in t]
    assert "never registered" in failed
    assert driver.deps.blocks.active(driver.deps.now()) == []
