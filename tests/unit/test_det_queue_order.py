"""A Determined pool's queue orders kept between passes (``determined.SUBMITTED`` and
``determined.BY_PRIORITY``, :class:`~corral.shared.scheduling.queue_order.KeptOrders`)
against the orders sorting gives, and a pass's plan with them kept against one without,
over queues where tasks arrive, start, stop, change and come back."""

from __future__ import annotations

import random
from typing import Any

import pytest

from corral.shared.scheduling import (
    Agent,
    DetPoolSnapshot,
    DetScheduler,
    DetTask,
    SlotAllocation,
    determined,
    schedule_pool,
)
from corral.shared.scheduling.queue_order import KeptOrders

DEFAULT = 42


def _task(rng: random.Random, index: int) -> DetTask:
    return DetTask(
        task_id=f"t{index}",
        group_id=f"g{rng.randint(0, 5)}",
        slots=rng.choice((0, 1, 1, 2, 4, 8)),
        priority=rng.choice((None, None, 10, 42, 60)),
        preemptible=rng.random() < 0.7,
        submitted_at=float(rng.randint(0, 50)),  # ties, broken by id
    )


def _changed(rng: random.Random, t: DetTask) -> DetTask:
    """Another object for the same task: reprioritised, started, stopping or sent back."""
    change = rng.choice(("priority", "started", "stopping", "back"))
    if change == "priority":
        return t.model_copy(update={"priority": rng.choice((None, 5, 42, 90))})
    if change == "started" and t.slots:
        alloc = (SlotAllocation(agent_id="ag1", slots=min(t.slots, 8)),)
        return t.model_copy(update={"allocations": alloc, "started_at": 60.0})
    if change == "stopping" and t.allocations:
        return t.model_copy(update={"stopping": True})
    return t.model_copy(update={"allocations": (), "stopping": False, "started_at": None})


def _queues(rng: random.Random, passes: int) -> Any:
    """The pool's tasks pass after pass: a few arrive, finish or change each pass."""
    ids = iter(range(10**6))
    queue = {t.task_id: t for t in (_task(rng, next(ids)) for _ in range(80))}
    for _ in range(passes):
        for _ in range(rng.randint(0, 3)):
            t = _task(rng, next(ids))
            queue[t.task_id] = t
        for tid in rng.sample(sorted(queue), k=min(len(queue), rng.randint(0, 4))):
            if rng.random() < 0.3:
                del queue[tid]
            else:
                queue[tid] = _changed(rng, queue[tid])
        yield list(queue.values())


def test_kept_orders_are_the_sorted_orders_pass_after_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(11)
    carried = []
    real_afresh = KeptOrders._afresh

    def counted(self: KeptOrders[Any], items: list[Any], rules: Any) -> Any:
        carried.append(len(items) < len(tasks))
        return real_afresh(self, items, rules)

    monkeypatch.setattr(KeptOrders, "_afresh", counted)
    determined.SUBMITTED.kept.clear()
    determined.BY_PRIORITY.kept.clear()
    for tasks in _queues(rng, 300):
        rng.shuffle(tasks)  # the order they are given in does not matter
        by_submission, keys = determined.SUBMITTED.ordered("gpu", None, tasks)
        assert by_submission == sorted(tasks, key=lambda t: (t.submitted_at, t.task_id))
        assert keys == [(t.submitted_at, t.task_id) for t in by_submission]
        by_priority, keys = determined.BY_PRIORITY.ordered(("gpu", "slots"), DEFAULT, tasks)
        number = [DEFAULT if t.priority is None else t.priority for t in by_priority]
        assert by_priority == sorted(
            tasks,
            key=lambda t: (
                DEFAULT if t.priority is None else t.priority,
                t.submitted_at,
                t.task_id,
            ),
        )
        assert [k[0] for k in keys] == number
    # Most passes carried the orders over (only newcomers keyed and put in their places).
    assert sum(carried) > 400, sum(carried)


def test_other_rules_order_afresh() -> None:
    """Under another default priority the kept order is not read."""
    rng = random.Random(5)
    determined.BY_PRIORITY.kept.clear()
    tasks = [_task(rng, i) for i in range(40)]
    low = determined.BY_PRIORITY.ordered("gpu", 1, tasks)[0]
    high = determined.BY_PRIORITY.ordered("gpu", 99, tasks)[0]
    assert low != high  # the default does order these tasks otherwise
    assert high == determined.BY_PRIORITY.ordered("gpu", 99, tasks, keep=False)[0]


@pytest.mark.parametrize("kind", ["priority", "fair_share", "round_robin"])
@pytest.mark.parametrize("preemption", [False, True])
def test_a_pass_with_its_orders_kept_plans_as_one_without(kind: str, preemption: bool) -> None:
    rng = random.Random(hash((kind, preemption)) % 1000)
    determined.SUBMITTED.kept.clear()
    determined.BY_PRIORITY.kept.clear()
    agents = tuple(Agent(agent_id=f"ag{i}", slots=8) for i in range(1, 4))
    scheduler = DetScheduler(type=kind, preemption=preemption)  # type: ignore[arg-type]
    for tasks in _queues(rng, 80):
        snap = DetPoolSnapshot(pool="gpu", scheduler=scheduler, agents=agents, tasks=tuple(tasks))
        kept = schedule_pool(snap, 100.0)
        saved = (dict(determined.SUBMITTED.kept), dict(determined.BY_PRIORITY.kept))
        determined.SUBMITTED.kept.clear()
        determined.BY_PRIORITY.kept.clear()
        afresh = schedule_pool(snap, 100.0)
        determined.SUBMITTED.kept.update(saved[0])
        determined.BY_PRIORITY.kept.update(saved[1])
        assert kept.model_dump_json() == afresh.model_dump_json()
