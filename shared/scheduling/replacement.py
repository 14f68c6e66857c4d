"""Replacement: move work that fell back to a lower-ranked group up to a better one.

A running workload with ``enable_replacement`` that holds a machine of a lower-ranked group is
moved, one machine at a time, to a partition of a better-ranked group when that partition has
had free room for at least the workload's ``replacement_threshold_s`` (the snapshot says since
when, per partition) and has room for it now, after this pass's placements. Each move brings
the better machine up first and only then retires the worse one, so the workload never runs
short; until the old machine is retired both count as held, so no partition goes over size.

One exception to the threshold: a better partition whose idle machine is past its idle limit
(idle reaping would end it in this very pass) is ripe at once, and the work moves onto that
machine. Otherwise the pool pays for the better machine while it sits idle, ends it, and
launches another for the same move once the threshold passes, running the worse machine all
the while.

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
    if slots <= 0:
        return out
    eligible = [
        w
        for w in state.workloads.values()
        if w.enable_replacement and _eligible(state, w, now, guard_s)
    ]
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
            ripe = _waited(book, workload, now) or _reapable(state, book, now)
            if ripe and state.room(book, workload) > 0:
                return book
    return None


def _waited(book: Book, workload: Workload, now: float) -> bool:
    """Whether the partition has had free room for the workload's threshold."""
    since = book.free_since
    return since is not None and now - since >= workload.replacement_threshold_s


def _reapable(state: PoolState, book: Book, now: float) -> bool:
    """Whether an idle machine of this partition is past its type's idle limit (the
    comparison idle reaping makes, :func:`.reaping.choose_reaps`)."""
    limit = state.types[book.machine_type].max_idle_s
    if limit is None:
        return False
    for machine_id in book.idle:
        since = state.machines[machine_id].idle_since
        if since is not None and now - since > limit:
            return True
    return False


def _move(
    state: PoolState, workload: Workload, machine: Machine, book: Book, now: float
) -> Replacement:
    free_for_s = now - (book.free_since or now)
    if not _waited(book, workload, now):  # ripe since an idle machine of it expired
        oldest = book.idle.pop(0)  # the longest idle, the one the reaper would end
        book.idle.append(oldest)  # taken next (``take`` uses the list's end)
        [node] = state.take(book, workload, 1)
        why = f"{book.label}'s idle {node.machine_id} is past its idle limit"
        step = "move onto it rather than reap it"
    else:
        [node] = state.take(book, workload, 1)
        why = (
            f"{book.label} has had free room for {free_for_s:.0f} s "
            f"(threshold {workload.replacement_threshold_s:.0f} s)"
        )
        step = "bring up the better machine"
    return Replacement(
        workload_id=workload.workload_id,
        bring_up=node,
        retire_machine_id=machine.machine_id,
        retire_machine_type=machine.machine_type,
        reason=(
            f"{why} and ranks above {machine.machine_type}: {step}, then retire "
            f"{machine.machine_id}"
        ),
    )
