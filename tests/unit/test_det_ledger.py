"""The Determined run-time ledger against hand-worked examples: snapshots of its pools, growth
for waiting tasks (launching agents as room on its way, max agents, zero-slot tasks, fallback
pools, static pools), a full cycle up to idle reaping, priority preemption over passes, and
lost agents."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.shared.config.detect import load_as
from corral.shared.config.master_config import MasterConfig
from corral.shared.resource_pools import ResolvedPool, ResolvedPools, resolve_pools
from corral.shared.scheduling import DetPlan, DetTask, SlotAllocation, schedule_pools
from corral.shared.scheduling.build import det_limits
from corral.shared.scheduling.det_ledger import (
    DetAgent,
    DetLedger,
    add_task,
    agent_lost,
    allocations_on,
    commit_det,
    grow,
    release_task,
    snapshots_of,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pools" / "master-local.yaml"
POOLS = resolve_pools(load_as(FIXTURE, MasterConfig)[0])
# The aux pool's provider names an instance type only (its slots come from a catalog): 0 slots.
AUX = {"slots_per_agent": 0, "max_agents": 1, "min_agents": 0, "max_idle_agent_s": 2.0}
Limits = dict[str, dict[str, Any]]


def limits(**pools: dict[str, Any]) -> Limits:
    """det_limits of every fixture pool, aux's by hand, and any pool's fields overridden."""
    out: Limits = {p.pool_name: det_limits(p) for p in POOLS.pools}
    out["aux"] = dict(AUX)
    for name, fields in pools.items():
        out[name] = {**out.get(name, {}), **fields}
    return out


def with_static() -> ResolvedPools:
    """The fixture's pools plus a static pool (no provider)."""
    static = ResolvedPool("static", None, POOLS.pool("compute").scheduler, None)
    return dataclasses.replace(POOLS, pools=(*POOLS.pools, static))


def ids() -> Callable[[str, int], str]:
    counter = iter(range(10**6))
    return lambda pool, index: f"{pool}-{next(counter)}"


def task(tid: str, slots: int, t: float, **fields: Any) -> DetTask:
    return DetTask(task_id=tid, group_id=f"g-{tid}", slots=slots, submitted_at=t, **fields)


def agent(aid: str, pool: str, slots: int, status: str = "up", **fields: Any) -> DetAgent:
    return DetAgent.model_validate(
        {"agent_id": aid, "pool": pool, "slots": slots, "status": status, "created_at": 0.0}
        | fields
    )


def running(ledger: DetLedger, t: DetTask, pool: str, on: dict[str, int]) -> None:
    """Put a task in the ledger as already running on these agents."""
    allocations = tuple(SlotAllocation(agent_id=a, slots=s) for a, s in on.items())
    add_task(ledger, t.model_copy(update={"allocations": allocations, "started_at": 1.0}), pool)


def one_pass(
    ledger: DetLedger,
    now: float,
    lim: Limits,
    new_id: Callable[[str, int], str],
    pools: ResolvedPools = POOLS,
) -> tuple[DetLedger, tuple[DetPlan, ...], list[str]]:
    """What a pass does: snapshots, schedule, commit, grow (the store bumps the version)."""
    snapshots = snapshots_of(ledger, pools, lim)
    plans = schedule_pools(snapshots, now)
    after = commit_det(ledger, plans, now)
    added = grow(after, snapshots, plans, now, new_id)
    after.version = ledger.version + 1
    return after, plans, added


def bring_up(ledger: DetLedger, now: float) -> None:
    """Every launching agent comes up (as the provisioning worker marks it)."""
    for a in ledger.agents.values():
        if a.status == "launching":
            a.status, a.idle_since = "up", now


def plan_of(plans: tuple[DetPlan, ...], pool: str) -> DetPlan:
    return next(p for p in plans if p.pool == pool)


def codes(plans: tuple[DetPlan, ...]) -> dict[str, str]:
    return {p.task_id: p.code for plan in plans for p in plan.pending}


