"""Determined's schedulers against hand-worked examples: fair_share, priority, round_robin,
best and worst fitting, zero-slot tasks, tasks that can never fit, fallback pools, reaping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.shared.catalog import Catalog, Offering
from corral.shared.config.detect import load_as
from corral.shared.config.master_config import MasterConfig
from corral.shared.resource_pools import resolve_pools
from corral.shared.scheduling import (
    Agent,
    DetPlan,
    DetPoolSnapshot,
    DetScheduler,
    DetTask,
    SlotAllocation,
    can_ever_fit,
    fair_shares,
    schedule_pool,
    schedule_pools,
)
from corral.shared.scheduling.build import det_limits, det_scheduler

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def agents(*slots: int) -> tuple[Agent, ...]:
    return tuple(Agent(agent_id=f"ag{i + 1}", slots=s) for i, s in enumerate(slots))


def task(tid: str, group: str, slots: int, t: float, **fields: Any) -> DetTask:
    return DetTask(task_id=tid, group_id=group, slots=slots, submitted_at=t, **fields)


def running(tid: str, group: str, on: dict[str, int], t: float, **fields: Any) -> DetTask:
    """A task already holding slots: ``on`` maps agent -> slots."""
    allocations = tuple(SlotAllocation(agent_id=a, slots=n) for a, n in on.items())
    return task(tid, group, sum(on.values()), t, allocations=allocations, started_at=t, **fields)


def pool(
    kind: str, agent_slots: tuple[Agent, ...], tasks: list[DetTask], **fields: Any
) -> DetPoolSnapshot:
    scheduler = fields.pop("scheduler", {})
    return DetPoolSnapshot(
        pool="gpu",
        versions={"gpu": 7},
        scheduler=DetScheduler(type=kind, **scheduler),  # type: ignore[arg-type]
        agents=agent_slots,
        tasks=tuple(tasks),
        **fields,
    )


def starts(plan: DetPlan) -> dict[str, list[tuple[str, int]]]:
    return {s.task_id: [(a.agent_id, a.slots) for a in s.allocations] for s in plan.starts}


def codes(plan: DetPlan) -> dict[str, str]:
    return {p.task_id: p.code for p in plan.pending}


# --------------------------------------------------------------------------- fair share
def test_fair_shares_hand_worked() -> None:
    # 8 slots; demands A 6, B 1, C 4; weights 1. An equal third (8/3 = 2.67) caps B at 1.
    # A and C split the other 7: 3.5 each -> 3 and 3; the last slot (fractions tie) goes to
    # the older group, A. A 4 + B 1 + C 3 = 8.
    assert fair_shares(8, [("A", 6, 1.0), ("B", 1, 1.0), ("C", 4, 1.0)]) == {
        "A": 4,
        "B": 1,
        "C": 3,
    }
    # Weights 3:1 over 10 slots, both wanting 10: 7.5 and 2.5 -> 7 and 2, the last to A.
    assert fair_shares(10, [("A", 10, 3.0), ("B", 10, 1.0)]) == {"A": 8, "B": 2}
    # More slots than demand: everyone gets its demand, nothing more.
    assert fair_shares(16, [("A", 3, 1.0), ("B", 5, 2.0)]) == {"A": 3, "B": 5}
    # No slots: nothing.
    assert fair_shares(0, [("A", 3, 1.0)]) == {"A": 0}


def test_fair_share_pass_best_fit() -> None:
    # Two agents of 4 slots. Shares as above: A 4, B 1, C 3 (demands 6, 1, 4).
    tasks = [
        task("a1", "A", 2, 1.0),
        task("a2", "A", 2, 2.0),
        task("a3", "A", 2, 3.0),
        task("b1", "B", 1, 4.0),
        task("c1", "C", 2, 5.0),
        task("c2", "C", 2, 6.0),
    ]
    plan = schedule_pool(pool("fair_share", agents(4, 4), tasks), 10.0)
    # Oldest group first (all hold 0): A starts a1, a2 (4 = its share; a3 would be 6);
    # B starts b1; C starts c1 (2; c2 would make 4 > 3). 7 slots used, 1 free: no waiting
    # task fits in 1 slot.
    # Best fit: a1 ties (2 left on either) -> ag1; a2 on ag1 leaves 0; b1 only fits ag2
    # (4 -> 3); c1 on ag2 (3 -> 1).
    assert starts(plan) == {
        "a1": [("ag1", 2)],
        "a2": [("ag1", 2)],
        "b1": [("ag2", 1)],
        "c1": [("ag2", 2)],
    }
    assert codes(plan) == {"a3": "over_fair_share", "c2": "over_fair_share"}
    assert plan.why("c2") == "group C holds 2 slot(s); its fair share is 3"


def test_fair_share_pass_worst_fit() -> None:
    tasks = [task("a1", "A", 2, 1.0), task("a2", "A", 2, 2.0), task("b1", "B", 1, 3.0)]
    plan = schedule_pool(
        pool("fair_share", agents(4, 4), tasks, scheduler={"fitting_policy": "worst"}), 10.0
    )
    # Worst fit spreads: a1 ties -> ag1 (2 left); a2 -> ag2 (leaves 2 > 0); b1: ag1 and ag2
    # both leave 1 -> ag1.
    assert starts(plan) == {"a1": [("ag1", 2)], "a2": [("ag2", 2)], "b1": [("ag1", 1)]}


def test_fair_share_releases_over_share_work_then_starts_the_starved_group() -> None:
    # A holds all 8 slots with four 2-slot tasks; B asks for 2 x 2. Demands A 8, B 4:
    # level 8/2 = 4 caps B at 4; A gets the other 4. B is 4 below its share: release A's
    # newest tasks (a4, then a3) until A is at its share; nothing starts in the same pass.
    a = [running(f"a{i}", "A", {f"ag{(i + 1) // 2}": 2}, float(i)) for i in range(1, 5)]
    b = [task("b1", "B", 2, 10.0), task("b2", "B", 2, 11.0)]
    plan = schedule_pool(pool("fair_share", agents(4, 4), [*a, *b]), 20.0)
    assert [(r.task_id, r.preempted_by) for r in plan.releases] == [("a4", "b1"), ("a3", "b1")]
    assert plan.starts == ()
    assert codes(plan) == {"b1": "waiting_for_preemption", "b2": "waiting_for_preemption"}
    # a3 and a4 stopped (slots given back, queued again): B, now the neediest, starts first.
    requeued = [task("a3", "A", 2, 3.0), task("a4", "A", 2, 4.0)]
    plan = schedule_pool(pool("fair_share", agents(4, 4), [*a[:2], *requeued, *b]), 30.0)
    assert starts(plan) == {"b1": [("ag2", 2)], "b2": [("ag2", 2)]}
    assert codes(plan) == {"a3": "over_fair_share", "a4": "over_fair_share"}
    assert plan.releases == ()


def test_fair_share_never_releases_non_preemptible_work() -> None:
    a = [running(f"a{i}", "A", {"ag1": 2}, float(i), preemptible=False) for i in (1, 2)]
    plan = schedule_pool(pool("fair_share", agents(4), [*a, task("b1", "B", 2, 9.0)]), 10.0)
    assert plan.releases == ()
    assert codes(plan) == {"b1": "pool_full"}


# --------------------------------------------------------------------------- priority
def test_priority_lower_number_wins_then_submission_order() -> None:
    tasks = [
        task("late-urgent", "X", 4, 3.0, priority=10),
        task("default", "Y", 4, 1.0),  # 42
        task("early-urgent", "Z", 4, 2.0, priority=10),
    ]
    plan = schedule_pool(pool("priority", agents(4, 4), tasks), 10.0)
    # Order: early-urgent (10, t2), late-urgent (10, t3), default (42). Two agents of 4.
    assert list(starts(plan)) == ["early-urgent", "late-urgent"]
    assert codes(plan) == {"default": "pool_full"}


def test_priority_preempts_from_the_lowest_up_and_prunes() -> None:
    # One agent of 8: low (priority 50, 4 slots) and mid (42, 4 slots) run. urgent (10, 8
    # slots) does not fit. Victims from 99 up: low (50) frees 4 -> not enough; mid (42) ->
    # 8, fits. Pruning: put low back -> 4 free < 8, so both are needed.
    tasks = [
        running("low", "L", {"ag1": 4}, 1.0, priority=50),
        running("mid", "M", {"ag1": 4}, 2.0),
        task("urgent", "U", 8, 5.0, priority=10),
        task("filler", "F", 2, 6.0, priority=60),
    ]
    plan = schedule_pool(pool("priority", agents(8), tasks, scheduler={"preemption": True}), 10.0)
    assert [(r.task_id, r.preempted_by) for r in plan.releases] == [
        ("low", "urgent"),
        ("mid", "urgent"),
    ]
    # The 8 slots are promised to urgent: filler may not take them.
    assert codes(plan) == {"urgent": "waiting_for_preemption", "filler": "behind_higher_priority"}


def test_priority_prune_keeps_a_victim_not_needed() -> None:
    # Two agents of 4. ag1: old-low (70, 2 slots), newer-low (70, 2 slots); ag2: mid (50, 4).
    # urgent needs 4 on one agent. Victims from 99 up, newest first: newer-low (ag1: 2 free,
    # not enough), old-low (ag1: 4 free, fits). Nothing to prune; mid is untouched.
    tasks = [
        running("old-low", "A", {"ag1": 2}, 1.0, priority=70),
        running("newer-low", "B", {"ag1": 2}, 2.0, priority=70),
        running("mid", "C", {"ag2": 4}, 3.0, priority=50),
        task("urgent", "U", 4, 5.0, priority=1),
    ]
    plan = schedule_pool(pool("priority", agents(4, 4), tasks, scheduler={"preemption": True}), 9)
    assert [r.task_id for r in plan.releases] == ["newer-low", "old-low"]
    # A 2-slot urgent task needs only one victim: the newest of the lowest.
    tasks[-1] = task("urgent", "U", 2, 5.0, priority=1)
    plan = schedule_pool(pool("priority", agents(4, 4), tasks, scheduler={"preemption": True}), 9)
    assert [r.task_id for r in plan.releases] == ["newer-low"]


def test_priority_equal_priority_preempts_only_later_submissions() -> None:
    tasks = [
        running("older", "A", {"ag1": 4}, 1.0, priority=30),
        task("waiting", "B", 4, 2.0, priority=30),
    ]
    plan = schedule_pool(pool("priority", agents(4), tasks, scheduler={"preemption": True}), 9)
    assert plan.releases == ()
    tasks = [
        running("newer", "A", {"ag1": 4}, 5.0, priority=30),
        task("waiting", "B", 4, 2.0, priority=30),
    ]
    plan = schedule_pool(pool("priority", agents(4), tasks, scheduler={"preemption": True}), 9)
    assert [r.task_id for r in plan.releases] == ["newer"]


def test_priority_counts_slots_already_being_released() -> None:
    # `gone` was released by an earlier pass and is stopping on ag1 (4 slots). urgent (10,
    # 4 slots) is promised those slots: no new victim, although `low` (60) runs on ag2.
    tasks = [
        running("gone", "G", {"ag1": 4}, 1.0, priority=50, stopping=True),
        running("low", "L", {"ag2": 4}, 2.0, priority=60),
        task("urgent", "U", 4, 3.0, priority=10),
    ]
    plan = schedule_pool(pool("priority", agents(4, 4), tasks, scheduler={"preemption": True}), 9)
    assert plan.releases == () and plan.starts == ()
    assert codes(plan) == {"urgent": "waiting_for_preemption"}
    assert plan.why("urgent") == "slots promised to it while tasks already being released stop(s)"


def test_priority_without_preemption_lower_levels_wait_for_a_blocked_task() -> None:
    # Two agents of 4; r1 (42) holds ag1. big (10, 8 slots) needs both agents whole: it does
    # not fit. Without preemption nothing lower starts (it would starve big), though small
    # (2 slots) would fit on ag2. wide (6 slots) is more than an agent and not a multiple of
    # 4: refused, never pending (and so it blocks nothing).
    tasks = [
        running("r1", "R", {"ag1": 4}, 1.0),
        task("big", "B", 8, 2.0, priority=10),
        task("small", "S", 2, 3.0, priority=70),
        task("wide", "W", 6, 4.0, priority=70),
    ]
    plan = schedule_pool(pool("priority", agents(4, 4), tasks), 10.0)
    assert starts(plan) == {}
    assert codes(plan) == {
        "big": "pool_full",
        "small": "behind_higher_priority",
        "wide": "can_never_fit",
    }


# --------------------------------------------------------------------------- round robin
def test_round_robin_one_task_per_group_per_round() -> None:
    # Two agents of 4 (8 slots). Groups by age: A (a1..a3), B (b1, b2), C (c1); 2 slots each.
    # Round 1: a1, b1, c1 (6 slots). Round 2: a2 (8 slots); b2 does not fit; C is empty.
    # FIFO would have started a1, a2, a3, b1 instead.
    tasks = [
        task("a1", "A", 2, 1.0),
        task("a2", "A", 2, 2.0),
        task("a3", "A", 2, 3.0),
        task("b1", "B", 2, 4.0),
        task("b2", "B", 2, 5.0),
        task("c1", "C", 2, 6.0),
    ]
    plan = schedule_pool(pool("round_robin", agents(4, 4), tasks), 10.0)
    assert list(starts(plan)) == ["a1", "b1", "c1", "a2"]
    assert [s.reason for s in plan.starts] == [
        "round 1, group A",
        "round 1, group B",
        "round 1, group C",
        "round 2, group A",
    ]
    assert codes(plan) == {"a3": "pool_full", "b2": "pool_full"}
    assert plan.releases == ()


# --------------------------------------------------------------------------- fitting and limits
def test_multi_agent_task_takes_whole_idle_agents() -> None:
    tasks = [running("r", "R", {"ag1": 1}, 1.0), task("dist", "D", 8, 2.0)]
    plan = schedule_pool(pool("fair_share", agents(4, 4, 4), tasks), 10.0)
    assert starts(plan) == {"dist": [("ag2", 4), ("ag3", 4)]}


def test_zero_slot_tasks_pack_under_best_fit() -> None:
    tasks = [
        running("tb0", "T", {"ag1": 0}, 1.0),
        task("tb1", "T", 0, 2.0),
        task("tb2", "T", 0, 3.0),
        task("tb3", "T", 0, 4.0),
    ]
    plan = schedule_pool(
        pool("priority", agents(0, 0), tasks, max_aux_containers_per_agent=2), 10.0
    )
    # Best fit packs auxiliary work (Determined's BestFit scores the places left): ag1 has 1
    # place left, ag2 2: tb1 -> ag1 (now full); tb2 and tb3 -> ag2.
    assert starts(plan) == {"tb1": [("ag1", 0)], "tb2": [("ag2", 0)], "tb3": [("ag2", 0)]}


@pytest.mark.parametrize(
    ("slots", "ok"), [(0, True), (1, True), (4, True), (8, True), (6, False), (12, False)]
)
def test_can_ever_fit_provider_pool(slots: int, ok: bool) -> None:
    # A provider pool: agents of 4 slots, at most 2 of them.
    snapshot = DetPoolSnapshot(pool="gpu", slots_per_agent=4, max_agents=2)
    verdict = can_ever_fit(snapshot, slots)
    assert verdict.ok is ok
    if not ok:
        assert f"can never give {slots} slots" in verdict.reason
        assert "up to 2 agent(s) of 4 slots" in verdict.reason


def test_slot_task_in_a_cpu_only_pool_is_refused_not_left_pending() -> None:
    cpu = DetPoolSnapshot(pool="cpu", slots_per_agent=0, max_agents=4)
    verdict = can_ever_fit(cpu, 1)
    assert not verdict.ok and "no slots" in verdict.reason
    plan = schedule_pool(cpu.model_copy(update={"tasks": (task("train", "E", 1, 1.0),)}), 5.0)
    assert codes(plan) == {"train": "can_never_fit"}


def test_seed_two_pools_limits_and_refusal() -> None:
    master, _ = load_as(SEEDS / "determined-master-two-pools.yaml", MasterConfig)
    resolved = resolve_pools(master)
    catalog = Catalog(
        [
            Offering("aws", "m5.large", None, 0, 2, 8, 0.096, None, "us-east-1", "us-east-1a"),
            Offering(
                "aws", "p3dn.24xlarge", "V100", 8, 96, 768, 31.2, 9.4, "us-east-1", "us-east-1a"
            ),
        ]
    )
    cpu = resolved.pool("aws-cpu")
    limits = det_limits(cpu, catalog)
    assert limits == {
        "max_aux_containers_per_agent": 100,  # the seed's aws-cpu pool
        "slots_per_agent": 0,
        "max_agents": 2,
        "min_agents": 0,
        "max_idle_agent_s": 600.0,
    }
    assert not can_ever_fit(DetPoolSnapshot(pool="aws-cpu", **limits), 1).ok
    v100 = det_limits(resolved.pool("aws-v100"), catalog)
    assert (v100["slots_per_agent"], v100["max_agents"]) == (8, 4)
    assert det_scheduler(resolved.pool("aws-v100").scheduler) == DetScheduler(
        type="priority", fitting_policy="best", preemption=True, default_priority=42
    )


def test_fallback_pools_take_a_task_its_own_pool_cannot() -> None:
    spot = pool(
        "priority",
        agents(4),
        [running("busy", "X", {"ag1": 4}, 1.0), task("t", "E", 4, 2.0, fallback_pools=("od",))],
    ).model_copy(update={"pool": "spot", "versions": {"spot": 3}})
    od = pool("fair_share", agents(4), []).model_copy(update={"pool": "od", "versions": {"od": 9}})
    spot_plan, od_plan = schedule_pools([spot, od], 10.0)
    assert spot_plan.pending == ()
    [start] = od_plan.starts
    assert (start.task_id, start.pool) == ("t", "od")
    assert start.reason == "moved from spot (pool_full) to its fallback pool od"
    assert od_plan.based_on == {"od": 9, "spot": 3}  # both pools' versions to compare
    # Without a fallback list it waits in its own pool.
    alone = spot.model_copy(update={"tasks": (spot.tasks[0], task("t", "E", 4, 2.0))})
    assert codes(schedule_pools([alone, od], 10.0)[0]) == {"t": "pool_full"}


def test_a_task_held_by_its_max_slots_does_not_fall_back() -> None:
    """max_slots caps the job, not one pool: a task waiting at it does not move to a fallback
    pool with room (one waiting only for room does)."""
    capped = dict(max_slots=1, fallback_pools=("od",))
    home = pool(
        "fair_share",
        agents(4),
        [running("r", "E", {"ag1": 1}, 1.0, max_slots=1), task("t", "E", 1, 2.0, **capped)],
    ).model_copy(update={"pool": "home"})
    od = pool("fair_share", agents(4), []).model_copy(update={"pool": "od"})
    home_plan, od_plan = schedule_pools([home, od], 10.0)
    assert codes(home_plan) == {"t": "at_max_slots"} and od_plan.starts == ()


def test_idle_agents_reaped_past_period_keeping_min_and_reserved_last() -> None:
    fleet = (
        Agent(agent_id="res", slots=4, market="reserved", idle_since=0.0),
        Agent(agent_id="old", slots=4, idle_since=10.0),
        Agent(agent_id="new", slots=4, idle_since=290.0),
        Agent(agent_id="busy", slots=4),
    )
    base = pool(
        "fair_share",
        fleet,
        [running("r", "R", {"busy": 4}, 1.0)],
        max_idle_agent_s=120.0,
        min_agents=1,
    )
    assert [r.agent_id for r in schedule_pool(base, 300.0).reaps] == ["old", "res"]
    keep3 = base.model_copy(update={"min_agents": 3})
    assert [r.agent_id for r in schedule_pool(keep3, 300.0).reaps] == ["old"]
    # An agent a task starts on in this pass is not idle.
    starting = base.model_copy(update={"tasks": (*base.tasks, task("t", "T", 4, 2.0))})
    plan = schedule_pool(starting, 300.0)
    assert starts(plan) == {"t": [("new", 4)]}  # best fit ties: lowest id among equals
    assert [r.agent_id for r in plan.reaps] == ["old", "res"]
