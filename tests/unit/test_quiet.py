"""When a pool pass is known to decide nothing (shared/scheduling/quiet.py), against hand-worked
examples: for each time threshold a decision reads (a victim's min_runtime_s, an idle machine's
or agent's limit, a better partition's replacement threshold), a settled pass says it is quiet
until the threshold, a pass just before it decides the same, and a pass at it decides. Under
budgets a pass is never known to be quiet."""

from __future__ import annotations

from pathlib import Path

from corral.shared.budgets import Budget
from corral.shared.config.detect import load_as
from corral.shared.config.master_config import MasterConfig
from corral.shared.lifecycle import AgentStatus
from corral.shared.machine_walk import LaunchBlocked
from corral.shared.resource_pools import resolve_pools
from corral.shared.scheduling.build import det_limits
from corral.shared.scheduling.det_ledger import DetAgent, DetLedger, add_task
from corral.shared.scheduling.ledger import PoolLedger, add_workload, machine_up, release
from corral.shared.scheduling.model import (
    DetTask,
    MachineTypeState,
    PartitionState,
    Plan,
    Reservation,
    Workload,
)
from corral.shared.scheduling.pool_passes import (
    Costing,
    PassKnobs,
    determined_pass,
    machine_pool_pass,
)
from corral.shared.scheduling.quiet import (
    NEVER,
    determined_quiet_until,
    determined_settled,
    machine_pool_quiet_until,
    machine_pool_settled,
    rebalancing_quiet_after_plain,
)

KNOBS = PassKnobs(min_runtime_s=60.0, replacement_guard_s=600.0)
MASTER = Path(__file__).resolve().parents[1] / "fixtures" / "pools" / "master-local.yaml"


def _types(*names: str, max_idle_s: float | None = None) -> tuple[MachineTypeState, ...]:
    return tuple(
        MachineTypeState(
            machine_type=n, max_idle_s=max_idle_s, partitions=(PartitionState(name="p", size=1),)
        )
        for n in names
    )


def _pass(
    ledger: PoolLedger,
    types: tuple[MachineTypeState, ...],
    now: float,
    rebalance: bool = False,
    costing: Costing | None = None,
) -> tuple[PoolLedger, Plan]:
    after, plan = machine_pool_pass(
        ledger, types, now, KNOBS, rebalance=rebalance, costing=costing,
        new_id=lambda node, wid, index: f"m-{wid}-{index}",
    )  # fmt: skip
    after.version = ledger.version + 1
    return after, plan


def _up(ledger: PoolLedger) -> None:
    for mid, machine in ledger.machines.items():
        if machine.status == "launching":
            machine_up(ledger, mid)


def _quiet(
    ledger: PoolLedger, types: tuple[MachineTypeState, ...], now: float, rebalance: bool
) -> float:
    return machine_pool_quiet_until(ledger, types, now, KNOBS, rebalance=rebalance)


def _job(wid: str, at: float, order: tuple[str, ...] = ("a100",), **fields: object) -> Workload:
    return Workload.model_validate(
        {"workload_id": wid, "submitted_at": at, "group_order": order, **fields}
    )


def test_a_waiting_preemptor_is_quiet_until_its_victim_has_run_min_runtime() -> None:
    types = _types("a100")
    ledger = PoolLedger(pool="train")
    add_workload(ledger, _job("low", 0.0))
    ledger, _ = _pass(ledger, types, 0.0)
    _up(ledger)
    add_workload(ledger, _job("high", 10.0, priority=5))
    ledger, plan = _pass(ledger, types, 10.0)
    assert not plan.preemptions  # "low" has run 10 s of its 60
    again, plan = _pass(ledger, types, 20.0)
    assert machine_pool_settled(ledger, again, plan)
    until = _quiet(again, types, 20.0, rebalance=False)
    assert 59.9 < until <= 60.0
    before, plan = _pass(again, types, 59.9)
    assert machine_pool_settled(again, before, plan) and before.notes == again.notes
    preempted, plan = _pass(again, types, 60.0)
    assert [p.workload_id for p in plan.preemptions] == ["low"]
    assert not machine_pool_settled(again, preempted, plan)


def _one_idle_machine(types: tuple[MachineTypeState, ...]) -> PoolLedger:
    """The pool's one machine, idle since 100 s (its work ended)."""
    ledger = PoolLedger(pool="train")
    add_workload(ledger, _job("a", 0.0))
    ledger, _ = _pass(ledger, types, 0.0)
    _up(ledger)
    release(ledger, "a", 100.0, finished=True)
    return ledger


