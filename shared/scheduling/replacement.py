"""Replacement: move work that fell back to a lower-ranked group up to a better one.

A running workload with ``enable_replacement`` that holds a machine of a lower-ranked group is
moved, one machine at a time, to a partition of a better-ranked group when that partition has
had free room for at least the workload's ``replacement_threshold_s`` (the snapshot says since
when, per partition) and has room for it now, after this pass's placements. Each move brings
the better machine up first and only then retires the worse one, so the workload never runs
short; until the old machine is retired both count as held, so no partition goes over size.

Limits: at most ``budget`` workloads are being replaced at once (the snapshot's in-flight
count included), and a workload replaced less than ``guard_s`` ago is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import Machine, Replacement, Workload
from .partitions import Book, PoolState


def plan_replacements(
    state: PoolState, now: float, *, budget: int, guard_s: float
) -> list[Replacement]:
    """Replacement moves for this pass, best-placed workloads first (see the module doc)."""
    slots = budget - state.snapshot.replacements_in_flight
    out: list[Replacement] = []
    eligible = [w for w in state.workloads.values() if _eligible(state, w, now, guard_s)]
    eligible.sort(key=lambda w: (-w.priority, w.submitted_at, w.workload_id))
    for workload in eligible:
        if slots <= 0:
            break
        moves = _moves(state, workload, now)
        if moves:
            out.extend(moves)
            slots -= 1
    return out


def _eligible(state: PoolState, workload: Workload, now: float, guard_s: float) -> bool:
    if workload.phase != "running" or not workload.enable_replacement:
        return False
    if workload.workload_id in state.stopping:
        return False  # being preempted in this very pass
    last = workload.last_replaced_at
    return last is None or now - last >= guard_s


def _moves(state: PoolState, workload: Workload, now: float) -> list[Replacement]:
    order = list(dict.fromkeys(workload.group_order))
    rank = {machine_type: i for i, machine_type in enumerate(order)}
    worst_first = sorted(
        state.machines_of.get(workload.workload_id, ()),
        key=lambda m: (-rank.get(m.machine_type, -1), m.machine_id),
    )
    out = []
    for machine in worst_first:
        here = rank.get(machine.machine_type)
        if not here:
            continue  # already on its best group (0), or on a type it does not rank (None)
        book = _ripe_book(state, workload, order[:here], now)
        if book is not None:
            out.append(_move(state, workload, machine, book, now))
    return out


def _ripe_book(
    state: PoolState, workload: Workload, better: Sequence[str], now: float
) -> Book | None:
    for machine_type in better:
        for book in state.books_of_type.get(machine_type, ()):
            since = book.free_since
            if since is None or now - since < workload.replacement_threshold_s:
                continue
            if state.room(book, workload) > 0:
                return book
    return None


def _move(
    state: PoolState, workload: Workload, machine: Machine, book: Book, now: float
) -> Replacement:
    [node] = state.take(book, workload, 1)
    free_for_s = now - (book.free_since or now)
    return Replacement(
        workload_id=workload.workload_id,
        bring_up=node,
        retire_machine_id=machine.machine_id,
        retire_machine_type=machine.machine_type,
        reason=(
            f"{book.label} has had free room for {free_for_s:.0f} s "
            f"(threshold {workload.replacement_threshold_s:.0f} s) and ranks above "
            f"{machine.machine_type}: bring up the better machine, then retire "
            f"{machine.machine_id}"
        ),
    )
