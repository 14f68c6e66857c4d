"""Choosing victims: whose machines a workload that cannot be placed may take.

A victim is running, preemptible, has run at least ``min_runtime_s`` (the guard against
thrash), and is lower than the preemptor in the partition where it stands: lower rule
priority there, or the same rule priority and a lower priority of its own. Victims are taken
lowest first, then newest (latest started), one at a time until the preemptor fits; a final
pass walks them back from the last one taken and drops any the preemptor turns out not to
need. Stopping a victim frees all its machines, in every partition it holds.

Two modes, from the workload's ``on_full``:

- ``fallback``: preemption is the last resort, tried only when the free room of all its
  groups is not enough; victims are taken in the order above across all its partitions.
- ``preempt``: stay on the better group. Groups (machine types) are walked in rank order; in
  each, the free room of all its partitions is used first and then victims there, before the
  next group is considered. Pruning keeps the resulting nodes per group unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from .model import Workload
from .partitions import Book, BookKey, Freed, PoolState


@dataclass(frozen=True, slots=True)
class Choice:
    """Victims to stop (empty: none needed) and the nodes per partition that then fit."""

    victims: tuple[Workload, ...]
    takes: tuple[tuple[BookKey, int], ...]


def walk(
    state: PoolState, workload: Workload, books: Sequence[Book], freed: Freed | None = None
) -> tuple[list[tuple[Book, int]], int]:
    """Fill the workload's nodes in its group order: (nodes per partition, nodes still short)."""
    remaining = workload.num_nodes
    takes: list[tuple[Book, int]] = []
    for book in books:
        if remaining == 0:
            break
        count = min(remaining, state.room(book, workload, freed))
        if count:
            takes.append((book, count))
            remaining -= count
    return takes, remaining


def runtime_ok(workload: Workload, now: float, min_runtime_s: float) -> bool:
    """Whether it has run long enough to be preempted."""
    started = workload.started_at if workload.started_at is not None else workload.submitted_at
    return now - started >= min_runtime_s


def is_lower(state: PoolState, book: Book, victim: Workload, preemptor: Workload) -> bool:
    """Rule priority in this partition first, the workloads' own priority second."""
    theirs = (state.access(book, victim).priority, victim.priority)
    ours = (state.access(book, preemptor).priority, preemptor.priority)
    return theirs < ours


def candidates(
    state: PoolState, book: Book, preemptor: Workload, now: float, min_runtime_s: float
) -> list[Workload]:
    """Possible victims in one partition, in the order they are taken: running, preemptible,
    run ``min_runtime_s``, not stopping, and lower than the preemptor there. Victim order
    starts with what "lower" compares, so those lower are the front of the partition's list."""
    ripe, _ = _holders_by_age(state, book, now, min_runtime_s)
    ours = (state.access(book, preemptor).priority, preemptor.priority)
    out = []
    for victim in ripe:
        if (state.access(book, victim).priority, victim.priority) >= ours:
            break  # this one and all after it are not lower
        if victim.workload_id not in state.stopping:
            out.append(victim)
    return out


def _holders_by_age(
    state: PoolState, book: Book, now: float, min_runtime_s: float
) -> tuple[list[Workload], list[Workload]]:
    """The partition's running, preemptible holders: those that have run ``min_runtime_s``
    (in victim order) and those too young to be taken (as held). The same for every
    preemptor of a pass, so worked out once per partition and kept on the pass's state."""
    if not state.any_preemptible:
        return [], []
    key = (book.key, now, min_runtime_s)
    found = state.holders_by_age.get(key)
    if found is None:
        ripe: list[Workload] = []
        young: list[Workload] = []
        workloads = state.workloads
        for wid in state.holder_ids(book):
            victim = workloads.get(wid)
            if victim is not None and victim.phase == "running" and victim.is_preemptible():
                (ripe if runtime_ok(victim, now, min_runtime_s) else young).append(victim)
        ripe.sort(key=lambda v: victim_order(state, book, v))
        found = state.holders_by_age[key] = (ripe, young)
    return found


def victim_order(
    state: PoolState, book: Book, victim: Workload
) -> tuple[int, int, float, float, str]:
    """Lowest rule priority, then lowest priority, then newest (started last, then submitted
    last), then id."""
    started = victim.started_at if victim.started_at is not None else victim.submitted_at
    access = state.access(book, victim)
    return (access.priority, victim.priority, -started, -victim.submitted_at, victim.workload_id)


