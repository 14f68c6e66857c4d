"""The pool ledger (the run-time state of a machine pool): commits of plans, machines coming
up and failing, replacement keeping the old machine until the new one is up, reaping, and
racing writers that never take a partition over its size."""

from __future__ import annotations

import random
from pathlib import Path

from corral.shared.config.detect import load_as
from corral.shared.config.machine_pool import MachinePool
from corral.shared.placement import Placement
from corral.shared.scheduling import Workload, schedule
from corral.shared.scheduling.build import machine_types_of
from corral.shared.scheduling.ledger import (
    PoolLedger,
    add_workload,
    commit,
    machine_failed,
    machine_gone,
    machine_up,
    release,
    snapshot_of,
)
from corral.shared.scheduling.model import NodeAssignment

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
RESERVED, SPOT, ONDEMAND = "reserved-a100", "spot-a100", "ondemand-a100"
ORDER = (RESERVED, SPOT, ONDEMAND)
TYPES = machine_types_of(load_as(SEEDS / "anyscale-machine-pool-aws.yaml", MachinePool)[0])

# Where the test cloud puts every machine.
ZONE_Z = Placement("aws", "us-east-1", "z", "m5.large", "on_demand")


def ids(prefix: str = "m"):  # type: ignore[no-untyped-def]
    counter = iter(range(10**6))

    def new_id(node: NodeAssignment, wid: str, index: int) -> str:
        return f"{prefix}{next(counter)}"

    return new_id


def job(wid: str, t: float, **fields: object) -> Workload:
    return Workload.model_validate(
        {"workload_id": wid, "submitted_at": t, "group_order": ORDER, **fields}
    )


def one_pass(ledger: PoolLedger, now: float, new_id, **kw: object) -> PoolLedger:  # type: ignore[no-untyped-def]
    plan = schedule(snapshot_of(ledger, TYPES), now, **kw)  # type: ignore[arg-type]
    out = commit(ledger, plan, TYPES, now, new_id)
    out.version = ledger.version + 1
    return out


def held(ledger: PoolLedger, machine_type: str) -> int:
    return sum(1 for m in ledger.machines.values() if m.machine_type == machine_type)


def test_placements_launch_machines_then_reuse_them_warm() -> None:
    ledger = PoolLedger(pool="p")
    new_id = ids()
    add_workload(ledger, job("a", 1, num_nodes=3))
    ledger = one_pass(ledger, 10, new_id)
    assert ledger.workloads["a"].phase == "running"
    types = sorted(m.machine_type for m in ledger.machines_of("a"))
    assert types == [RESERVED, RESERVED, SPOT]  # spans the groups as they fill
    assert all(m.status == "launching" for m in ledger.machines.values())
    for m in list(ledger.machines):
        machine_up(ledger, m)
    # Where it is up is its row of the machine table: its ledger entry keeps none of it.
    assert all("zone" not in m.model_dump() for m in ledger.machines.values())
    release(ledger, "a", 20, finished=True)
    assert "a" not in ledger.workloads
    assert all(m.workload_id is None and m.idle_since == 20 for m in ledger.machines.values())
    add_workload(ledger, job("b", 21, num_nodes=2))
    ledger = one_pass(ledger, 22, new_id)
    # Warm reserved machines are reused: nothing new launched.
    assert len(ledger.machines) == 3
    assert sorted(m.machine_type for m in ledger.machines_of("b")) == [RESERVED, RESERVED]
    assert all(m.status == "up" for m in ledger.machines_of("b"))


def test_machines_launched_with_a_workloads_own_config_go_with_it() -> None:
    """release(reap=True): a workload's machines carry its own advanced_instance_config (a
    pod's spec cannot change), so they are reaped, not kept warm; they hold their room until
    gone, then the next workload gets fresh machines."""
    ledger = PoolLedger(pool="p")
    new_id = ids()
    add_workload(ledger, job("a", 1, num_nodes=2))
    ledger = one_pass(ledger, 10, new_id)
    for m in list(ledger.machines):
        machine_up(ledger, m)
    release(ledger, "a", 20, reap=True)  # preempted: back on the queue
    assert all(m.status == "reaping" and m.idle_since == 20 for m in ledger.machines.values())
    assert ledger.workloads["a"].phase == "pending" and ledger.machines_of("a") == []
    add_workload(ledger, job("b", 21, num_nodes=2))
    ledger = one_pass(ledger, 22, new_id)
    for wid in ("a", "b"):
        assert {m.status for m in ledger.machines_of(wid)} == {"launching"}  # none reused
    assert sum(1 for m in ledger.machines.values() if m.status == "reaping") == 2


def test_a_failed_launch_sends_the_workload_back_keeping_its_place() -> None:
    ledger = PoolLedger(pool="p")
    add_workload(ledger, job("a", 1, num_nodes=2))
    ledger = one_pass(ledger, 5, ids())
    first, second = (m.machine_id for m in ledger.machines_of("a"))
    machine_up(ledger, first)
    assert machine_failed(ledger, second, 6) == "a"
    assert ledger.workloads["a"].phase == "pending"
    assert ledger.workloads["a"].submitted_at == 1
    assert ledger.machines[first].workload_id is None  # the one that came up turns idle