def test_an_idle_machine_is_quiet_until_its_idle_limit_and_only_for_rebalancing() -> None:
    types = _types("a100", max_idle_s=600.0)
    ledger, _ = _pass(_one_idle_machine(types), types, 100.0, rebalance=True)
    again, plan = _pass(ledger, types, 130.0, rebalance=True)
    assert machine_pool_settled(ledger, again, plan)
    assert 699.9 < _quiet(again, types, 130.0, rebalance=True) <= 700.0
    assert _quiet(again, types, 130.0, rebalance=False) == NEVER  # a plain pass never reaps
    _, plan = _pass(again, types, 699.0, rebalance=True)
    assert not plan.reaps
    _, plan = _pass(again, types, 700.5, rebalance=True)
    assert [r.machine_id for r in plan.reaps] == ["m-a-0"]


def test_after_a_plain_pass_a_rebalancing_one_is_quiet_until_a_machine_is_ripe() -> None:
    """A settled pass without rebalancing (after work arrived or ended): a rebalancing pass over
    its ledger decides nothing more until an idle machine passes its limit; one already past
    it (which no rebalancing pass over this ledger has looked at) makes it due at once."""
    types = _types("a100", max_idle_s=600.0)
    ledger, _ = _pass(_one_idle_machine(types), types, 100.0)  # free room from now
    plain, plan = _pass(ledger, types, 130.0)
    assert machine_pool_settled(ledger, plain, plan)
    until = rebalancing_quiet_after_plain(
        plain, types, 130.0, KNOBS, _quiet(plain, types, 130.0, rebalance=False)
    )
    assert 699.9 < until <= 700.0
    _, rebalanced = _pass(plain, types, 699.0, rebalance=True)
    _, plain_again = _pass(plain, types, 699.0)
    assert rebalanced == plain_again and not rebalanced.reaps
    late, plan = _pass(ledger, types, 800.0)  # a plain pass never reaps: it is settled
    assert machine_pool_settled(ledger, late, plan)
    plain_until = _quiet(late, types, 800.0, rebalance=False)
    assert rebalancing_quiet_after_plain(late, types, 800.0, KNOBS, plain_until) == 800.0
    _, plan = _pass(late, types, 800.0, rebalance=True)
    assert [r.machine_id for r in plan.reaps] == ["m-a-0"]


def test_after_a_plain_pass_better_room_long_free_makes_a_rebalancing_pass_due() -> None:
    types = _types("reserved", "spot")
    ledger, _ = _pass(_on_a_worse_group(types), types, 100.0)  # room on reserved from now
    threshold_s = ledger.workloads["w"].replacement_threshold_s
    plain, plan = _pass(ledger, types, 130.0)
    assert machine_pool_settled(ledger, plain, plan)
    until = rebalancing_quiet_after_plain(
        plain, types, 130.0, KNOBS, _quiet(plain, types, 130.0, rebalance=False)
    )
    assert 100.0 + threshold_s - 0.1 < until <= 100.0 + threshold_s
    at = 100.0 + threshold_s + 5.0
    late, plan = _pass(plain, types, at)
    assert machine_pool_settled(plain, late, plan)
    due = rebalancing_quiet_after_plain(late, types, at, KNOBS, _quiet(late, types, at, False))
    assert due == at
    _, plan = _pass(late, types, at, rebalance=True)
    assert [r.workload_id for r in plan.replacements] == ["w"]


def _on_a_worse_group(types: tuple[MachineTypeState, ...]) -> PoolLedger:
    """``w`` runs on spot because ``blocker`` held the one reserved machine, which it has just
    given back (at 100 s)."""
    order = ("reserved", "spot")
    ledger = PoolLedger(pool="train")
    add_workload(ledger, _job("blocker", 0.0, order))
    add_workload(ledger, _job("w", 1.0, order, enable_replacement=True))
    ledger, _ = _pass(ledger, types, 1.0)
    _up(ledger)
    assert {m.workload_id: m.machine_type for m in ledger.machines.values()} == {
        "blocker": "reserved",
        "w": "spot",
    }
    release(ledger, "blocker", 100.0, finished=True)
    return ledger