def on_agents(ledger: DetLedger, tid: str) -> dict[str, int]:
    return {a.agent_id: a.slots for a in ledger.tasks[tid].allocations}


def pools_of(ledger: DetLedger, added: list[str]) -> list[str]:
    return [ledger.agents[a].pool for a in added]


# --------------------------------------------------------------------------- snapshots
def test_snapshots_of_reads_agents_tasks_scheduler_and_limits() -> None:
    ledger = DetLedger(master="m", version=7)
    ledger.agents["c1"] = agent("c1", "compute", 2, idle_since=5.0)
    ledger.agents["c2"] = agent("c2", "compute", 2, idle_since=6.0)
    ledger.agents["c3"] = agent("c3", "compute", 2, status="launching")
    ledger.agents["c4"] = agent("c4", "compute", 2, status="reaping")
    running(ledger, task("t1", 2, 1.0), "compute", {"c1": 2})
    running(ledger, task("t2", 2, 2.0), "compute", {"s1": 2})
    ledger.running_in["t2"] = "spill"  # sent to compute, started in its fallback pool
    add_task(ledger, task("t3", 1, 3.0), "compute")

    snaps = {s.pool: s for s in snapshots_of(ledger, POOLS, limits())}

    compute = snaps["compute"]
    assert compute.versions == {"m": 7}
    assert compute.scheduler.type == "priority" and compute.scheduler.preemption
    assert (compute.slots_per_agent, compute.max_agents, compute.max_idle_agent_s) == (2, 2, 2.0)
    # busy: not idle; idle: its idle_since, else its creation; reaping: gone already
    assert {a.agent_id: a.idle_since for a in compute.agents} == {
        "c1": None,
        "c2": 6.0,
        "c3": 0.0,
    }
    assert [t.task_id for t in compute.tasks] == ["t1", "t3"]
    assert [t.task_id for t in snaps["spill"].tasks] == ["t2"]
    assert snaps["spill"].scheduler.type == "round_robin"
    assert snaps["spill"].scheduler.fitting_policy == "worst"
    assert snaps["aux"].tasks == () and snaps["aux"].agents == ()


# --------------------------------------------------------------------------- grow
def test_grow_adds_the_agents_a_waiting_task_needs() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("four", 4, 1.0), "compute")  # ceil(4 / 2) = 2 agents
    add_task(ledger, task("one", 1, 2.0), "spill")  # ceil(1 / 2) = 1 agent

    after, plans, added = one_pass(ledger, 10.0, limits(compute={"max_agents": 3}), ids())

    assert codes(plans) == {"four": "pool_full", "one": "pool_full"}
    assert sorted(pools_of(after, added)) == ["compute", "compute", "spill"]
    assert all(after.agents[a].status == "launching" for a in added)
    assert {after.agents[a].slots for a in added} == {2}
    assert {after.agents[a].created_at for a in added} == {10.0}
    assert ledger.agents == {}  # commit_det works on a copy


def test_two_small_tasks_share_one_new_agent() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("a", 1, 1.0), "compute")
    add_task(ledger, task("b", 1, 2.0), "compute")

    after, _, added = one_pass(ledger, 10.0, limits(), ids())

    assert pools_of(after, added) == ["compute"]  # b fits in the slot a leaves on it


def test_a_fair_share_pool_with_no_agent_grows_one_for_its_first_task() -> None:
    # Fair share over no capacity is a share of 0; a group holding nothing waits as for a full
    # pool (no agent exists yet), and the pool grows.
    fair = dataclasses.replace(POOLS.pool("compute").scheduler, type="fair_share")
    pools = dataclasses.replace(
        POOLS,
        pools=tuple(
            dataclasses.replace(p, scheduler=fair) if p.pool_name == "compute" else p
            for p in POOLS.pools
        ),
    )
    ledger = DetLedger(master="m")
    add_task(ledger, task("t", 1, 1.0), "compute")

    after, plans, added = one_pass(ledger, 10.0, limits(), ids(), pools)

    assert codes(plans) == {"t": "pool_full"}
    assert pools_of(after, added) == ["compute"]


