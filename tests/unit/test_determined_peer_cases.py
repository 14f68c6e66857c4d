"""Determined's own scheduler tests, case by case, run through ``shared.scheduling``.

Each test names the file of ``determined-ai/determined`` (``master/internal/rm/agentrm/``)
and the Go test it translates. The set-ups are Determined's: agents with slots (and a limit
of zero-slot containers), groups with a priority, tasks in submission order (index i is
submitted at time i). A task Determined lists as already allocated is a running task here.
Expectations are Determined's, except where a comment marks a deliberate difference
(documented in docs/SCHEDULING_PEERS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import pytest

from corral.shared.scheduling import (
    Agent,
    DetPlan,
    DetPoolSnapshot,
    DetScheduler,
    DetTask,
    SlotAllocation,
    schedule_pool,
)
from corral.shared.scheduling.fitting import AgentBook, find_fit, score


@dataclass
class Mock:
    """A Determined MockTask: id, slots, priority, and (if allocated) the agent it runs on."""

    task_id: str
    slots: int
    priority: int
    on: str | None = None


def det_pool(
    agents: list[tuple[str, int, int]],
    mocks: list[Mock],
    *,
    preemption: bool = False,
    kind: str = "priority",
    positions: dict[str, float] | None = None,
) -> DetPoolSnapshot:
    """agents: (id, slots, max zero-slot containers); ``positions``: queue positions, which
    are submission order here (Determined's job positions)."""
    tasks = []
    for i, m in enumerate(mocks):
        at = positions.get(m.task_id, float(i)) if positions else float(i)
        allocations = () if m.on is None else (SlotAllocation(agent_id=m.on, slots=m.slots),)
        tasks.append(
            DetTask(
                task_id=m.task_id,
                group_id=f"g{m.priority}",
                slots=m.slots,
                priority=m.priority,
                submitted_at=at,
                started_at=float(i) if m.on else None,
                allocations=allocations,
            )
        )
    return DetPoolSnapshot(
        pool="p",
        scheduler=DetScheduler(type=kind, preemption=preemption),
        agents=tuple(Agent(agent_id=a, slots=s, max_aux_containers=z) for a, s, z in agents),
        tasks=tuple(tasks),
    )


def started(plan: DetPlan) -> set[str]:
    return {s.task_id for s in plan.starts}


def released(plan: DetPlan) -> set[str]:
    return {r.task_id for r in plan.releases}


def commit(
    pool: DetPoolSnapshot, plan: DetPlan, *, gone: frozenset[str] | set[str] = frozenset()
) -> DetPoolSnapshot:
    """The pool after the plan's starts are carried out and the tasks in ``gone`` finished."""
    placed = {s.task_id: s.allocations for s in plan.starts}
    tasks = tuple(
        t.model_copy(update={"allocations": placed[t.task_id], "started_at": 100.0})
        if t.task_id in placed
        else t
        for t in pool.tasks
        if t.task_id not in gone
    )
    return pool.model_copy(update={"tasks": tasks})


def add(pool: DetPoolSnapshot, mocks: list[Mock]) -> DetPoolSnapshot:
    extra = det_pool([], mocks).tasks
    base = len(pool.tasks) + 10.0
    tasks = [t.model_copy(update={"submitted_at": base + t.submitted_at}) for t in extra]
    return pool.model_copy(update={"tasks": (*pool.tasks, *tasks)})


LOW, MEDIUM, HIGH = 50, 45, 40


# --------------------------------------------------------------------------- priority_test.go
def test_priority_preemption_disabled() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabled"""
    pool = det_pool(
        [("agent1", 4, 100), ("agent2", 4, 100)],
        [
            Mock("task1", 4, LOW),
            Mock("task2", 1, LOW),
            Mock("task3", 1, HIGH),
            Mock("task4", 0, HIGH),
            Mock("task5", 4, HIGH),
            Mock("task6", 0, LOW),
        ],
    )
    plan = schedule_pool(pool, 0)
    # task1 does not fit, but its own level goes on: task2 starts beside it.
    assert started(plan) == {"task2", "task3", "task4", "task5", "task6"}
    assert released(plan) == set()


def test_priority_preemption_disabled_higher_priority_blocks_lower() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledHigherPriorityBlocksLowerPriority

    DELIBERATE DIFFERENCE. task3 asks 12 slots of a pool of two 4-slot agents: it can never
    run. Determined leaves it pending and so holds every lower task forever; Corral refuses
    it (can_never_fit, at submit and in the plan) and the lower tasks run."""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [Mock("task1", 4, LOW), Mock("task2", 1, LOW), Mock("task3", 12, HIGH)],
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task1", "task2"}  # Determined: none
    assert {p.task_id: p.code for p in plan.pending} == {"task3": "can_never_fit"}


def test_priority_preemption_disabled_higher_priority_that_can_fit_later_blocks_lower() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledHigherPriorityBlocksLowerPriority,
    with task3 at 8 slots (both agents whole, once free): a task that can fit later holds the
    lower levels exactly as Determined holds them."""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [
            Mock("busy", 2, HIGH, on="agent1"),
            Mock("task1", 4, LOW),
            Mock("task2", 1, LOW),
            Mock("task3", 8, HIGH),
        ],
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == set()
    assert {p.task_id: p.code for p in plan.pending}["task2"] == "behind_higher_priority"


def test_priority_preemption_disabled_add_tasks() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledAddTasks"""
    pool = det_pool(
        [("agent1", 4, 100), ("agent2", 4, 100)],
        [
            Mock("task1", 4, LOW),
            Mock("task2", 1, LOW),
            Mock("task3", 1, HIGH),
            Mock("task4", 0, HIGH),
            Mock("task5", 4, HIGH),
            Mock("task6", 0, LOW),
        ],
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task2", "task3", "task4", "task5", "task6"}
    pool = add(commit(pool, plan), [Mock(f"task{i}", 1, LOW) for i in (7, 8, 9)])
    assert started(schedule_pool(pool, 1)) == {"task7", "task8"}


def test_priority_preemption_disabled_all_slots_allocated() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledAllSlotsAllocated"""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [
            Mock("task1", 4, LOW),
            Mock("task2", 1, LOW),
            Mock("task3", 1, HIGH),
            Mock("task4", 1, HIGH),
            Mock("task5", 4, HIGH),
            Mock("task6", 1, LOW),
        ],
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task2", "task3", "task4", "task5", "task6"}
    pool = add(commit(pool, plan), [Mock("task7", 1, HIGH), Mock("task8", 1, HIGH)])
    assert started(schedule_pool(pool, 1)) == set()


def test_priority_preemption_disabled_lower_priority_must_wait() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledLowerPriorityMustWait"""
    pool = det_pool(
        [("agent1", 4, 0)],
        [
            Mock("task1", 1, LOW),
            Mock("task2", 1, HIGH),
            Mock("task3", 1, HIGH),
            Mock("task4", 1, HIGH),
            Mock("task5", 2, HIGH),
        ],
    )
    first = schedule_pool(pool, 0)
    assert started(first) == {"task2", "task3", "task4"}  # task1 fits but must wait for task5
    pool = commit(pool, first)
    assert started(schedule_pool(pool, 1)) == set()
    pool = commit(pool, schedule_pool(pool, 1), gone={"task2", "task3", "task4"})
    assert started(schedule_pool(pool, 2)) == {"task1", "task5"}


def test_priority_preemption_disabled_task_finished() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledTaskFinished"""
    pool = det_pool([("agent1", 4, 100)], [Mock("task1", 4, HIGH)])
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task1"}
    pool = commit(pool, plan, gone={"task1"})
    pool = add(pool, [Mock("task7", 1, HIGH), Mock("task8", 1, HIGH), Mock("task9", 0, HIGH)])
    assert started(schedule_pool(pool, 1)) == {"task7", "task8", "task9"}


def test_priority_preemption_disabled_all_tasks_finished() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledAllTasksFinished"""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [
            Mock("task1", 4, LOW),
            Mock("task2", 1, LOW),
            Mock("task3", 1, HIGH),
            Mock("task4", 1, HIGH),
            Mock("task5", 4, HIGH),
            Mock("task6", 1, LOW),
        ],
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task2", "task3", "task4", "task5", "task6"}
    pool = add(commit(pool, plan, gone=started(plan)), [Mock("task7", 4, HIGH)])
    assert started(schedule_pool(pool, 1)) == {"task1", "task7"}


def test_priority_preemption_disabled_zero_slot_task() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledZeroSlotTask"""
    pool = det_pool([("agent1", 4, 1)], [Mock("task1", 0, LOW), Mock("task2", 0, LOW)])
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task1"}
    pool = add(commit(pool, plan), [Mock("task3", 0, HIGH)])
    plan = schedule_pool(pool, 1)
    assert started(plan) == set() and released(plan) == set()


def test_sort_tasks_by_priority_and_timestamps() -> None:
    """priority_test.go: TestSortTasksByPriorityAndTimestamps. Determined checks its sort
    helper; Corral's order shows in what starts: within a class, the higher priority (40)
    first, the older submission first within a level; zero-slot and slot tasks apart. One
    4-slot agent with one zero-slot place: task4 (0 slots, 40, older) and task6 (4 slots, 40,
    older) start; task3 and task5 wait behind them, task1 and task2 (50) wait below."""
    now, older = 100.0, 85.0
    order = [("task1", 4, LOW, now), ("task2", 1, LOW, older), ("task3", 0, HIGH, now)]
    order += [("task4", 0, HIGH, older), ("task5", 4, HIGH, now), ("task6", 4, HIGH, older)]
    pool = det_pool([("agent1", 4, 1)], [Mock(t, n, p) for t, n, p, _ in order])
    at = {t: when for t, _, _, when in order}
    tasks = tuple(t.model_copy(update={"submitted_at": at[t.task_id]}) for t in pool.tasks)
    plan = schedule_pool(pool.model_copy(update={"tasks": tasks}), 0)
    assert started(plan) == {"task4", "task6"}
    assert {p.task_id for p in plan.pending} == {"task1", "task2", "task3", "task5"}


def test_priority_max_zero_slot_container() -> None:
    """priority_test.go: TestPrioritySchedulingMaxZeroSlotContainer"""
    pool = det_pool(
        [("agent1", 4, 0)], [Mock("task1", 4, HIGH), Mock("task6", 0, LOW)], preemption=True
    )
    assert started(schedule_pool(pool, 0)) == {"task1"}


def test_priority_preemption() -> None:
    """priority_test.go: TestPrioritySchedulingPreemption"""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [
            Mock("low-cannot-backfill", 1, LOW),
            Mock("medium-preempted", 4, MEDIUM, on="agent1"),
            Mock("high-not-preempted", 4, HIGH, on="agent2"),
            Mock("high-causes-preemption", 4, HIGH),
            Mock("high-oversized", 8, HIGH),
        ],
        preemption=True,
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == set()
    assert released(plan) == {"medium-preempted"}


def test_priority_backfilling() -> None:
    """priority_test.go: TestPrioritySchedulingBackfilling"""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [
            Mock("low-preempted", 1, 55, on="agent1"),
            Mock("lower-causes-preemption", 1, LOW),
            Mock("medium-backfilled", 1, MEDIUM),
            Mock("high-not-preempted", 4, HIGH, on="agent2"),
            Mock("high-scheduled", 2, HIGH),
            Mock("high-oversized", 8, HIGH),
        ],
        preemption=True,
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"medium-backfilled", "high-scheduled"}
    assert released(plan) == {"low-preempted"}


def test_priority_preemption_zero_slot_task() -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionZeroSlotTask: a zero-slot task
    preempts a lower zero-slot task when the agents' auxiliary places are full."""
    pool = det_pool(
        [("agent1", 0, 1), ("agent2", 0, 1)],
        [
            Mock("low-cannot-be-scheduled", 0, LOW),
            Mock("medium-preempted", 0, MEDIUM, on="agent1"),
            Mock("high-not-preempted", 0, HIGH, on="agent2"),
            Mock("high-causes-preemption", 0, HIGH),
        ],
        preemption=True,
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == set()
    assert released(plan) == {"medium-preempted"}


def test_priority_backfilling_zero_slot_task() -> None:
    """priority_test.go: TestPrioritySchedulingBackfillingZeroSlotTask"""
    pool = det_pool(
        [("agent1", 0, 4), ("agent2", 0, 1)],
        [
            Mock("low-scheduled", 0, 55),
            Mock("medium-not-preempted", 0, LOW, on="agent1"),
            Mock("high-not-preempted", 0, MEDIUM, on="agent2"),
            Mock("high-scheduled", 0, MEDIUM),
        ],
        preemption=True,
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"low-scheduled", "high-scheduled"}
    assert released(plan) == set()


@pytest.mark.parametrize(
    ("positions", "registered"),
    [({"1": 1.0, "2": 2.0, "3": 1.5}, None), ({"1": 1.0, "2": 1.0, "3": 0.999}, None)],
)
def test_priority_preempt_one_by_position(positions: dict[str, float], registered: None) -> None:
    """priority_test.go: TestPrioritySchedulingPreemptOneByPosition (queue positions are
    submission order here; the second case: still only one victim, the later registered)."""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [Mock("1", 1, 42, on="agent1"), Mock("2", 4, 42, on="agent2"), Mock("3", 4, 42)],
        preemption=True,
        positions=positions,
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == set()
    assert released(plan) == {"2"}


def test_priority_no_preemption_by_position() -> None:
    """priority_test.go: TestPrioritySchedulingNoPreemptionByPosition"""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [Mock("1", 1, 42, on="agent1"), Mock("2", 4, 42, on="agent2"), Mock("3", 8, 42)],
        preemption=True,
        positions={"1": 1.0, "2": 2.0, "3": 1.5},
    )
    plan = schedule_pool(pool, 0)
    assert started(plan) == set() and released(plan) == set()


def test_nothing_starts_in_the_pass_that_plans_a_release() -> None:
    """priority.go (prioritySchedulerWithFilter, "only start tasks if there are no tasks of
    higher priorities to preempt"): once a release is planned, no lower task starts in that
    pass, even a preemptible one that fits."""
    pool = det_pool(
        [("agent1", 4, 0), ("agent2", 4, 0)],
        [
            Mock("medium", 4, MEDIUM, on="agent1"),
            Mock("keeper", 2, HIGH, on="agent2"),
            Mock("high", 4, HIGH),
            Mock("low", 1, LOW),
        ],
        preemption=True,
    )
    plan = schedule_pool(pool, 0)
    assert released(plan) == {"medium"}
    assert started(plan) == set()  # low would fit on agent2
    assert {p.task_id: p.code for p in plan.pending}["low"] == "behind_higher_priority"


# --------------------------------------------------------------------------- fitting_test.go
def books(*agents: tuple[str, int, int, int, int]) -> dict[str, AgentBook]:
    """(id, slots, slots used, max zero-slot containers, zero-slot containers), as
    Determined's NewMockAgent takes them."""
    return {
        a: AgentBook(a, slots, slots - used, aux=aux, max_aux=cap)
        for a, slots, used, cap, aux in agents
    }


FIND_FITS = [
    # (name, slots, agents, policy, blocked, expected agent)
    (
        "0-slot multiple fits, idle agents",
        0,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "0-slot multiple fits, idle agents, out-of-order",
        0,
        [("agent2", 4, 0, 100, 0), ("agent1", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "0-slot multiple fits, in-use agents",
        0,
        [("agent1", 4, 0, 100, 2), ("agent2", 4, 0, 100, 2)],
        "best",
        (),
        "agent1",
    ),
    (
        "0-slot multiple fits, in-use agents, out-of-order",
        0,
        [("agent2", 4, 0, 100, 2), ("agent1", 4, 0, 100, 2)],
        "best",
        (),
        "agent1",
    ),
    (
        "0-slot multiple fits, max zero slot containers",
        0,
        [("agent1", 4, 0, 2, 0), ("agent2", 4, 0, 4, 2)],
        "best",
        (),
        "agent1",
    ),
    (
        "0-slot multiple fits, max zero slot containers, out-of-order",
        0,
        [("agent2", 4, 0, 4, 2), ("agent1", 4, 0, 2, 0)],
        "best",
        (),
        "agent1",
    ),
    # Determined's label constraint is a pool choice in Corral; the agent without the label
    # is an agent the task must avoid.
    (
        "0-slot multiple fits, label hard constraint",
        0,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        ("agent1",),
        "agent2",
    ),
    (
        "0-slot single fit",
        0,
        [("agent1", 4, 0, 100, 1), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "0-slot single fit, max zero slot containers",
        0,
        [("agent1", 4, 0, 2, 1), ("agent2", 4, 0, 2, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "2-slot multiple fits",
        2,
        [("agent1", 2, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "1-slot multiple fits",
        1,
        [("agent1", 1, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "1-slot out-of-order multiple fits",
        1,
        [("agent1", 4, 0, 100, 0), ("agent2", 1, 0, 100, 0)],
        "best",
        (),
        "agent2",
    ),
    (
        "4-slot single fit",
        4,
        [("agent1", 4, 0, 100, 0), ("agent2", 1, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "4-slot multiple fits",
        1,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "2-slot multiple fits, in-use agents",
        2,
        [("agent1", 2, 0, 100, 0), ("agent2", 4, 2, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "1-slot multiple fits, in-use agents",
        1,
        [("agent1", 2, 1, 100, 0), ("agent2", 4, 1, 100, 0)],
        "worst",
        (),
        "agent2",
    ),
    (
        "1-slot multiple fits, in-use agents, out of order",
        1,
        [("agent1", 4, 1, 100, 0), ("agent2", 2, 1, 100, 0)],
        "worst",
        (),
        "agent1",
    ),
    (
        "1-slot multiple fits, in-use-agents, odd numbers",
        1,
        [("agent1", 2, 1, 100, 0), ("agent2", 5, 3, 100, 0)],
        "worst",
        (),
        "agent1",
    ),
    (
        "2-slot multiple fits, in-use-agents, odd numbers",
        2,
        [("agent1", 2, 0, 100, 0), ("agent2", 5, 3, 100, 0)],
        "worst",
        (),
        "agent1",
    ),
    (
        "4-slot multiple fits, unoccupied",
        4,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "worst",
        (),
        "agent1",
    ),
    (
        "4-slot multiple fits, one exact",
        4,
        [("agent1", 8, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "worst",
        (),
        "agent1",
    ),
    (
        "4-slot multiple fits, label hard constraint",
        4,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        ("agent1",),
        "agent2",
    ),
    (
        "2-slot multiple inexact fits",
        2,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "2-slot fit, single agent",
        2,
        [("agent1", 1, 0, 100, 0), ("agent2", 3, 0, 100, 0)],
        "best",
        (),
        "agent2",
    ),
    # Determined's SingleAgent requirement only forbids a multi-agent fit; where one agent
    # fits, the answer is the same without it (Corral has no such requirement).
    (
        "4-slot multiple fits, one exact, single agent",
        4,
        [("agent1", 8, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "worst",
        (),
        "agent1",
    ),
    (
        "2-slot multiple inexact fits, single agent",
        2,
        [("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0)],
        "best",
        (),
        "agent1",
    ),
    (
        "2-slot fit, no single agent requirement",
        2,
        [("agent1", 1, 0, 100, 0), ("agent2", 3, 0, 100, 0)],
        "best",
        (),
        "agent2",
    ),
]


@pytest.mark.parametrize(
    ("slots", "agents", "policy", "blocked", "expected"),
    [case[1:] for case in FIND_FITS],
    ids=[case[0] for case in FIND_FITS],
)
def test_find_fits(
    slots: int,
    agents: list[tuple[str, int, int, int, int]],
    policy: str,
    blocked: tuple[str, ...],
    expected: str,
) -> None:
    """fitting_test.go: TestFindFits (the SingleAgent cases give the same agent either way)"""
    fit = find_fit(books(*agents), slots, policy, blocked)
    assert fit is not None and fit[0].agent_id == expected


DEDICATED = [
    ("Simple satisfaction", 10, [1, 5, 10], [2]),
    ("Compound satisfaction", 16, [8, 7, 7, 4, 4, 4, 4], [3, 4, 5, 6]),
    ("Compound unsatisfaction", 16, [3, 3, 3, 3, 3], []),
    ("Slots needed should be a multiple of agent capacities", 12, [8, 8, 3, 3, 3], []),
    ("Not all agents need to be used to satisfy", 8, [4, 4, 4, 4, 4], [0, 1]),
]

# The heterogeneous cases (HeterogenousFit: true or false): Determined checks only how many
# agents the fit takes; (name, slots, capacities, allowed, agents taken).
DEDICATED_HETEROGENEOUS = [
    ("Heterogeneous fit - exact", 4, [2, 1, 1], True, 3),
    ("Heterogeneous fit - not allowed", 4, [2, 1, 1], False, 0),
    ("Heterogeneous fit - prefer homoegeneous fit", 4, [2, 1, 1, 1, 1], True, 4),
    ("Heterogeneous fit - extra slots not used", 4, [2, 1, 1, 1], True, 3),
    ("Heterogeneous fit - not enough consumes none", 8, [2, 1, 1], True, 0),
    ("Heterogeneous fit - one last test", 63, [32, 32, 16, 16, 8, 8, 4, 4, 2, 2, 1, 1], True, 6),
]


@pytest.mark.parametrize(
    ("slots", "capacities", "expected"),
    [case[1:] for case in DEDICATED],
    ids=[case[0] for case in DEDICATED],
)
def test_find_dedicated_agent_fits(slots: int, capacities: list[int], expected: list[int]) -> None:
    """fitting_test.go: TestFindDedicatedAgentFits (Determined checks only the count in the
    last case; we also say which: the lowest ids, as ties go)"""
    agents = books(*[(f"a{i:02d}", c, 0, 100, 0) for i, c in enumerate(capacities)])
    fit = find_fit(agents, slots, "worst")
    got = sorted(int(a.agent_id[1:]) for a in fit) if fit else []
    assert got == expected


@pytest.mark.parametrize(
    ("slots", "capacities", "allowed", "taken"),
    [case[1:] for case in DEDICATED_HETEROGENEOUS],
    ids=[case[0] for case in DEDICATED_HETEROGENEOUS],
)
def test_find_dedicated_agent_fits_heterogeneous(
    slots: int, capacities: list[int], allowed: bool, taken: int
) -> None:
    """fitting_test.go: TestFindDedicatedAgentFits, its heterogeneous cases (at
    determined-ai/determined c1e9c6d7b8); every agent taken is given all its slots, and they
    add up to the task's exactly"""
    agents = books(*[(f"a{i:02d}", c, 0, 100, 0) for i, c in enumerate(capacities)])
    fit = find_fit(agents, slots, "worst", (), allowed) or ()
    assert len(fit) == taken
    assert all(a.slots == agents[a.agent_id].slots for a in fit)
    assert sum(a.slots for a in fit) == (slots if taken else 0)


def test_a_pool_that_fits_only_heterogeneously_can_fit_with_the_setting() -> None:
    """The pool-shape check agrees with the fitting: the "one last test" pool can ever fit 63
    slots with ``allow_heterogeneous_fits`` (so the task waits or starts, never
    ``can_never_fit``), and without it the task is refused."""
    capacities = [32, 32, 16, 16, 8, 8, 4, 4, 2, 2, 1, 1]
    agents = tuple(Agent(agent_id=f"a{i:02d}", slots=c) for i, c in enumerate(capacities))
    task = DetTask(task_id="t", group_id="g", slots=63, submitted_at=0.0)
    for allowed in (True, False):
        scheduler = DetScheduler(type="priority", allow_heterogeneous_fits=allowed)
        pool = DetPoolSnapshot(pool="p", scheduler=scheduler, agents=agents, tasks=(task,))
        plan = schedule_pool(pool, 0)
        if allowed:
            assert [len(s.allocations) for s in plan.starts] == [6]
        else:
            assert {p.task_id: p.code for p in plan.pending} == {"t": "can_never_fit"}


@pytest.mark.parametrize(
    ("blocked", "expected"),
    [(("agent1", "agent2"), None), (("agent1",), "agent2"), (("agent2",), "agent1")],
)
def test_find_fit_disallowed_nodes(blocked: tuple[str, ...], expected: str | None) -> None:
    """fitting_test.go: TestFindFitDisallowedNodes (a 1-slot task with BlockedNodes)"""
    agents = books(("agent1", 4, 0, 100, 0), ("agent2", 4, 0, 100, 0))
    fit = find_fit(agents, 1, "best", blocked)
    assert (fit[0].agent_id if fit else None) == expected


def test_is_viable() -> None:
    """fitting_test.go: TestIsViable (slotsSatisfied: a 2-slot task fits an agent with 4 free
    slots and not one with 1; through find_fit, as Corral has no separate predicate)"""
    assert find_fit(books(("agent1", 4, 0, 100, 0)), 2, "best") is not None
    assert find_fit(books(("agent2", 1, 0, 100, 0)), 2, "best") is None
    assert find_fit(books(("agent4", 1, 0, 100, 0)), 2, "best") is None


# (slots, agent's slots, slots used, max zero-slot containers, zero-slot containers, best, worst)
FIT_SCORES = [
    (0, 0, 0, 0, 0, Fraction(0), Fraction(0)),
    (0, 0, 0, 0, 1, Fraction(0), Fraction(0)),
    (0, 0, 0, 2, 0, Fraction(1, 3), Fraction(1)),
    (0, 0, 0, 2, 1, Fraction(1, 2), Fraction(1, 2)),
    (1, 1, 1, 100, 0, Fraction(1), Fraction(0)),
    (1, 1, 0, 100, 0, Fraction(1, 2), Fraction(1)),
    (1, 9, 0, 100, 0, Fraction(1, 10), None),
    (1, 10, 1, 100, 0, Fraction(1, 10), None),
    (1, 10, 0, 100, 0, None, Fraction(1)),
    (1, 10, 5, 100, 0, None, Fraction(1, 2)),
]


@pytest.mark.parametrize(
    ("slots", "agent_slots", "used", "cap", "aux", "best", "worst"), FIT_SCORES
)
def test_best_fit_and_worst_fit_scores(
    slots: int,
    agent_slots: int,
    used: int,
    cap: int,
    aux: int,
    best: Fraction | None,
    worst: Fraction | None,
) -> None:
    """fitting_methods_test.go: TestBestFit and TestWorstFit, every assertion (None: the
    agent is in only one of the two tests). Determined's agents 2 run a zero-slot container
    with a limit of 0 (agent2 in both tests): score 0."""
    book = books(("agent", agent_slots, used, cap, aux))["agent"]
    if best is not None:
        assert score(book, slots, "best") == best
    if worst is not None:
        assert score(book, slots, "worst") == worst


def test_multi_agent_fit_when_no_single_agent_is_free_enough() -> None:
    """fitting.go findFits: a task no single agent can take now goes on idle agents whole,
    even where a larger (busy) agent could hold it alone later."""
    agents = books(("big", 8, 6, 100, 0), ("s1", 2, 0, 100, 0), ("s2", 2, 0, 100, 0))
    fit = find_fit(agents, 4, "best")
    assert fit is not None and sorted((a.agent_id, a.slots) for a in fit) == [("s1", 2), ("s2", 2)]


@pytest.mark.parametrize(
    ("capacities", "slots", "allowed", "expected"),
    [
        ([8, 4, 4], 12, True, [8, 4]),  # no one size covers 12: 8 + 4
        ([8, 4, 4], 12, False, None),  # without the setting: waits
        ([8, 6], 12, True, None),  # largest first, no backtracking (fitting.go's own comment)
        ([8, 8, 4], 16, True, [8, 8]),  # a homogeneous fit is tried first
    ],
)
def test_heterogeneous_fits(
    capacities: list[int], slots: int, allowed: bool, expected: list[int] | None
) -> None:
    """fitting.go findDedicatedAgentFits with allowHeterogeneousFits"""
    agents = books(*[(f"a{i}", c, 0, 100, 0) for i, c in enumerate(capacities)])
    fit = find_fit(agents, slots, "best", (), allowed)
    assert (sorted((a.slots for a in fit), reverse=True) if fit else None) == expected


def test_allow_heterogeneous_fits_reaches_the_scheduler() -> None:
    """master config ``allow_heterogeneous_fits`` is honoured (it used to be dropped)."""
    from corral.shared.resource_pools import SchedulerSettings
    from corral.shared.scheduling.build import det_scheduler

    scheduler = det_scheduler(
        SchedulerSettings(type="priority", fitting_policy="best", allow_heterogeneous_fits=True)
    )
    assert scheduler.allow_heterogeneous_fits
    pool = DetPoolSnapshot(
        pool="p",
        scheduler=scheduler,
        agents=(Agent(agent_id="a", slots=8), Agent(agent_id="b", slots=4)),
        tasks=(DetTask(task_id="t", group_id="g", slots=12, submitted_at=0.0),),
    )
    plan = schedule_pool(pool, 0)
    assert sorted(a.slots for a in plan.starts[0].allocations) == [4, 8]


def test_blocked_agents_are_avoided() -> None:
    """fitting_methods.go agentPermittedSatisfied: a task never goes on an agent it must avoid."""
    pool = det_pool([("agent1", 4, 0), ("agent2", 4, 0)], [Mock("t", 2, 42)])
    t = pool.tasks[0].model_copy(update={"blocked_agents": ("agent1",)})
    plan = schedule_pool(pool.model_copy(update={"tasks": (t,)}), 0)
    assert plan.starts[0].allocations[0].agent_id == "agent2"


# --------------------------------------------------------------------------- fair_share_test.go
def fair_pool(
    agents: list[tuple[str, int]],
    tasks: list[tuple[str, str, int, str | None]],
    *,
    max_slots: dict[str, int] | None = None,
    fixed: frozenset[str] = frozenset(),
    blocked: dict[str, tuple[str, ...]] | None = None,
    kind: str = "fair_share",
    **weights: float,
) -> DetPoolSnapshot:
    """tasks: (id, group, slots, agent it runs on or None), in submission order;
    ``max_slots``: per group; ``fixed``: the tasks that are not preemptible; ``blocked``: the
    agents a task must avoid."""
    out = []
    for i, (tid, group, slots, on) in enumerate(tasks):
        allocations = () if on is None else (SlotAllocation(agent_id=on, slots=slots),)
        out.append(
            DetTask(
                task_id=tid,
                group_id=group,
                slots=slots,
                weight=weights.get(group, 1.0),
                max_slots=(max_slots or {}).get(group),
                preemptible=tid not in fixed,
                blocked_agents=(blocked or {}).get(tid, ()),
                submitted_at=float(i),
                started_at=float(i) if on else None,
                allocations=allocations,
            )
        )
    return DetPoolSnapshot(
        pool="p",
        scheduler=DetScheduler(type=kind),
        agents=tuple(Agent(agent_id=a, slots=s) for a, s in agents),
        tasks=tuple(out),
    )


def test_fair_share_weights() -> None:
    """fair_share_test.go: TestFairShareWeights (8 slots, weights 10 and 30: 2 and 6)"""
    tasks = [(f"task{i}", "group1", 1, None) for i in (1, 2, 3)]
    tasks += [(f"task{i}", "group2", 1, None) for i in range(4, 11)]
    plan = schedule_pool(fair_pool([("agent", 8)], tasks, group1=10, group2=30), 0)
    assert started(plan) == {"task1", "task2", "task4", "task5", "task6", "task7", "task8", "task9"}
    assert released(plan) == set()


def test_fair_share_multi_slot() -> None:
    """fair_share_test.go: TestFairShareMultiSlot"""
    tasks = [("task1", "group1", 4, None), ("task2", "group2", 4, None)]
    plan = schedule_pool(fair_pool([("agent1", 4), ("agent2", 4)], tasks), 0)
    assert started(plan) == {"task1", "task2"} and released(plan) == set()


def test_fair_share_multi_slot_deadlock() -> None:
    """fair_share_test.go: TestFairShareMultiSlotDeadlock"""
    tasks = [("task1", "group1", 2, None), ("task2", "group2", 2, None)]
    plan = schedule_pool(fair_pool([("agent", 2)], tasks), 0)
    assert started(plan) == {"task1"} and released(plan) == set()


def test_fair_share_big_task() -> None:
    """fair_share_test.go: TestFairShareBigTask: a task larger than the pool does not hold
    the others back (Corral also says it can never fit)."""
    tasks = [("task1", "group1", 5, None), ("task2", "group2", 4, None)]
    plan = schedule_pool(fair_pool([("agent", 4)], tasks), 0)
    assert started(plan) == {"task2"} and released(plan) == set()
    assert {p.task_id: p.code for p in plan.pending} == {"task1": "can_never_fit"}


def test_fair_share_active_tasks() -> None:
    """fair_share_test.go: TestFairShareActiveTasks"""
    tasks = [
        ("task1", "group1", 3, None),
        ("task2", "group2", 1, None),
        ("task3", "group2", 1, "agent2"),
        ("task4", "group3", 4, None),
        ("task5", "group4", 1, None),
    ]
    plan = schedule_pool(fair_pool([("agent1", 4), ("agent2", 3)], tasks), 0)
    assert started(plan) == {"task1", "task2", "task5"} and released(plan) == set()


def test_fair_share_max_slots() -> None:
    """fair_share_test.go: TestFairShareMaxSlots: group1 may hold one slot of four, so group2
    gets the other three."""
    tasks = [(f"task{i}", "group1", 1, None) for i in (1, 2, 3, 4)]
    tasks += [(f"task{i}", "group2", 1, None) for i in (5, 6, 7, 8)]
    plan = schedule_pool(fair_pool([("agent", 4)], tasks, max_slots={"group1": 1}), 0)
    assert started(plan) == {"task1", "task5", "task6", "task7"} and released(plan) == set()
    codes = {p.task_id: p.code for p in plan.pending}
    assert {t for t, c in codes.items() if c == "at_max_slots"} == {"task2", "task3", "task4"}
    assert codes["task8"] == "over_fair_share"  # group2 holds its share, 3


def test_fair_share_max_slots_release_allocated_tasks() -> None:
    """fair_share_test.go: TestFairShareMaxSlotsReleaseAllocatedTasks: a group running four
    one-slot tasks with max_slots 2 gives two back, though nobody else waits.

    DELIBERATE DIFFERENCE in which two: Determined releases task1 and task2 (the oldest, in
    queue order); Corral the newest, task4 and task3 (they have done the least work, and
    Corral's fair share releases newest first everywhere)."""
    tasks = [(f"task{i}", "group1", 1, "agent") for i in (1, 2, 3, 4)]
    plan = schedule_pool(fair_pool([("agent", 4)], tasks, max_slots={"group1": 2}), 0)
    assert started(plan) == set()
    assert released(plan) == {"task3", "task4"}  # Determined: task1, task2
    assert all("max_slots (2)" in r.reason for r in plan.releases)


def test_fair_share_max_slots_release_keeps_non_preemptible() -> None:
    """Beside TestFairShareMaxSlotsReleaseAllocatedTasks: a non-preemptible task is never
    released for max_slots (the newest preemptible ones go instead)."""
    tasks = [(f"task{i}", "group1", 1, "agent") for i in (1, 2, 3, 4)]
    pool = fair_pool([("agent", 4)], tasks, max_slots={"group1": 2}, fixed=frozenset({"task4"}))
    assert released(schedule_pool(pool, 0)) == {"task2", "task3"}


def test_fair_share_unscheduled() -> None:
    """fair_share_test.go: TestFairShareUnscheduled: the group already holds its max_slots
    (2), so its waiting two-slot task neither starts nor makes room for itself."""
    tasks = [
        ("task1", "group1", 2, None),
        ("task2", "group1", 1, "agent1"),
        ("task3", "group1", 1, "agent2"),
    ]
    pool = fair_pool([("agent1", 2), ("agent2", 2)], tasks, max_slots={"group1": 2})
    plan = schedule_pool(pool, 0)
    assert started(plan) == set() and released(plan) == set()
    assert {p.task_id: p.code for p in plan.pending} == {"task1": "at_max_slots"}


@pytest.mark.parametrize("fixed", ["task2", "task1"])
def test_fair_share_honors_non_preemptible_in_a_group(fixed: str) -> None:
    """fair_share_test.go: TestFairShareHonorsNonPreemptibleInAGroup (both orders): two
    one-slot tasks of a group hold a one-slot agent; the preemptible one is released."""
    tasks = [("task1", "group1", 1, "agent"), ("task2", "group1", 1, "agent")]
    pool = fair_pool([("agent", 1)], tasks, max_slots={"group1": 2}, fixed=frozenset({fixed}))
    plan = schedule_pool(pool, 0)
    assert started(plan) == set()
    assert released(plan) == {"task1", "task2"} - {fixed}


def test_fair_share_a_task_above_max_slots_can_never_start() -> None:
    """Determined's experiment-config reference: slots_per_trial above max_slots is an error.
    Corral refuses such a task (can_never_fit) and the group's other tasks go on."""
    tasks = [("big", "group1", 3, None), ("small", "group1", 1, None)]
    plan = schedule_pool(fair_pool([("agent", 4)], tasks, max_slots={"group1": 2}), 0)
    assert started(plan) == {"small"}
    assert {p.task_id: p.code for p in plan.pending} == {"big": "can_never_fit"}


def test_round_robin_ignores_max_slots() -> None:
    """round_robin_test.go (last in 10667f1838^, before Determined removed round robin):
    TestRoundRobinScheduler: round robin ignores max_slots (1 here): all three tasks start."""
    agents = [("agent1", 4), ("agent2", 4), ("agent3", 4)]
    tasks = [
        ("task1", "group1", 4, None),
        ("task2", "group1", 1, None),
        ("task3", "group1", 0, None),
    ]
    pool = fair_pool(agents, tasks, max_slots={"group1": 1}, kind="round_robin")
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task1", "task2", "task3"} and released(plan) == set()


def test_priority_ignores_max_slots() -> None:
    """priority.go reads no group max_slots (only fair_share.go and scaling.go do): a
    priority pool starts a group's tasks past it."""
    tasks = [(f"task{i}", "group1", 1, None) for i in (1, 2, 3)]
    pool = fair_pool([("agent", 4)], tasks, max_slots={"group1": 1}, kind="priority")
    assert started(schedule_pool(pool, 0)) == {"task1", "task2", "task3"}


# Determined's cases without groups: each task is its own job (group), named after it.
def test_fair_share_nil_group() -> None:
    """fair_share_test.go: TestFairShareNilgroup: five slots held on a four-slot agent; the
    task over its share gives its slots back."""
    tasks = [("task1", "task1", 4, "agent"), ("task2", "task2", 1, "agent")]
    plan = schedule_pool(fair_pool([("agent", 4)], tasks), 0)
    assert started(plan) == set() and released(plan) == {"task1"}


def test_fair_share_preemptible() -> None:
    """fair_share_test.go: TestFairSharePreemptible"""
    tasks = [("task1", "task1", 1, "agent"), ("task2", "task2", 1, "agent")]
    plan = schedule_pool(fair_pool([("agent", 1)], tasks), 0)
    assert started(plan) == set() and released(plan) == {"task2"}


@pytest.mark.parametrize("fixed", ["task2", "task1"])
def test_fair_share_honors_non_preemptible_nil_group(fixed: str) -> None:
    """fair_share_test.go: TestFairShareHonorsNonPreemptibleNilGroup (both orders): slots a
    non-preemptible task holds are its own, whatever the shares."""
    tasks = [("task1", "task1", 1, "agent"), ("task2", "task2", 1, "agent")]
    plan = schedule_pool(fair_pool([("agent", 1)], tasks, fixed=frozenset({fixed})), 0)
    assert started(plan) == set()
    assert released(plan) == {"task1", "task2"} - {fixed}


def test_fair_share_blocklist() -> None:
    """fair_share_test.go: TestFairShareBlocklist"""
    tasks = [("task0.1", "group0", 1, None), ("task1.1", "group1", 1, None)]
    pool = fair_pool([("agent", 1)], tasks, blocked={"task0.1": ("agent",)})
    plan = schedule_pool(pool, 0)
    assert started(plan) == {"task1.1"} and released(plan) == set()


def test_fair_share_blocklist_multiple() -> None:
    """fair_share_test.go: TestFairShareBlocklistMultiple

    DELIBERATE DIFFERENCE in form only. Determined asks to allocate both eight-slot tasks
    though only one can be placed (its allocation step then places one); Corral plans only the
    start it can place, and the other waits."""
    agents = [(f"agent{i}", 4) for i in range(4)]
    tasks = [("task0.1", "group0", 8, None), ("task1.1", "group1", 8, None)]
    avoid = ("agent2", "agent3")
    plan = schedule_pool(fair_pool(agents, tasks, blocked={t[0]: avoid for t in tasks}), 0)
    assert started(plan) == {"task0.1"} and released(plan) == set()  # Determined: both asked
    assert {p.task_id: p.code for p in plan.pending} == {"task1.1": "pool_full"}


def test_fair_share_blocklist_preemptible() -> None:
    """fair_share_test.go: TestFairShareBlocklistPreemptible

    DELIBERATE DIFFERENCE in timing only. Determined releases task3.1 and asks to allocate
    task2.1 in the same call (its mock agents count the running tasks' slots as free); Corral
    releases task3.1 and starts task2.1 on the freed slot in the next pass."""
    tasks = [
        ("task0.1", "task0", 1, None),
        ("task1.1", "task1", 1, "agent0"),
        ("task2.1", "task2", 1, None),
        ("task3.1", "task3", 1, "agent1"),
    ]
    blocked = {"task0.1": ("agent0", "agent1"), "task2.1": ("agent0",)}
    pool = fair_pool([("agent0", 1), ("agent1", 1)], tasks, blocked=blocked)
    plan = schedule_pool(pool, 0)
    assert started(plan) == set() and released(plan) == {"task3.1"}
    assert {p.task_id: p.code for p in plan.pending}["task2.1"] == "waiting_for_preemption"
    after = schedule_pool(commit(pool, plan, gone={"task3.1"}), 1)
    assert started(after) == {"task2.1"}


def test_fair_share_blocklist_dont_preempt() -> None:
    """fair_share_test.go: TestFairShareBlocklistDontPreempt: tasks that may not use the only
    agent claim no share, so nothing is released for them."""
    tasks = [(f"task{i}.1", f"task{i}", 1, None) for i in (0, 1, 2)]
    tasks.append(("task3.1", "task3", 1, "agent0"))
    blocked = {f"task{i}.1": ("agent0",) for i in (0, 1, 2)}
    plan = schedule_pool(fair_pool([("agent0", 1)], tasks, blocked=blocked), 0)
    assert started(plan) == set() and released(plan) == set()


def test_fair_share_blocklist_equal() -> None:
    """fair_share_test.go: TestFairShareBlocklistEqual"""
    tasks = [("task0.1", "task0", 1, None)]
    tasks += [(f"task{i}.1", f"task{i}", 1, "agent0") for i in (1, 2, 3)]
    pool = fair_pool([("agent0", 1)], tasks, blocked={"task0.1": ("agent0",)})
    plan = schedule_pool(pool, 0)
    assert started(plan) == set() and released(plan) == {"task2.1", "task3.1"}
