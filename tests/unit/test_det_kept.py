"""A Determined priority pass kept between passes (``det_kept``) against the full pass, over
queues where trials keep arriving while the pool is full, and tasks start, finish, are
preempted, and agents come: every pass's starts, releases and answers (in their order) equal
the full pass's, and the kept pass is taken for most of them."""

from __future__ import annotations

import random

import pytest

from corral.shared.scheduling import det_kept
from corral.shared.scheduling.determined import run_pass
from corral.shared.scheduling.model import Agent, DetPoolSnapshot, DetScheduler, DetTask


def _snapshot(
    agents: int, tasks: list[DetTask], preemption: bool, slots: int = 2
) -> DetPoolSnapshot:
    # The agents are new objects each pass, as the ledger's snapshot makes them.
    return DetPoolSnapshot(
        pool="compute",
        scheduler=DetScheduler(type="priority", preemption=preemption),
        agents=tuple(Agent(agent_id=f"a{i}", slots=slots) for i in range(agents)),
        tasks=tuple(tasks),
    )


def _task(rng: random.Random, index: int, now: float, levels: tuple[int | None, ...]) -> DetTask:
    return DetTask(
        task_id=f"t{index:04d}",
        group_id=rng.choice(("sweep", "other")),
        slots=rng.choice((1, 1, 2)),
        priority=rng.choice(levels),
        preemptible=rng.random() < 0.8,
        submitted_at=now,
    )


def _walk(
    seed: int, preemption: bool, levels: tuple[int | None, ...], monkeypatch: pytest.MonkeyPatch
) -> int:
    """A pool's life of 400 passes; how many the kept pass served."""
    served: list[bool] = []
    extended = det_kept.extended

    def counted(pool: DetPoolSnapshot) -> object:
        found = extended(pool)
        served.append(found is not None)
        return found

    monkeypatch.setattr(det_kept, "extended", counted)
    det_kept._KEPT.clear()
    rng = random.Random(seed)
    tasks: list[DetTask] = []
    agents, made = 2, 0
    for step in range(400):
        now = float(step)
        roll = rng.random()
        if roll < 0.6:  # trials arrive (at the end of the queue, mostly)
            for _ in range(rng.randint(1, 3)):
                made += 1
                tasks.append(_task(rng, made, now, levels))
        elif roll < 0.75:  # a running or stopping task ends
            holding = [t for t in tasks if t.allocations]
            if holding:
                tasks.remove(rng.choice(holding))
        elif roll < 0.78 and agents < 6:
            agents += 1
        snapshot = _snapshot(agents, tasks, preemption)
        kept = run_pass(snapshot)
        full = run_pass(snapshot, keep=False)
        assert kept.starts == full.starts and kept.releases == full.releases
        assert list(kept.pending.items()) == list(full.pending.items())
        # Commit, as the ledger does: started tasks hold their slots, released ones stop.
        by_id = {t.task_id: i for i, t in enumerate(tasks)}
        for start in full.starts:
            i = by_id[start.task_id]
            tasks[i] = tasks[i].model_copy(
                update={"allocations": start.allocations, "started_at": now}
            )
        for release in full.releases:
            i = by_id[release.task_id]
            tasks[i] = tasks[i].model_copy(update={"stopping": True})
    return sum(served)


@pytest.mark.parametrize("preemption", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_passes_decide_as_full_passes_over_one_level(
    seed: int, preemption: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = _walk(seed, preemption, (None,), monkeypatch)
    # The kept pass did serve: a full pool, trials arriving. With preemption on, an older
    # trial preempts a newer one running at its level, and such a pass is not kept.
    assert served >= (15 if preemption else 200)


@pytest.mark.parametrize("seed", [4, 5])
def test_kept_passes_decide_as_full_passes_over_several_levels(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Higher and lower priorities arriving: a newcomer at another level than the kept
    queue's, or ahead of it, runs the full pass."""
    _walk(seed, True, (None, None, None, 10, 60), monkeypatch)


def test_a_newcomer_of_a_size_not_waiting_runs_the_full_pass() -> None:
    """It may fit where the waiting sizes do not: here a 1-slot task fits the slot a 2-slot
    queue leaves free."""
    det_kept._KEPT.clear()
    running = DetTask(
        task_id="r",
        group_id="g",
        slots=1,
        submitted_at=0.0,
        allocations=({"agent_id": "a0", "slots": 1},),  # type: ignore[arg-type]
    )
    queue = [
        DetTask(task_id=f"w{i}", group_id="g", slots=2, submitted_at=1.0 + i) for i in range(3)
    ]
    first = run_pass(_snapshot(1, [running, *queue], preemption=False))
    assert not first.starts and "compute" in det_kept._KEPT
    small = DetTask(task_id="s", group_id="g", slots=1, submitted_at=9.0)
    second = run_pass(_snapshot(1, [running, *queue, small], preemption=False))
    assert [s.task_id for s in second.starts] == ["s"]
    assert "compute" not in det_kept._KEPT  # it started one: nothing kept


def test_determined_all_slots_allocated_then_trials_of_the_waiting_size_arrive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """priority_test.go: TestPrioritySchedulingPreemptionDisabledAllSlotsAllocated, carried on:
    every slot of two 4-slot agents is held and a 4-slot task waits at the low level; more
    4-slot trials arrive at that level (served by the kept pass, told what the full pass
    tells), then a 1-slot one (a size not waiting: the full pass)."""
    served: list[bool] = []
    extended = det_kept.extended
    monkeypatch.setattr(
        det_kept, "extended", lambda pool: served.append(found := extended(pool)) or found
    )
    det_kept._KEPT.clear()
    low, high = 50, 40

    def held(tid: str, slots: int, priority: int, agent: str) -> DetTask:
        alloc = ({"agent_id": agent, "slots": slots},)
        return DetTask.model_validate(
            {"task_id": tid, "group_id": tid, "slots": slots, "priority": priority,
             "submitted_at": 0.0, "allocations": alloc}
        )  # fmt: skip

    tasks = [
        DetTask(task_id="task1", group_id="task1", slots=4, priority=low, submitted_at=1.0),
        held("task2", 1, low, "a1"),
        held("task3", 1, high, "a1"),
        held("task4", 1, high, "a1"),
        held("task5", 4, high, "a0"),
        held("task6", 1, low, "a1"),
    ]
    for step, (tid, slots) in enumerate([("task7", 4), ("task8", 4), ("task9", 1)]):
        tasks.append(
            DetTask(task_id=tid, group_id=tid, slots=slots, priority=low, submitted_at=10.0 + step)
        )
        snapshot = _snapshot(2, tasks, preemption=False, slots=4)
        kept, full = run_pass(snapshot), run_pass(snapshot, keep=False)
        assert not full.starts and list(kept.pending.items()) == list(full.pending.items())
    assert [found is not None for found in served] == [False, True, False]