def test_replacement_keeps_the_worse_machine_until_the_better_one_is_up() -> None:
    ledger = PoolLedger(pool="p")
    new_id = ids()
    add_workload(ledger, job("blocker", 0, num_nodes=2, preemptible=False))
    add_workload(ledger, job("a", 1, enable_replacement=True, replacement_threshold_s=5.0))
    ledger = one_pass(ledger, 1, new_id)
    for m in list(ledger.machines):
        machine_up(ledger, m)
    [old] = ledger.machines_of("a")
    assert old.machine_type == SPOT
    blockers = [m.machine_id for m in ledger.machines_of("blocker")]
    release(ledger, "blocker", 2, finished=True)
    for machine_id in blockers:  # reaped: the better machine must be launched anew
        machine_gone(ledger, machine_id)
    ledger = one_pass(ledger, 3, new_id, replacement_budget=1)  # the reservation frees at 2..3
    assert not any(m.replaces for m in ledger.machines.values())  # threshold not reached yet
    ledger = one_pass(ledger, 9, new_id, replacement_budget=1)
    [new] = [m for m in ledger.machines.values() if m.replaces]
    assert new.machine_type == RESERVED and new.replaces == old.machine_id
    assert ledger.machines[old.machine_id].status == "up"  # not retired before the new is up
    machine_up(ledger, new.machine_id)
    assert ledger.machines[old.machine_id].status == "retiring"
    machine_gone(ledger, old.machine_id)
    assert [m.machine_type for m in ledger.machines_of("a")] == [RESERVED]


def test_a_warm_better_machine_takes_over_and_the_old_one_retires() -> None:
    ledger = PoolLedger(pool="p")
    new_id = ids()
    add_workload(ledger, job("blocker", 0, num_nodes=2, preemptible=False))
    add_workload(ledger, job("a", 1, enable_replacement=True, replacement_threshold_s=5.0))
    ledger = one_pass(ledger, 1, new_id)
    for m in list(ledger.machines):
        machine_up(ledger, m)
    [old] = ledger.machines_of("a")
    release(ledger, "blocker", 2, finished=True)
    ledger = one_pass(ledger, 3, new_id, replacement_budget=1)
    ledger = one_pass(ledger, 9, new_id, replacement_budget=1)
    [new] = [m for m in ledger.machines.values() if m.replaces]
    assert new.status == "up" and new.machine_type == RESERVED  # a warm one, reused
    assert ledger.machines[old.machine_id].status == "retiring"  # ends once the new one serves
    assert len(ledger.machines) == 3  # nothing launched


def test_reaped_machines_count_until_gone_and_reserved_go_last() -> None:
    ledger = PoolLedger(pool="p")
    new_id = ids()
    add_workload(ledger, job("a", 1, num_nodes=3))
    ledger = one_pass(ledger, 1, new_id)
    for m in list(ledger.machines):
        machine_up(ledger, m)
    release(ledger, "a", 2, finished=True)
    types = tuple(t.model_copy(update={"max_idle_s": 10.0}) for t in TYPES)
    plan = schedule(snapshot_of(ledger, types), 20.0, min_machines=1)
    ledger = commit(ledger, plan, types, 20.0, new_id)
    reaping = [m for m in ledger.machines.values() if m.status == "reaping"]
    # Three idle, a minimum of one: two go, the spot one first (reserved last).
    assert sorted(m.machine_type for m in reaping) == [RESERVED, SPOT]
    snap = snapshot_of(ledger, types)
    assert sum(1 for m in snap.machines if m.workload_id is not None) == 2  # still counted


def test_racing_writers_never_take_a_partition_over_its_size() -> None:
    """Many schedulers read a snapshot, decide, and commit only if the version they read is
    still current (as the store's compare-and-set does); losers recompute."""
    rng = random.Random(7)
    ledger = PoolLedger(pool="p")
    new_id = ids()
    t = 0.0
    for step in range(300):
        t += 1
        if rng.random() < 0.5:
            add_workload(
                ledger,
                job(
                    f"w{step}",
                    t,
                    num_nodes=rng.randint(1, 3),
                    priority=rng.randint(0, 3),
                    on_full=rng.choice(["fallback", "preempt"]),
                ),
            )
        readers = [ledger.model_copy(deep=True) for _ in range(4)]  # 4 schedulers, one snapshot
        winner = None
        for snapshot in readers:
            proposed = one_pass(snapshot, t, new_id)
            if winner is None and snapshot.version == ledger.version:
                winner = proposed  # the first commit wins; the others' versions are stale
        assert winner is not None
        ledger = winner
        for m in list(ledger.machines.values()):
            if m.status == "launching":
                machine_up(ledger, m.machine_id)
        for w in list(ledger.workloads.values()):
            if w.phase == "stopping" or (w.phase == "running" and rng.random() < 0.2):
                release(ledger, w.workload_id, t, finished=w.phase == "running")
        for machine_type in ORDER:
            assert held(ledger, machine_type) <= 2, (step, machine_type)
