"""The machine-pool queue's order (:func:`ordered`), kept between passes.

Pending workloads are considered by the best rule priority they have in any partition of
their groups, then their own priority (both: higher first), then ``submitted_at`` (earlier
first), then id. A workload's place depends only on its own fields and on the pool's rules
(which machine types the pool has, and each partition's rules): a workload model is frozen,
so one that changes (placed, sent back, narrowed after a failed launch) is another object.

A pool's queue of hundreds waits pass after pass while a few workloads come and go. So the
order a pass found is kept, per pool, with each workload's sort key, labels and verdict
fields: the next pass over the same rules keeps the workloads it finds again (the very same
objects, picked out at C speed), lets out those no longer waiting and works out only the
newcomers' keys, each put in its place by bisection. Under other rules, or when most of the
queue is new (the runtime reads its workloads from the store afresh each pass), the order is
worked out afresh. Either way the answer is the same (``tests/unit/test_queue_order.py``
checks one against the other over queues that change).
"""

from __future__ import annotations

from bisect import bisect
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter, mul, neg, not_
from typing import Any

from .model import Workload
from .partitions import FIELDS, LabelsKey, PoolState

# What decides whether a workload without held room can be placed or can preempt, and what
# it is told: its labels (their label id: rules), and its group order, nodes, mode, own
# priority and preemptor (a preempted workload is told who preempted it).
VerdictKey = tuple[int, tuple[tuple[str, ...], int, str, int, str | None]]
KIND_FIELDS = itemgetter("group_order", "num_nodes", "on_full", "priority", "preempted_by")
# A workload's place: (-best rule priority, -priority, submitted_at, id). Ids are unique.
SortKey = tuple[int, int, float, str]

_FEW_KINDS = 8
# Read from the workloads' FIELDS.
_GROUP_ORDER = itemgetter("group_order")
_LABELS = itemgetter("labels")
_PRIORITY = itemgetter("priority")
_SUBMITTED_AT = itemgetter("submitted_at")
_TYPE = itemgetter("workload_type")
_WORKLOAD_ID = itemgetter("workload_id")
_KEPT_POOLS_MAX = 64
_BEST_MAX = 10_000


@dataclass
class _Kept:
    """One pool's queue as the last pass ordered it: parallel lists, in queue order."""

    rules: tuple[Any, ...]  # the pool's rules the order was found under (:func:`_rules_of`)
    order: list[Workload]
    ids: list[int]  # id() of each workload (they are kept alive here)
    keys: list[SortKey]
    labels: list[int]  # each one's labels, as their place in ``sets``
    kinds: list[tuple[Any, ...]]  # KIND_FIELDS of each
    # (labels, group order) -> the best rule priority under these rules, as found so far
    best: dict[tuple[LabelsKey, tuple[str, ...]], int]
    sets: _Sets  # the sets of labels met so far (kept with the order, as ``best``)