def test_grow_counts_launching_agents_as_room_on_its_way() -> None:
    ledger = DetLedger(master="m")
    ledger.agents["c0"] = agent("c0", "compute", 2, status="launching")
    add_task(ledger, task("four", 4, 1.0), "compute")
    lim = limits(compute={"max_agents": 5})
    new_id = ids()

    after, plans, added = one_pass(ledger, 10.0, lim, new_id)

    assert codes(plans) == {"four": "pool_full"}  # one agent of two slots is not enough
    assert pools_of(after, added) == ["compute"]  # c0's two slots are on their way: one more

    again, plans, added = one_pass(after, 11.0, lim, new_id)  # both still launching

    assert added == []
    assert on_agents(again, "four") == {"c0": 2, "compute-0": 2}
    assert one_pass(again, 12.0, lim, new_id)[2] == []


def test_no_double_growth_over_passes_while_agents_launch() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("t", 2, 1.0), "compute")
    new_id = ids()
    ledger, _, first = one_pass(ledger, 10.0, limits(), new_id)
    assert first == ["compute-0"]

    ledger, plans, added = one_pass(ledger, 11.0, limits(), new_id)

    assert added == []
    assert [s.task_id for s in plan_of(plans, "compute").starts] == ["t"]
    assert len(ledger.agents) == 1


def test_a_launching_agent_already_taken_is_no_room_for_another_task() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("t1", 2, 1.0), "compute")
    new_id = ids()
    ledger, _, _ = one_pass(ledger, 10.0, limits(), new_id)
    add_task(ledger, task("t2", 2, 2.0), "compute")

    ledger, plans, added = one_pass(ledger, 11.0, limits(), new_id)

    assert on_agents(ledger, "t1") == {"compute-0": 2}  # on the agent still launching
    assert codes(plans) == {"t2": "pool_full"}
    assert pools_of(ledger, added) == ["compute"]


def test_grow_never_goes_beyond_max_agents() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("a", 4, 1.0), "compute")
    add_task(ledger, task("b", 4, 2.0), "compute")
    add_task(ledger, task("c", 2, 3.0), "compute")
    new_id = ids()

    after, _, added = one_pass(ledger, 10.0, limits(), new_id)

    assert pools_of(after, added) == ["compute", "compute"]  # a's two; max_agents is 2
    bring_up(after, 11.0)
    after, _, added = one_pass(after, 12.0, limits(), new_id)
    assert set(on_agents(after, "a")) == {"compute-0", "compute-1"}
    assert added == []
    assert len(after.agents) == 2


def test_a_zero_slot_task_in_an_agentless_aux_pool_gets_one_agent() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("tb1", 0, 1.0), "aux")
    add_task(ledger, task("tb2", 0, 2.0), "aux")
    new_id = ids()

    after, plans, added = one_pass(ledger, 10.0, limits(aux={"max_agents": 3}), new_id)

    assert codes(plans) == {"tb1": "pool_full", "tb2": "pool_full"}
    assert pools_of(after, added) == ["aux"]  # one agent, no slot: both share it
    assert after.agents[added[0]].slots == 0

    after, plans, added = one_pass(after, 11.0, limits(aux={"max_agents": 3}), new_id)

    assert added == []
    assert on_agents(after, "tb1") == on_agents(after, "tb2") == {"aux-0": 0}


def _compute_full(ledger: DetLedger) -> None:
    """Both compute agents (its max) up and busy with earlier tasks."""
    for i in (1, 2):
        ledger.agents[f"c{i}"] = agent(f"c{i}", "compute", 2)
        running(ledger, task(f"old{i}", 2, 0.5), "compute", {f"c{i}": 2})


