"""A request's record of its work on a pool's machine is an assignment pointing at the
machine's row by id: stored without the machine's cloud id, place, type or price, and read by
every request path through the row (issue #48, item 1). A pool's word for its machine
(retiring, reaping) is carried onto the row along the one machine lifecycle."""

from __future__ import annotations

import json
from collections.abc import Callable

from runtime_driver import SMALL_POOL, Driver
from runtime_driver import SMALL_POOL_WORKLOAD as WORKLOAD

from corral.services.runtime import requests
from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import passes, work
from corral.services.runtime.pooled.registry import apply_pool, pool_view
from corral.shared.config.task import Task
from corral.shared.lifecycle import InstanceState, MachineState, MachineStatus, RequestState
from corral.shared.placement import Placement
from corral.shared.records import Instance, LaunchRequest
from corral.shared.scheduling.ledger import PoolLedger, PoolMachine

AT = Placement("local", "lab-east", "lab-east-b", "cpu-8", "spot")


def _up(deps: Deps, machine_id: str = "m-1", at: Placement = AT) -> Instance:
    assert deps.machines.up(machine_id, ("pool", "p"), f"local-{machine_id}", at, 0.0,
                            machine_type="cpu-8")  # fmt: skip
    row = deps.machines.get(machine_id)
    assert row is not None
    return row


def _request(deps: Deps) -> None:
    req = LaunchRequest(id="r-1", task={}, state=RequestState.PROVISIONING, created_at=0,
                        updated_at=0)  # fmt: skip
    assert deps.store.create_request(req)


def _stored_json(deps: Deps, instance_id: str) -> dict[str, object]:
    raw = deps.redis.hget(f"{deps.settings.prefix}:instance:{instance_id}", "json")
    assert raw is not None
    return dict(json.loads(raw))