class _Sets(dict[LabelsKey, int]):
    """Sets of labels (:func:`~.partitions.labels_key`) -> their place in ``listed``: a pass
    reads each set's label id once, not each waiting workload's labels."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[LabelsKey] = []

    def __missing__(self, key: LabelsKey) -> int:
        at = self[key] = len(self.listed)
        self.listed.append(key)
        return at


_KEPT: dict[str, _Kept] = {}


def ordered(state: PoolState, keep: bool = True) -> tuple[list[Workload], list[VerdictKey]]:
    """The pool's pending workloads in the order they are considered, and each one's verdict
    key. ``keep``: start from the order kept for this pool, and keep this one (off: work it
    out afresh and keep nothing, to check that keeping changes nothing)."""
    waiting = state.pending()
    if not waiting:
        return [], []
    pool = state.snapshot.pool
    rules = _rules_of(state)
    kept = _KEPT.get(pool) if keep else None
    kept = _carried(state, kept, waiting) if kept is not None and kept.rules == rules else None
    if kept is None:
        kept = _afresh(state, waiting, rules, {}, _Sets())
    if keep:
        if pool not in _KEPT and len(_KEPT) >= _KEPT_POOLS_MAX:
            _KEPT.clear()
        _KEPT[pool] = kept
    lids = state.label_ids_of(list(map(itemgetter(3), kept.keys)), kept.labels, kept.sets.listed)
    return list(kept.order), list(zip(lids, kept.kinds, strict=True))


def _rules_of(state: PoolState) -> tuple[Any, ...]:
    """What a workload's best rule priority is read from: the pool's machine types and each
    partition's rules (compared as the same objects first: a pool's file gives the same ones
    pass after pass)."""
    return tuple(
        (t.machine_type, tuple(tuple(p.rules) for p in t.partitions))
        for t in state.snapshot.machine_types
    )


def _carried(state: PoolState, kept: _Kept, waiting: list[Workload]) -> _Kept | None:
    """The kept order with the workloads no longer waiting let out and the new ones put in
    their places; None when most are new (afresh is cheaper)."""
    now_ids = list(map(id, waiting))
    present = set(now_ids)
    stay = list(map(present.__contains__, kept.ids))
    known = set(compress(kept.ids, stay))
    fresh = list(compress(waiting, map(not_, map(known.__contains__, now_ids))))
    if len(fresh) * 4 > len(waiting) or len(kept.sets) > _BEST_MAX:
        return None
    out = _Kept(
        kept.rules,
        list(compress(kept.order, stay)),
        list(compress(kept.ids, stay)),
        list(compress(kept.keys, stay)),
        list(compress(kept.labels, stay)),
        list(compress(kept.kinds, stay)),
        kept.best if len(kept.best) < _BEST_MAX else {},
        kept.sets,
    )
    if fresh:
        new = _afresh(state, fresh, kept.rules, out.best, out.sets)
        for i, key in enumerate(new.keys):
            at = bisect(out.keys, key)
            out.keys.insert(at, key)
            out.order.insert(at, new.order[i])
            out.ids.insert(at, new.ids[i])
            out.labels.insert(at, new.labels[i])
            out.kinds.insert(at, new.kinds[i])
    return out


def _afresh(
    state: PoolState,
    waiting: list[Workload],
    rules: tuple[Any, ...],
    best: dict[tuple[LabelsKey, tuple[str, ...]], int],
    sets: _Sets,
) -> _Kept:
    """These workloads ordered from scratch, read together at C speed. ``best``: the best
    rule priorities already found under these rules, ``sets``: the sets of labels met
    (those found here are added to both)."""
    fields = list(map(FIELDS, waiting))
    labels = list(
        zip(map(_TYPE, fields), map(tuple, map(dict.items, map(_LABELS, fields))), strict=True)
    )
    wanted = list(zip(labels, map(_GROUP_ORDER, fields), strict=True))
    found: list[int | None] = list(map(best.get, wanted))
    if None in found:
        unknown = [i for i, b in enumerate(found) if b is None]
        worked = _best_of(state, [waiting[i] for i in unknown], [fields[i] for i in unknown])
        for i, b in zip(unknown, worked, strict=True):
            found[i] = best[wanted[i]] = b
    keys: list[SortKey] = list(
        zip(
            map(neg, found),  # type: ignore[arg-type]  # none is None by now
            map(neg, map(_PRIORITY, fields)),
            map(_SUBMITTED_AT, fields),
            map(_WORKLOAD_ID, fields),
            strict=True,
        )
    )
    # Sorted on each key in turn, least significant first (a stable sort of keys of one type
    # each compares faster than tuples do): the order of the keys' tuples.
    order = list(range(len(waiting)))
    for part in (3, 2, 1, 0):
        column = list(map(itemgetter(part), keys))
        order.sort(key=column.__getitem__)
    pick = order.__iter__
    return _Kept(
        rules,
        list(map(waiting.__getitem__, pick())),
        list(map(id, map(waiting.__getitem__, pick()))),
        list(map(keys.__getitem__, pick())),
        list(map(sets.__getitem__, map(labels.__getitem__, pick()))),
        list(map(list(map(KIND_FIELDS, fields)).__getitem__, pick())),
        best,
        sets,
    )


def _best_of(state: PoolState, waiting: list[Workload], fields: list[dict[str, Any]]) -> list[int]:
    """The best rule priority each of these workloads has in any partition of its groups."""
    # A machine type's partitions give the same, per labels, as machine types alike in rules
    # (the same rule objects), so a table per label id maps rules to it, filled as asked.
    # Rule priorities are never below 0: a workload none of whose machine types is in the
    # pool has 0.
    tables: dict[int, _BestIn] = {}
    lids = state.label_ids(waiting, fields)
    # A machine type of each kind of rules, to read them from.
    example = {kind: t for t, kind in reversed(state.rules_of_type.items())}
    # One workload of each set of labels (the last: any gives the same decisions).
    for lid, workload in dict(zip(lids, waiting, strict=True)).items():
        tables[lid] = _BestIn(state, workload, example)
    groups = map(_GROUP_ORDER, fields)
    same = _same_everywhere(state, tables)
    if same is not None:
        # Every machine type gives each set of labels the same: a workload has it when any of
        # its machine types is in the pool.
        in_pool = map(not_, map(state.types.keys().isdisjoint, groups))
        return list(map(mul, map(same.__getitem__, lids), in_pool))
    lookups = map(attrgetter("__getitem__"), map(tables.__getitem__, lids))
    rules_of = map(map, repeat(state.rules_of_type.get), groups)
    return list(map(max, map(chain, repeat((0,)), map(map, lookups, rules_of))))


def _same_everywhere(state: PoolState, tables: dict[int, _BestIn]) -> dict[int, int] | None:
    """Label id -> the best rule priority, when every machine type of the pool gives each set
    of labels the same (its partitions' rules alike, or alike in what they give; looked at
    only for a pool with few kinds of rules), else None."""
    kinds = set(state.rules_of_type.values())
    if len(kinds) > _FEW_KINDS:
        return None
    out = {}
    for lid, table in tables.items():
        found = set(map(table.__getitem__, kinds))
        if len(found) != 1:
            return None
        out[lid] = found.pop()
    return out


class _BestIn(dict[tuple[int, ...] | None, int]):
    """For one set of labels: a machine type's rules (``PoolState.rules_of_type``; None: not
    a machine type of the pool) -> the best rule priority its partitions give, worked out
    when first read."""

    def __init__(
        self, state: PoolState, workload: Workload, example: dict[tuple[int, ...], str]
    ) -> None:
        super().__init__()
        self.state, self.workload = state, workload
        self.example = example  # a machine type of each kind of rules, to read them from

    def __missing__(self, rules: tuple[int, ...] | None) -> int:
        best = 0
        if rules is not None:
            books = self.state.books_of_type[self.example[rules]]
            best = max((self.state.access(b, self.workload).priority for b in books), default=0)
        self[rules] = best
        return best