def test_a_task_whose_pool_is_at_max_grows_its_first_fallback_that_could_fit_it() -> None:
    ledger = DetLedger(master="m")
    _compute_full(ledger)
    # aux has only zero-slot agents: it could never fit two slots, so spill grows
    add_task(ledger, task("t", 2, 1.0, fallback_pools=("aux", "spill")), "compute")
    new_id = ids()

    after, plans, added = one_pass(ledger, 10.0, limits(aux={"max_agents": 3}), new_id)

    assert codes(plans) == {"t": "pool_full"}
    assert pools_of(after, added) == ["spill"]

    bring_up(after, 11.0)
    after, plans, added = one_pass(after, 12.0, limits(aux={"max_agents": 3}), new_id)

    assert added == []
    assert plan_of(plans, "spill").starts[0].task_id == "t"
    assert after.running_in["t"] == "spill" and after.pool_of("t") == "spill"
    assert on_agents(after, "t") == {"spill-0": 2}


def test_no_fallback_grows_for_a_task_it_could_never_fit() -> None:
    ledger = DetLedger(master="m")
    _compute_full(ledger)
    add_task(ledger, task("t", 4, 1.0, fallback_pools=("spill",)), "compute")

    _, plans, added = one_pass(ledger, 10.0, limits(), ids())

    assert codes(plans) == {"t": "pool_full"}
    assert added == []  # spill has at most one agent of two slots


def test_room_on_its_way_at_home_grows_no_fallback_pool() -> None:
    ledger = DetLedger(master="m")
    add_task(ledger, task("a", 1, 1.0, fallback_pools=("spill",)), "compute")
    add_task(ledger, task("b", 1, 2.0, fallback_pools=("spill",)), "compute")

    after, _, added = one_pass(ledger, 10.0, limits(), ids())

    assert pools_of(after, added) == ["compute"]  # a's new agent has b's slot too


def test_static_pools_never_grow() -> None:
    pools = with_static()
    ledger = DetLedger(master="m")
    add_task(ledger, task("alone", 1, 1.0), "static")  # no agent registered yet
    _compute_full(ledger)
    add_task(ledger, task("spills", 2, 2.0, fallback_pools=("static",)), "compute")

    after, plans, added = one_pass(ledger, 10.0, limits(), ids(), pools)

    assert codes(plans) == {"alone": "pool_full", "spills": "pool_full"}
    assert added == []

    after.agents["s1"] = agent("s1", "static", 1)  # an agent registers, and is taken
    after, plans, added = one_pass(after, 11.0, limits(), ids(), pools)
    assert on_agents(after, "alone") == {"s1": 1}
    add_task(after, task("more", 1, 3.0), "static")
    after, plans, added = one_pass(after, 12.0, limits(), ids(), pools)
    assert codes(plans)["more"] == "pool_full"
    assert added == []
    assert set(after.agents) == {"c1", "c2", "s1"}


def test_min_instances_are_launched_with_no_task_asking_and_never_past_max() -> None:
    # Determined keeps a pool's min_instances agents up (its provisioner launches them with
    # no task waiting); before #45 Corral only kept that many from being reaped.
    ledger = DetLedger(master="m")
    lim = limits(compute={"min_agents": 2, "max_agents": 3}, spill={"min_agents": 5})
    after, plans, added = one_pass(ledger, 10.0, lim, ids())
    assert codes(plans) == {}
    assert sorted(pools_of(after, added)) == ["compute", "compute", "spill"]  # spill: max 1
    after, _, added = one_pass(after, 11.0, lim, ids())
    assert added == []  # the launching ones count