def test_work_on_a_worse_group_is_quiet_until_the_better_one_had_room_long_enough() -> None:
    types = _types("reserved", "spot")
    ledger = _on_a_worse_group(types)
    ledger, _ = _pass(ledger, types, 100.0, rebalance=True)  # room on reserved from now
    again, plan = _pass(ledger, types, 130.0, rebalance=True)
    assert machine_pool_settled(ledger, again, plan)
    threshold_s = again.workloads["w"].replacement_threshold_s
    until = _quiet(again, types, 130.0, rebalance=True)
    assert 100.0 + threshold_s - 0.1 < until <= 100.0 + threshold_s
    _, plan = _pass(again, types, until - 1.0, rebalance=True)
    assert not plan.replacements
    _, plan = _pass(again, types, 100.0 + threshold_s, rebalance=True)
    assert [r.workload_id for r in plan.replacements] == ["w"]


def test_a_pass_under_a_budget_is_never_known_to_be_quiet() -> None:
    types = _types("a100")
    ledger = PoolLedger(pool="train")
    add_workload(ledger, _job("a", 0.0))
    budget = Budget.model_validate({"name": "b", "pool": "train", "usd_per_period": 10})
    costing = Costing((budget,), {"a100": 30.0})
    ledger, _ = _pass(ledger, types, 0.0, costing=costing)
    quiet = machine_pool_quiet_until(ledger, types, 5.0, KNOBS, rebalance=False, costing=costing)
    assert quiet == 5.0  # its spend grows with time: the next pass may refuse what this one let in
    other = Costing((budget.model_copy(update={"pool": "elsewhere"}),), {"a100": 30.0})
    assert (
        machine_pool_quiet_until(ledger, types, 5.0, KNOBS, rebalance=False, costing=other) == NEVER
    )


def test_an_idle_agent_is_quiet_until_its_pool_reaps_it() -> None:
    pools = resolve_pools(load_as(MASTER, MasterConfig)[0])
    limits = {p.pool_name: det_limits(p) for p in pools.pools}
    limit_s = limits["compute"]["max_idle_agent_s"]
    ledger = DetLedger(master="m")
    agent = DetAgent(agent_id="a-0", pool="compute", slots=2, created_at=0.0)
    agent.move(AgentStatus.UP)
    agent.idle_since = 10.0
    ledger.agents["a-0"] = agent

    def run(at: float) -> tuple[DetLedger, bool]:
        after, plans = determined_pass(ledger, pools, limits, at, new_id=lambda p, i: f"{p}{i}")
        return after, determined_settled(ledger, after, plans)

    after, settled = run(10.5)
    assert settled
    until = determined_quiet_until(after, limits, 10.5, pools=pools.names())
    assert 10.0 + limit_s - 0.1 < until <= 10.0 + limit_s
    assert run(until - 0.1)[1]
    reaped, settled = run(10.0 + limit_s + 0.5)
    assert not settled and reaped.agents["a-0"].status == AgentStatus.REAPING


def test_a_determined_pool_whose_launches_are_blocked_is_quiet_until_its_first_block_ends() -> None:
    """A task waits in a pool whose every agent place is blocked: the pass grows no agent,
    says so in the ledger, and is quiet until the first block ends; then a pass grows it."""
    pools = resolve_pools(load_as(MASTER, MasterConfig)[0])
    limits = {p.pool_name: det_limits(p) for p in pools.pools}
    ledger = DetLedger(master="m")
    add_task(ledger, DetTask(task_id="t", group_id="g", slots=2, submitted_at=0.0), "compute")
    blocked = {"compute": LaunchBlocked(500.0, "its 1 place blocked (...)")}
    after, plans = determined_pass(
        ledger, pools, limits, 10.0, new_id=lambda p, i: f"{p}{i}", launch_blocked=blocked
    )
    assert after.agents == {} and determined_settled(ledger, after, plans)
    assert after.launch_blocked == {"compute": "no new agent: its 1 place blocked (...)"}
    until = determined_quiet_until(after, limits, 10.0, pools=pools.names(), blocked_until=[500.0])
    assert 499.0 < until <= 500.0
    assert determined_quiet_until(after, limits, 10.0, pools=pools.names()) == NEVER
    grown, _ = determined_pass(after, pools, limits, 500.0, new_id=lambda p, i: f"{p}{i}")
    assert [a.pool for a in grown.agents.values()] == ["compute"] and grown.launch_blocked == {}