def _greedy_by_group(
    state: PoolState, preemptor: Workload, books: Sequence[Book], now: float, min_runtime_s: float
) -> list[Workload] | None:
    freed = Freed()
    chosen: dict[str, Workload] = {}
    remaining = preemptor.num_nodes
    for _, in_group in groupby(books, key=lambda b: b.machine_type):
        group = [b for b in in_group if state.access(b, preemptor).allowed]
        have = _group_room(state, preemptor, group, freed)
        pairs = [
            (victim_order(state, book, victim), rank, victim)
            for rank, book in enumerate(group)
            for victim in candidates(state, book, preemptor, now, min_runtime_s)
        ]
        pairs.sort(key=lambda p: (p[0], p[1]))
        for _order, _rank, victim in pairs:
            if have >= remaining:
                break
            if victim.workload_id in chosen:
                continue
            freed.add(state, victim)
            grown = _group_room(state, preemptor, group, freed)
            if grown > have:
                chosen[victim.workload_id] = victim
                have = grown
            else:  # its machines do not help here (the preemptor's quota binds)
                freed.add(state, victim, -1)
        remaining -= min(have, remaining)
        if remaining == 0:
            return list(chosen.values())
    return None


def _group_room(state: PoolState, preemptor: Workload, group: Sequence[Book], freed: Freed) -> int:
    return sum(state.room(b, preemptor, freed) for b in group)


def _greedy_global(
    state: PoolState, preemptor: Workload, books: Sequence[Book], now: float, min_runtime_s: float
) -> list[Workload] | None:
    pairs = [
        (victim_order(state, book, victim), rank, victim)
        for rank, book in enumerate(books)
        if state.access(book, preemptor).allowed
        for victim in candidates(state, book, preemptor, now, min_runtime_s)
    ]
    pairs.sort(key=lambda p: (p[0], p[1]))
    freed = Freed()
    chosen: dict[str, Workload] = {}
    _, short = walk(state, preemptor, books, freed)
    for _order, _rank, victim in pairs:
        if short == 0:
            break
        if victim.workload_id in chosen:
            continue
        freed.add(state, victim)
        _, shorter = walk(state, preemptor, books, freed)
        if shorter < short:
            chosen[victim.workload_id] = victim
            short = shorter
        else:
            freed.add(state, victim, -1)
    return list(chosen.values()) if short == 0 else None


def _freed_by(state: PoolState, victims: Sequence[Workload]) -> Freed:
    freed = Freed()
    for victim in victims:
        freed.add(state, victim)
    return freed


def _prune(
    state: PoolState, preemptor: Workload, books: Sequence[Book], chosen: list[Workload]
) -> list[Workload]:
    """Walk the victims back from the last taken; drop each one the preemptor does not need."""
    reference, _ = walk(state, preemptor, books, _freed_by(state, chosen))
    wanted = _per_group(reference)
    kept = list(chosen)
    for victim in reversed(chosen):
        trial = [v for v in kept if v is not victim]
        takes, short = walk(state, preemptor, books, _freed_by(state, trial))
        if short:
            continue
        if preemptor.on_full == "preempt" and _per_group(takes) != wanted:
            continue  # without it the preemptor would land on a worse group
        kept = trial
    return kept


def _per_group(takes: Sequence[tuple[Book, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for book, count in takes:
        out[book.machine_type] = out.get(book.machine_type, 0) + count
    return out


def choose_victims(
    state: PoolState, preemptor: Workload, now: float, min_runtime_s: float
) -> Choice | None:
    """The fewest victims (per the rules above) after which the preemptor fits, and its nodes
    then; None when even preempting every eligible workload would not make it fit."""
    books = state.books_for(preemptor)
    if not state.any_preemptible or not any(
        _holders_by_age(state, book, now, min_runtime_s)[0] for book in books
    ):
        # Nothing anywhere it may look could be a victim: what it gets is the free room
        # (what either greedy way below ends with when it finds no victim).
        takes, short = walk(state, preemptor, books)
        return None if short else Choice((), tuple((b.key, n) for b, n in takes))
    greedy = _greedy_by_group if preemptor.on_full == "preempt" else _greedy_global
    chosen = greedy(state, preemptor, books, now, min_runtime_s)
    if chosen is None:
        return None
    kept = _prune(state, preemptor, books, chosen) if chosen else []
    takes, _ = walk(state, preemptor, books, _freed_by(state, kept))
    return Choice(tuple(kept), tuple((b.key, n) for b, n in takes))


def protected(
    state: PoolState, preemptor: Workload, now: float, min_runtime_s: float
) -> list[Workload]:
    """Lower, preemptible running work spared only because it has not run ``min_runtime_s``."""
    if not state.any_preemptible:
        return []  # no running work may be preempted, young or not
    out: dict[str, Workload] = {}
    for book in state.books_for(preemptor):
        if not state.access(book, preemptor).allowed:
            continue
        _, young = _holders_by_age(state, book, now, min_runtime_s)
        for victim in young:
            if is_lower(state, book, victim, preemptor):
                out[victim.workload_id] = victim
    return list(out.values())