def test_a_pool_whose_every_agent_place_is_blocked_grows_none_and_its_fallback_grows() -> None:
    """``blocked`` pools (every place their agents launch in blocked now) grow by no agent, for
    waiting tasks or for min_instances: a task with a fallback pool grows that one instead,
    and room already on its way to a blocked pool still counts there."""
    ledger = DetLedger(master="m")
    add_task(ledger, task("t", 2, 1.0, fallback_pools=("spill",)), "compute")
    add_task(ledger, task("alone", 2, 2.0), "compute")
    lim = limits(compute={"min_agents": 1})
    snapshots = snapshots_of(ledger, POOLS, lim)
    plans = schedule_pools(snapshots, 10.0)
    after = commit_det(ledger, plans, 10.0)
    added = grow(after, snapshots, plans, 10.0, ids(), blocked={"compute"})
    assert codes(plans) == {"t": "pool_full", "alone": "pool_full"}
    assert pools_of(after, added) == ["spill"]  # t's fallback; none in compute, min_agents too
    # Unblocked, the same pass grows compute (t's agent has room for alone's 2 slots too).
    again = commit_det(ledger, plans, 10.0)
    assert pools_of(again, grow(again, snapshots, plans, 10.0, ids())) == ["compute", "compute"]
    # An agent already launching in compute is room on its way: t waits for it, even blocked.
    ledger.agents["c1"] = agent("c1", "compute", 2, status="launching")
    snapshots = snapshots_of(ledger, POOLS, lim)
    plans = schedule_pools(snapshots, 10.0)
    after = commit_det(ledger, plans, 10.0)
    assert grow(after, snapshots, plans, 10.0, ids(), blocked={"compute"}) == []


# --------------------------------------------------------------------------- full cycle
@pytest.mark.parametrize(("min_agents", "left"), [(0, set()), (1, {"compute-1"})])
def test_full_cycle_start_finish_and_reap_idle_agents(min_agents: int, left: set[str]) -> None:
    lim = limits(compute={"min_agents": min_agents})
    new_id = ids()
    ledger = DetLedger(master="m")
    assert add_task(ledger, task("big", 2, 1.0), "compute")
    assert add_task(ledger, task("small", 1, 2.0), "compute")
    assert not add_task(ledger, task("big", 2, 3.0), "compute")  # known already

    ledger, plans, added = one_pass(ledger, 10.0, lim, new_id)
    assert codes(plans) == {"big": "pool_full", "small": "pool_full"}  # one level: both full
    assert ledger.notes["big"].code == "pool_full"
    assert added == ["compute-0", "compute-1"]  # big takes one agent, small needs another

    bring_up(ledger, 15.0)
    ledger, plans, added = one_pass(ledger, 16.0, lim, new_id)
    assert added == [] and codes(plans) == {}
    assert on_agents(ledger, "big") == {"compute-0": 2}
    assert on_agents(ledger, "small") == {"compute-1": 1}
    assert ledger.tasks["big"].started_at == 16.0
    assert ledger.running_in == {"big": "compute", "small": "compute"}
    assert "big" not in ledger.notes and ledger.started_by["big"].startswith("priority 42")
    held = SlotAllocation(agent_id="compute-1", slots=1)
    assert allocations_on(ledger, "compute-1") == [("small", held)]

    assert release_task(ledger, "big", 20.0, finished=True)
    assert not release_task(ledger, "big", 20.0, finished=True)
    assert "big" not in ledger.tasks and "big" not in ledger.home
    assert "big" not in ledger.running_in and "big" not in ledger.started_by
    assert ledger.agents["compute-0"].idle_since == 20.0
    assert ledger.agents["compute-1"].idle_since == 15.0  # small still runs there

    ledger, plans, _ = one_pass(ledger, 21.5, lim, new_id)  # idle 1.5 s: under 2 s
    assert plan_of(plans, "compute").reaps == ()
    ledger, plans, _ = one_pass(ledger, 22.5, lim, new_id)  # idle 2.5 s
    assert [r.agent_id for r in plan_of(plans, "compute").reaps] == ["compute-0"]
    assert ledger.agents["compute-0"].status == "reaping"
    snap = next(s for s in snapshots_of(ledger, POOLS, lim) if s.pool == "compute")
    assert [a.agent_id for a in snap.agents] == ["compute-1"]
    del ledger.agents["compute-0"]  # terminated

    assert release_task(ledger, "small", 30.0, finished=True)
    ledger, plans, _ = one_pass(ledger, 33.0, lim, new_id)
    reaped = {r.agent_id for r in plan_of(plans, "compute").reaps}
    assert {a for a, ag in ledger.agents.items() if ag.status == "up"} == left
    assert reaped == {"compute-1"} - left