def test_the_stored_record_points_at_the_row_and_copies_nothing_of_it(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    _request(deps)
    row = _up(deps)
    work.record_instance(deps, row, "r-1", 0, "r-1.5.m-1", placement="r-1.5")
    [inst] = deps.store.list_instances(request_id="r-1")
    stored = _stored_json(deps, inst.id)
    assert stored["machine_id"] == "m-1"
    for copied in ("provider_id", "cloud", "region", "zone", "instance_type", "market",
                   "machine_type", "price_usd_per_hour"):  # fmt: skip
        assert copied not in stored, copied
    # Read through the row: the cloud's id, place, type and price are the machine's.
    assert (inst.provider_id, inst.place, inst.machine_type) == ("local-m-1", AT, "cpu-8")
    assert inst.price_usd_per_hour == 0.12  # the catalog's spot price of cpu-8
    assert deps.machines.get("m-1").price_usd_per_hour == 0.12  # type: ignore[union-attr]
    assert (inst.state, inst.attempt_id, inst.placement) == (
        InstanceState.RUNNING, "r-1.5.m-1", "r-1.5"
    )  # fmt: skip
    assert deps.store.get_instance(inst.id) == inst
    assert deps.store.get_request("r-1").instance_ids == [inst.id]  # type: ignore[union-attr]


def test_ending_the_work_writes_the_assignment_not_a_copy(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    _request(deps)
    row = _up(deps)
    work.record_instance(deps, row, "r-1", 0, "r-1.5.m-1", placement="r-1.5", as_type="head")
    work.end_instances(deps, "r-1", "its job exited 3", exit_code=3)
    [inst] = deps.store.list_instances(request_id="r-1")
    assert (inst.state, inst.exit_code, inst.machine_type) == (InstanceState.TERMINATED, 3, "head")
    assert inst.provider_id == "local-m-1"
    stored = _stored_json(deps, inst.id)
    assert stored["state"] == "TERMINATED" and "provider_id" not in stored
    assert stored["version"] == inst.version == 1
    # The machine goes on: its row is not the assignment's.
    assert deps.machines.get("m-1").state is MachineState.RUNNING  # type: ignore[union-attr]
    assert [i.id for i in deps.store.list_instances(states={InstanceState.TERMINATED})] == [inst.id]


def test_the_pools_words_retiring_and_reaping_reach_the_row(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    row = _up(deps)
    machine = PoolMachine(machine_id="m-1", machine_type="cpu-8", partition="shared",
                          status=MachineStatus.RETIRING, created_at=0.0)  # fmt: skip
    retiring = work.mirror(deps, row, machine)
    assert retiring is not None and retiring.state is MachineState.RETIRING
    assert work.mirror(deps, retiring, machine) is retiring  # there already: nothing written
    machine.status = MachineStatus.REAPING
    reaping = work.mirror(deps, retiring, machine)
    assert reaping is not None and reaping.state is MachineState.TERMINATING
    assert [t.to_state for t in reaping.history] == ["REQUESTED", "RUNNING", "RETIRING",
                                                     "TERMINATING"]  # fmt: skip
    machine.status = MachineStatus.UP  # an up machine's row is left as it is
    assert work.mirror(deps, reaping, machine) is reaping


def test_a_running_workload_reads_its_machine_through_the_row_and_retiring_reaches_it(
    driver: Driver,
) -> None:
    """On the runtime's own path (a pass, its sync, the machine's launch): the request's
    record points at the row; a machine the ledger retires is RETIRING on its row before it
    is terminated."""
    apply_pool(
        driver.deps, name="small", kind="machine_pool", file_name="small.yaml",
        spec=SMALL_POOL, cloud="local",
    )  # fmt: skip
    driver.queue.clear()
    rid = requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "name": "w"})).id
    driver.run(until=lambda: bool(driver.deps.store.list_instances(request_id=rid)))
    [inst] = driver.deps.store.list_instances(request_id=rid)
    [mid] = [m["id"] for m in pool_view(driver.deps, "small")["machines"]]
    row = driver.deps.machines.get(mid)
    assert row is not None and _stored_json(driver.deps, inst.id)["machine_id"] == mid
    assert (inst.provider_id, inst.place, inst.price_usd_per_hour) == (
        row.provider_id, row.place, row.price_usd_per_hour
    )  # fmt: skip
    assert row.price_usd_per_hour == 0.10  # cpu-2 on demand, by the local cloud's catalog

    def retire(ledger: PoolLedger) -> bool:
        return ledger.machines[mid].move(MachineStatus.RETIRING)

    driver.deps.ledgers.update("small", retire)
    passes.sync(driver.deps, "small")
    row = driver.deps.machines.get(mid)
    assert row is not None
    assert [t.to_state for t in row.history][-2:] == ["RETIRING", "TERMINATING"]


def test_a_copy_stored_before_assignments_reads_as_it_always_did(
    make_deps: Callable[..., Deps],
) -> None:
    """A pooled request's record from before assignments (a full copy of its machine: cloud
    id, place, type and price) still reads and ends as it did; docs/operations.md "Upgrading"."""
    deps = make_deps()
    _request(deps)
    copy = Instance.new(
        "i-old", "r-1", 0, 0.0, "assigned pooled machine m-9", provider_id="local-m-9",
        attempt_id="r-1.4.m-9", **AT.fields(), machine_type="cpu-8", placement="r-1.4",
        price_usd_per_hour=0.12,
    )  # fmt: skip
    copy.move(InstanceState.RUNNING, 0.0, "its pooled machine runs the work")
    assert deps.store.create_instance(copy)
    assert "machine_id" not in _stored_json(deps, "i-old")
    [read] = deps.store.list_instances(request_id="r-1")
    assert (read.provider_id, read.place, read.price_usd_per_hour) == ("local-m-9", AT, 0.12)
    assert read == deps.store.get_instance("i-old")
    work.end_instances(deps, "r-1", "its request ended")
    ended = deps.store.get_instance("i-old")
    assert ended is not None and ended.state == InstanceState.TERMINATED
    assert _stored_json(deps, "i-old")["provider_id"] == "local-m-9"  # still a copy, not moved
