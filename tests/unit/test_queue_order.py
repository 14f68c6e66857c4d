"""The machine-pool queue's order kept between passes (``queue_order.ordered``) against the
order worked out afresh, over queues where workloads arrive, leave, come back and change."""

from __future__ import annotations

import random
from typing import Any

import pytest

from corral.shared.scheduling import (
    MachineTypeState,
    PartitionState,
    PoolSnapshot,
    RuleSpec,
    Workload,
    queue_order,
)
from corral.shared.scheduling.partitions import PoolState

RULES = (
    RuleSpec(selector="project=a", priority=3),
    RuleSpec(selector="workload-type=service", priority=2, quota=2),
    RuleSpec(selector="", priority=1),
)


def _types(shared: bool) -> tuple[MachineTypeState, ...]:
    if shared:  # every machine type the same rule objects (a pool file's defaults)
        parts = (PartitionState(name="p", size=4, rules=RULES),)
        return tuple(
            MachineTypeState(machine_type=t, market="spot", partitions=parts) for t in ("a", "b")
        )
    return (
        MachineTypeState(
            machine_type="a",
            market="reserved",
            partitions=(PartitionState(name="p", size=2, rules=RULES[:1]),),
        ),
        MachineTypeState(
            machine_type="b",
            market="spot",
            partitions=(
                PartitionState(name="p", size=2, rules=RULES[1:]),
                PartitionState(name="q", size=1),
            ),
        ),
    )


def _workload(rng: random.Random, index: int) -> Workload:
    return Workload(
        workload_id=f"w{index}",
        workload_type=rng.choice(("job", "job", "service")),
        labels=rng.choice(({}, {"project": "a"}, {"project": "b"})),
        priority=rng.randint(0, 3),
        on_full=rng.choice(("fallback", "preempt")),
        num_nodes=rng.randint(1, 2),
        group_order=rng.choice((("a", "b"), ("b",), ("a",), ("z",))),
        submitted_at=float(rng.randint(0, 40)),  # ties, broken by id
    )


def _changed(rng: random.Random, w: Workload) -> Workload:
    """Another object for the same workload: narrowed, reprioritised, placed or back."""
    change = rng.choice(("narrowed", "priority", "placed", "back"))
    if change == "narrowed":
        return w.model_copy(update={"group_order": w.group_order[-1:]})
    if change == "priority":
        return w.model_copy(update={"priority": w.priority + 1})
    if change == "placed":
        return w.model_copy(update={"phase": "running", "started_at": 1.0})
    return w.model_copy(update={"phase": "pending", "preempted_by": "w0"})


def _seen(state: PoolState, out: tuple[list[Workload], list[Any]]) -> list[Any]:
    """The order as objects, and each verdict key with its label id read back as labels."""
    waiting, kinds = out
    return [
        (id(w), state._label_keys[lid], rest) for w, (lid, rest) in zip(waiting, kinds, strict=True)
    ]


@pytest.mark.parametrize("shared", [True, False])
def test_the_kept_order_is_the_order_worked_out_afresh_pass_after_pass(
    shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7 if shared else 8)
    types = _types(shared)
    ordered_afresh = queue_order._afresh
    carried = []

    def counted(state: PoolState, waiting: list[Workload], *rest: Any) -> Any:
        carried.append(len(waiting) < len(state.pending()))
        return ordered_afresh(state, waiting, *rest)

    monkeypatch.setattr(queue_order, "_afresh", counted)
    queue_order._KEPT.clear()
    ids = iter(range(10**6))
    queue = {w.workload_id: w for w in (_workload(rng, next(ids)) for _ in range(60))}
    for _ in range(300):
        for _ in range(rng.randint(0, 3)):  # arrivals
            w = _workload(rng, next(ids))
            queue[w.workload_id] = w
        for wid in rng.sample(sorted(queue), k=min(len(queue), rng.randint(0, 3))):
            if rng.random() < 0.3:
                del queue[wid]  # finished
            else:
                queue[wid] = _changed(rng, queue[wid])
        snap = PoolSnapshot(pool="train", machine_types=types, workloads=tuple(queue.values()))
        kept_state, afresh_state = PoolState(snap), PoolState(snap)
        kept = queue_order.ordered(kept_state)
        afresh = queue_order.ordered(afresh_state, keep=False)
        assert _seen(kept_state, kept) == _seen(afresh_state, afresh)
    # Most passes carried the order over (a newcomer or a changed workload put in its place).
    assert sum(carried) > 150, sum(carried)


def test_other_rules_order_afresh() -> None:
    """The same workloads under another pool file's rules are not read from the kept order."""
    rng = random.Random(3)
    queue_order._KEPT.clear()
    workloads = tuple(_workload(rng, i) for i in range(40))
    first = PoolState(PoolSnapshot(pool="train", machine_types=_types(True), workloads=workloads))
    before = queue_order.ordered(first)[0]
    other = PoolSnapshot(pool="train", machine_types=_types(False), workloads=workloads)
    kept, afresh = PoolState(other), PoolState(other)
    after = queue_order.ordered(kept)
    assert _seen(kept, after) == _seen(afresh, queue_order.ordered(afresh, keep=False))
    assert after[0] != before  # the rules do order these workloads otherwise