# --------------------------------------------------------------------------- preemption
def test_priority_preemption_across_passes() -> None:
    lim = limits()
    new_id = ids()
    ledger = DetLedger(master="m")
    ledger.agents["c1"] = agent("c1", "compute", 2)
    ledger.agents["c2"] = agent("c2", "compute", 2)
    running(ledger, task("low1", 2, 1.0, priority=50), "compute", {"c1": 2})
    running(ledger, task("low2", 2, 2.0, priority=50), "compute", {"c2": 2})
    ledger.tasks["low2"] = ledger.tasks["low2"].model_copy(update={"started_at": 2.0})
    add_task(ledger, task("high", 2, 3.0, priority=1), "compute")

    ledger, plans, added = one_pass(ledger, 10.0, lim, new_id)

    # the newest low task gives way; high waits for it, and no agent is grown for it
    assert [r.task_id for r in plan_of(plans, "compute").releases] == ["low2"]
    assert codes(plans) == {"high": "waiting_for_preemption"}
    assert added == []
    assert ledger.tasks["low2"].stopping and ledger.preempted_by["low2"] == "high"
    assert on_agents(ledger, "low2") == {"c2": 2}  # still giving its slots back

    ledger, plans, _ = one_pass(ledger, 11.0, lim, new_id)  # low2 has not stopped yet
    assert plan_of(plans, "compute").releases == () and plan_of(plans, "compute").starts == ()
    assert codes(plans) == {"high": "waiting_for_preemption"}

    assert release_task(ledger, "low2", 12.0, finished=False)
    low2 = ledger.tasks["low2"]
    assert (low2.allocations, low2.stopping, low2.started_at) == ((), False, None)
    assert low2.submitted_at == 2.0 and ledger.home["low2"] == "compute"
    add_task(ledger, task("low3", 2, 4.0, priority=50), "compute")  # after low2 in the queue

    ledger, plans, added = one_pass(ledger, 13.0, lim, new_id)
    assert on_agents(ledger, "high") == {"c2": 2}
    assert codes(plans) == {"low2": "pool_full", "low3": "pool_full"}  # same level, both full
    assert added == []  # compute is at its max of two agents

    release_task(ledger, "high", 20.0, finished=True)
    ledger, plans, _ = one_pass(ledger, 21.0, lim, new_id)
    assert on_agents(ledger, "low2") == {"c2": 2}  # its place kept: before low3
    assert codes(plans) == {"low3": "pool_full"}


# --------------------------------------------------------------------------- lost agents
def test_agent_lost_sends_its_tasks_back_to_pending() -> None:
    ledger = DetLedger(master="m")
    for aid in ("c1", "c2"):
        ledger.agents[aid] = agent(aid, "compute", 2)
    ledger.agents["s1"] = agent("s1", "spill", 2)
    running(ledger, task("wide", 4, 1.0), "compute", {"c1": 2, "c2": 2})
    running(ledger, task("moved", 1, 2.0, fallback_pools=("spill",)), "compute", {"s1": 1})
    ledger.running_in["moved"] = "spill"
    running(ledger, task("other", 1, 3.0), "spill", {"s1": 1})

    assert agent_lost(ledger, "c1", 50.0) == ["wide"]
    assert "c1" not in ledger.agents
    assert not ledger.tasks["wide"].is_running() and ledger.tasks["wide"].started_at is None
    assert ledger.agents["c2"].idle_since == 50.0  # its other agent is free now
    assert ledger.pool_of("wide") == "compute"

    assert agent_lost(ledger, "s1", 51.0) == ["moved", "other"]
    assert "moved" not in ledger.running_in
    assert ledger.pool_of("moved") == "compute"  # back on its own pool's queue
    assert all(not t.is_running() for t in ledger.tasks.values())
    assert agent_lost(ledger, "gone", 52.0) == []

    snaps = {s.pool: s for s in snapshots_of(ledger, POOLS, limits())}
    assert [t.task_id for t in snaps["compute"].tasks] == ["wide", "moved"]
    assert [t.task_id for t in snaps["spill"].tasks] == ["other"]