def test_a_replaced_workload_is_quiet_until_its_guard_has_passed() -> None:
    types = _types("reserved", "spot", "ondemand")
    order = ("reserved", "spot", "ondemand")
    ledger = PoolLedger(pool="train")
    for wid, at in (("r", 0.0), ("s", 1.0)):
        add_workload(ledger, _job(wid, at, order))
    add_workload(ledger, _job("w", 2.0, order, enable_replacement=True, replacement_threshold_s=10))
    ledger, _ = _pass(ledger, types, 2.0)
    _up(ledger)
    release(ledger, "s", 100.0, finished=True)
    ledger, _ = _pass(ledger, types, 100.0, rebalance=True)
    replaced, plan = _pass(ledger, types, 110.0, rebalance=True)
    assert [(r.workload_id, r.bring_up.machine_type) for r in plan.replacements] == [("w", "spot")]
    assert not machine_pool_settled(ledger, replaced, plan)
    ledger = replaced
    _up(ledger)  # the spot machine is up: the on-demand one is retired and gone
    old = plan.replacements[0].retire_machine_id
    ledger.machines.pop(old)
    for machine in ledger.machines.values():
        machine.replaces = None
    release(ledger, "r", 120.0, finished=True)  # room on reserved, ripe at 130 ...
    ledger, _ = _pass(ledger, types, 120.0, rebalance=True)
    again, plan = _pass(ledger, types, 140.0, rebalance=True)
    assert machine_pool_settled(ledger, again, plan)
    until = _quiet(again, types, 140.0, rebalance=True)
    assert 709.9 < until <= 710.0  # ... but "w" was replaced at 110, guard 600 s
    _, plan = _pass(again, types, 709.0, rebalance=True)
    assert not plan.replacements
    _, plan = _pass(again, types, 710.0, rebalance=True)
    assert [(r.workload_id, r.bring_up.machine_type) for r in plan.replacements] == [
        ("w", "reserved")
    ]


def test_a_pass_that_only_changed_held_room_free_room_or_agents_is_not_settled() -> None:
    types = _types("a100")
    ledger = PoolLedger(pool="train")
    add_workload(ledger, _job("a", 0.0))
    ledger, _ = _pass(ledger, types, 0.0)
    _up(ledger)
    release(ledger, "a", 50.0, finished=True)
    after, plan = _pass(ledger, types, 60.0)  # decides nothing, but the partition has room now
    assert not (plan.placements or plan.reaps) and after.free_since != ledger.free_since
    assert not machine_pool_settled(ledger, after, plan)
    stale = Reservation(workload_id="gone", machine_type="a100", partition="p", count=1)
    after.reservations = [stale]
    again, plan = _pass(after, types, 70.0)  # the hold of a workload no longer there lapses
    assert not machine_pool_settled(after, again, plan)

    pools = resolve_pools(load_as(MASTER, MasterConfig)[0])
    limits = {p.pool_name: det_limits(p) for p in pools.pools}
    det = DetLedger(master="m")
    add_task(det, DetTask(task_id="t", group_id="g", slots=1, submitted_at=0.0), "compute")
    grown, plans = determined_pass(det, pools, limits, 1.0, new_id=lambda p, i: f"{p}{i}")
    assert not any(p.starts for p in plans) and len(grown.agents) == 1  # an agent to launch
    assert not determined_settled(det, grown, plans)


def test_a_type_whose_launches_are_blocked_is_quiet_until_its_first_block_ends() -> None:
    # A waiting workload whose only type books no new machine (every place blocked) waits
    # settled; the pass that can decide otherwise is the one after the block's end.
    blocked = tuple(
        t.model_copy(update={"launch_blocked_until": 90.0, "launch_blocked_why": "no new machine"})
        for t in _types("a100")
    )
    ledger = PoolLedger(pool="train")
    add_workload(ledger, _job("w", 0.0))
    after, plan = _pass(ledger, blocked, 10.0)
    assert not plan.placements and not after.machines
    again, plan = _pass(after, blocked, 20.0)
    assert machine_pool_settled(after, again, plan)
    assert 89.9 < _quiet(again, blocked, 20.0, rebalance=False) <= 90.0
    assert _quiet(again, _types("a100"), 20.0, rebalance=False) == NEVER  # nothing else due
