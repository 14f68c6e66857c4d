"""The working state of one machine-pool pass: partitions as books of held, idle and reserved
machines, and which rule lets a workload in.

A snapshot is read once into :class:`PoolState`; the pass then books placements into it, so
that every later decision of the same pass sees the machines the earlier ones took. Rules:

- The first rule whose selector matches wins. No rule matching, or the matched rule's
  priority 0, shuts the workload out of the partition; so does a quota of 0. A partition
  without rules lets anyone in at priority 1.
- A partition holds at most ``size`` machines. Room for a workload is ``size`` minus the
  machines held minus the room held (reserved) for other workloads; a rule's quota caps the
  machines of the partition that the workloads it matched hold, reservations included.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, repeat
from operator import attrgetter, eq, itemgetter
from typing import Any

from . import trusted
from .model import (
    DEFAULT_RULE_PRIORITY,
    Machine,
    MachineTypeState,
    NodeAssignment,
    PoolSnapshot,
    Reservation,
    RuleSpec,
    Workload,
)
from .selectors import Selector, compile_selector

BookKey = tuple[str, str]  # (machine_type, partition)
LabelsKey = tuple[str, tuple[tuple[str, str], ...]]  # (workload type, own labels)


@dataclass(frozen=True, slots=True)
class CompiledRule:
    selector: Selector
    priority: int
    quota: int | None


@dataclass(frozen=True, slots=True)
class Access:
    """What a partition's rules say to one workload. ``priority`` 0 with ``denial``: shut out."""

    rule: int | None  # index of the matched rule; None for a partition without rules
    priority: int
    quota: int | None
    denial: str | None = None

    @property
    def allowed(self) -> bool:
        return self.denial is None


class Book:
    """One partition's machines during a pass (made many times a pass: a plain class whose
    constructor only stores)."""

    __slots__ = (
        "access_by_labels",
        "counted",
        "free_since",
        "held",
        "holders",
        "idle",
        "key",
        "label",
        "launch_node",
        "machine_type",
        "market",
        "name",
        "no_launch",
        "rank_in_type",
        "reserved",
        "reserved_rule",
        "reserved_total",
        "rule_used",
        "rules",
        "size",
    )
    machine_type: str
    name: str
    size: int
    market: str
    free_since: float | None
    rules: tuple[CompiledRule, ...]
    rank_in_type: int  # the partition's position in its machine type
    held: int  # machines held by workloads (running, stopping, or placed this pass)
    idle: list[str]  # idle machine ids; the next to use is last
    rule_used: list[int]  # machines held, per rule
    reserved: dict[str, int]  # workload id -> machines held for it
    reserved_total: int
    reserved_rule: dict[str, int | None]  # its owner's rule
    key: BookKey  # (machine type, partition)
    # The rule decision per set of labels (see PoolState.label_id), filled as the pass asks;
    # shared by the partitions whose rules are the same object (the decision is the rules').
    access_by_labels: dict[int, Access]
    # Who holds its machines, in snapshot order: filled when first asked (PoolState.holder_ids).
    holders: dict[str, None]
    label: str  # "type/partition", for messages
    counted: dict[int, str]  # n -> "n on type/partition"
    launch_node: NodeAssignment | None  # a node to launch here (frozen: shared)
    # Why no new machine is launched here now (its type's launches are all blocked): it
    # lends only its idle machines. None: it may launch.
    no_launch: str | None

    def __init__(
        self,
        machine_type: str,
        name: str,
        size: int,
        market: str,
        free_since: float | None,
        rules: tuple[CompiledRule, ...],
        access_by_labels: dict[int, Access],
        rank_in_type: int,
        no_launch: str | None = None,
    ) -> None:
        self.machine_type = machine_type
        self.name = name
        self.size = size
        self.market = market
        self.free_since = free_since
        self.rules = rules
        self.rank_in_type = rank_in_type
        self.held = 0
        self.idle = []
        self.rule_used = [0] * len(rules)
        self.reserved = {}
        self.reserved_total = 0
        self.reserved_rule = {}
        self.key = (machine_type, name)
        self.access_by_labels = access_by_labels
        self.holders = {}
        self.label = f"{machine_type}/{name}"
        self.counted = {}
        self.launch_node = None
        self.no_launch = no_launch

    def __repr__(self) -> str:
        return f"Book({self.label}, {self.held} of {self.size} held)"

    def on(self, count: int) -> str:
        """``"<count> on <label>"``, as placements say it (made once per count)."""
        text = self.counted.get(count)
        if text is None:
            text = self.counted[count] = f"{count} on {self.label}"
        return text

    def reserved_for_others(self, workload_id: str) -> int:
        return self.reserved_total - self.reserved.get(workload_id, 0)

    def rule_reserved_for_others(self, rule: int, workload_id: str) -> int:
        if not self.reserved:
            return 0
        return sum(
            count
            for owner, count in self.reserved.items()
            if owner != workload_id and self.reserved_rule.get(owner) == rule
        )


def compile_rules(rules: Iterable[RuleSpec]) -> tuple[CompiledRule, ...]:
    """A partition's rules with their selectors compiled (ValueError names a bad selector)."""
    return tuple(
        CompiledRule(
            compile_selector(rule.selector),
            DEFAULT_RULE_PRIORITY if rule.priority is None else rule.priority,
            rule.quota,
        )
        for rule in rules
    )


def access_for(book: Book, labels: Mapping[str, str]) -> Access:
    """The first matching rule decides; see the module docstring for the rest."""
    if not book.rules:
        return Access(None, DEFAULT_RULE_PRIORITY, None)
    for index, rule in enumerate(book.rules):
        if not rule.selector.matches(labels):
            continue
        text = rule.selector.text or "(empty selector)"
        if rule.priority <= 0:
            return Access(index, 0, rule.quota, f"rule {text!r} gives priority 0")
        if rule.quota == 0:
            return Access(index, 0, 0, f"rule {text!r} has quota 0")
        return Access(index, rule.priority, rule.quota)
    return Access(None, 0, None, "no rule matches its labels")


def labels_key(workload: Workload) -> LabelsKey:
    """Its type and its own labels as they are stored: equal for workloads whose labels are
    equal and listed in the same order (what the decisions are cached by; labels equal in
    another order only get their own entry). Read as a tuple of pairs by :func:`labels_of`."""
    return (workload.workload_type, tuple(workload.labels.items()))


def labels_of(key: LabelsKey) -> dict[str, str]:
    """The selector labels (``Workload.selector_labels``) of a :func:`labels_key`."""
    workload_type, own = key
    return {**dict(own), "workload-type": workload_type}


_SECOND = itemgetter(1)
# A model's fields as stored (pydantic keeps them in the instance dict). A pydantic model
# answers every attribute read through its own hook, several times the cost of a plain
# object's; the pass's loops over thousands of machines and workloads read the dict instead.
FIELDS = attrgetter("__dict__")
_ID_FIELD = itemgetter("workload_id")
_PHASE_FIELD = itemgetter("phase")
_TYPE_FIELD = itemgetter("workload_type")
_LABELS_FIELD = itemgetter("labels")


class _LabelIds(dict[LabelsKey, int]):
    """Label ids by :func:`labels_key`: a key not seen before gets the next id when first
    read (and is added to ``listed``, indexed by id)."""

    def __init__(self, keys: list[LabelsKey]) -> None:
        super().__init__()
        self.listed = keys

    def __missing__(self, key: LabelsKey) -> int:
        lid = self[key] = len(self.listed)
        self.listed.append(key)
        return lid


class PoolState:
    """Books by partition, machines by workload, and a cache of rule decisions."""

    def __init__(self, snapshot: PoolSnapshot) -> None:
        self.snapshot = snapshot
        self.types: dict[str, MachineTypeState] = {
            t.machine_type: t for t in snapshot.machine_types
        }
        self.books: dict[BookKey, Book] = {}
        self.books_of_type: dict[str, list[Book]] = {}
        # Per machine type, which rules its partitions have (equal: the same decisions).
        self.rules_of_type: dict[str, tuple[int, ...]] = {}
        # Partitions with the same rules (the same rule objects, as a pool file's defaults
        # give them) compile them once and share the rule decisions: the rules alone decide.
        compiled: dict[tuple[int, ...], tuple[tuple[CompiledRule, ...], dict[int, Access]]] = {}
        all_books = self.books
        for machine_type in map(FIELDS, snapshot.machine_types):
            type_name, market = machine_type["machine_type"], machine_type["market"]
            no_launch = machine_type["launch_blocked_why"]
            books = []
            kinds = []
            for rank, p in enumerate(map(FIELDS, machine_type["partitions"])):
                # the snapshot keeps the rules alive all pass
                same = tuple(map(id, p["rules"]))
                rules = compiled.get(same)
                if rules is None:
                    rules = compiled[same] = (compile_rules(p["rules"]), {})
                compiled_rules, decisions = rules
                book = Book(
                    type_name,
                    p["name"],
                    p["size"],
                    market,
                    p["free_since"],
                    compiled_rules,
                    decisions,
                    rank,
                    no_launch,
                )
                books.append(book)
                kinds.append(id(decisions))
                all_books[book.key] = book
            self.books_of_type[type_name] = books
            self.rules_of_type[type_name] = tuple(kinds)
        workloads = snapshot.workloads
        fields = list(map(FIELDS, workloads))
        self.workloads: dict[str, Workload] = dict(
            zip(map(_ID_FIELD, fields), workloads, strict=True)
        )
        # Workloads giving their machines back: never placed or chosen as victims again.
        self.stopping: set[str] = set()
        phases = list(map(_PHASE_FIELD, fields))
        if "stopping" in phases:
            self.stopping = {w.workload_id for w in workloads if w.phase == "stopping"}
        # The workloads by id in their order, their fields and phases, for the filters below.
        self._known: Sequence[Workload] = workloads
        if len(self.workloads) < len(workloads):  # an id given twice: its last one counts
            self._known = tuple(self.workloads.values())
            fields = list(map(FIELDS, self._known))
            phases = list(map(_PHASE_FIELD, fields))
        self._known_fields = fields
        self._phases = phases
        # Workload id -> the partitions holding room for it (read, never changed, outside).
        self.holding: dict[str, set[BookKey]] = defaultdict(set)
        # Workloads' labels as small ids: rule decisions are cached per partition and label id
        # (hashing an int, not a tuple of label pairs, on every look).
        self._label_keys: list[LabelsKey] = []
        self._label_ids = _LabelIds(self._label_keys)
        self._label_of: dict[str, int] = {}  # workload id -> label id
        self._books_by_order: dict[tuple[str, ...], list[Book]] = {}
        # (partition, now, min_runtime_s) -> its running preemptible holders, run long enough
        # (in victim order) and too young: filled by :mod:`.preemption`, the same all pass.
        self.holders_by_age: dict[
            tuple[BookKey, float, float], tuple[list[Workload], list[Workload]]
        ] = {}
        self._holders_booked = False
        self._book_machines(snapshot.machines)
        self._book_reservations(snapshot.reservations)

    @cached_property
    def machines(self) -> dict[str, Machine]:
        """The snapshot's machines by id (built when first asked: most passes never do)."""
        return {m.machine_id: m for m in self.snapshot.machines}

    @cached_property
    def machines_of(self) -> dict[str, list[Machine]]:
        """The snapshot's machines by the workload holding them, in snapshot order (built
        when first asked: only preemption and replacement do)."""
        out: dict[str, list[Machine]] = defaultdict(list)
        for machine in self.snapshot.machines:
            if machine.workload_id is not None:
                out[machine.workload_id].append(machine)
        return dict(out)

    @cached_property
    def any_preemptible(self) -> bool:
        """Whether any workload of the snapshot runs and may be preempted (when none does,
        no partition has a victim; worked out when a pass first looks for one)."""
        # Workload.is_preemptible, read from the fields: its own setting when set, else
        # preemptible as a job. (A plain loop: filtering the running and collecting their
        # kinds at C speed cost half as much again, each step of a map being a call.)
        for phase, own in zip(self._phases, self._known_fields, strict=True):
            if phase == "running":
                setting = own["preemptible"]
                if setting or (setting is None and own["workload_type"] == "job"):
                    return True
        return False

    def pending(self) -> list[Workload]:
        """The snapshot's pending workloads, in snapshot order."""
        return list(compress(self._known, map(eq, self._phases, repeat("pending"))))

    def holds_room(self, workload_id: str) -> bool:
        """Whether room is held (reserved) for this workload anywhere."""
        return workload_id in self.holding

    # ----------------------------------------------------------------- reading the snapshot
    def _book_machines(self, machines: Sequence[Machine]) -> None:
        # One pass over the machines, last first, their fields read from their dicts. Idle
        # machines are gathered per partition as (idle since, id), to sort without a key
        # function. An owner's rule is read from the decisions cached per labels. Who holds
        # what is read again only when preemption asks (see ``holder_ids``). Machines come
        # mostly grouped by partition: the partition is looked up only when it changes.
        books, workloads, label_ids = self.books, self.workloads, self._label_ids
        idle_of: dict[Book, list[tuple[float, str]]] = {}
        machine_type = partition = None
        book: Book | None = None
        idle: list[tuple[float, str]] = []
        for machine in map(FIELDS, reversed(machines)):
            if machine["machine_type"] != machine_type or machine["partition"] != partition:
                machine_type, partition = machine["machine_type"], machine["partition"]
                book = books.get((machine_type, partition))
                if book is None:
                    continue  # a partition the pool no longer defines counts nowhere
                idle = idle_of.setdefault(book, [])
            elif book is None:
                continue
            owner_id = machine["workload_id"]
            if owner_id is None:
                idle.append((machine["idle_since"] or 0.0, machine["machine_id"]))
                continue
            book.held += 1
            if not book.rules:
                continue  # no rule, no quota to count against
            owner = workloads.get(owner_id)
            if owner is not None:
                own = owner.__dict__
                lid = label_ids.get((own["workload_type"], tuple(own["labels"].items())))
                access = book.access_by_labels.get(lid) if lid is not None else None
                rule = (access or self.access(book, owner)).rule
                if rule is not None:
                    book.rule_used[rule] += 1
        # The most recently idle is used first (it is warmest); the longest idle are left to
        # the reaper. Popped from the end: each partition's in ascending order, ties (an id
        # given twice) in the order gathered, so the first in the snapshot is popped first.
        for book, mine in idle_of.items():
            if len(mine) > 1:
                mine.sort()
            book.idle = list(map(_SECOND, mine))

    def _book_holders(self) -> None:
        """Fill each partition's holders (who holds its machines, in snapshot order): only
        looking for victims reads them."""
        if self._holders_booked:
            return
        self._holders_booked = True
        books = self.books
        for machine in map(FIELDS, self.snapshot.machines):
            owner = machine["workload_id"]
            if owner is not None:
                book = books.get((machine["machine_type"], machine["partition"]))
                if book is not None:
                    book.holders[owner] = None

    def _book_reservations(self, reservations: Iterable[Reservation]) -> None:
        for reservation in reservations:
            book = self.books.get((reservation.machine_type, reservation.partition))
            owner = self.workloads.get(reservation.workload_id)
            if book is None or owner is None or owner.phase != "pending":
                continue  # its workload was placed, or is gone: the hold lapses
            self.reserve(book, owner, reservation.count)

    # ----------------------------------------------------------------- rules and room
    def label_id(self, workload: Workload) -> int:
        """A small id for the workload's labels: equal labels, equal ids (within the pass; see
        :func:`labels_key`)."""
        lid = self._label_of.get(workload.workload_id)
        if lid is None:
            lid = self.label_ids([workload])[0]
        return lid

    def label_ids(
        self, workloads: Sequence[Workload], fields: Sequence[dict[str, object]] | None = None
    ) -> list[int]:
        """``label_id`` of each of these workloads, worked out together at C speed
        (``fields``: their ``FIELDS``, when the caller has them)."""
        if fields is None:
            fields = list(map(FIELDS, workloads))
        own = map(tuple, map(dict.items, map(_LABELS_FIELD, fields)))
        keys = zip(map(_TYPE_FIELD, fields), own, strict=True)
        out = list(map(self._label_ids.__getitem__, keys))
        self._label_of.update(zip(map(_ID_FIELD, fields), out, strict=True))
        return out

    def label_ids_of(
        self, workload_ids: Sequence[str], which: Sequence[int], keys: Sequence[LabelsKey]
    ) -> list[int]:
        """``label_id`` of the workloads with these ids, whose :func:`labels_key` s are
        ``keys[i]`` for each ``i`` of ``which`` (the queue's order keeps each waiting
        workload's between passes): each key is read once, the rest at C speed."""
        of_key = list(map(self._label_ids.__getitem__, keys))
        out = list(map(of_key.__getitem__, which))
        self._label_of.update(zip(workload_ids, out, strict=True))
        return out

    def access(self, book: Book, workload: Workload) -> Access:
        """The rule decision for this workload in this partition (cached by labels)."""
        lid = self._label_of.get(workload.workload_id)
        if lid is None:
            lid = self.label_id(workload)
        cached = book.access_by_labels.get(lid)
        if cached is None:
            cached = book.access_by_labels[lid] = access_for(book, labels_of(self._label_keys[lid]))
        return cached

    def holder_ids(self, book: Book) -> dict[str, None]:
        """The ids of the workloads holding machines of this partition, as of the snapshot
        (known or not), in snapshot order."""
        self._book_holders()
        return book.holders

    def holders(self, book: Book) -> list[Workload]:
        """The known workloads holding machines of this partition (as of the snapshot)."""
        known = (self.workloads.get(wid) for wid in self.holder_ids(book))
        return [w for w in known if w is not None]

    def books_for(self, workload: Workload) -> list[Book]:
        """The partitions of its machine types, in its group order (then file order); one
        list per group order, shared: callers read it, never change it."""
        out = self._books_by_order.get(workload.group_order)
        if out is None:
            out = self._books_by_order[workload.group_order] = [
                book
                for machine_type in dict.fromkeys(workload.group_order)
                for book in self.books_of_type.get(machine_type, ())
            ]
        return out

    def fit(
        self, workload: Workload, books: Iterable[Book] | None = None
    ) -> tuple[list[tuple[Book, int]], int]:
        """Fill the workload's nodes in the order of ``books`` (by default its own, see
        ``books_for``) with the room there is now: (nodes per partition, nodes still short).
        ``room`` and ``walk`` without freed machines, with full partitions passed over before
        their rules are read."""
        wid = workload.workload_id
        remaining = workload.num_nodes
        takes: list[tuple[Book, int]] = []
        lid = self._label_of.get(wid)
        if lid is None:
            lid = self.label_id(workload)
        groups: Iterable[Iterable[Book] | None]
        if books is not None:
            groups = (books,)
        else:  # its machine types' partitions, in its group order
            order: Iterable[str] = workload.group_order
            if len(workload.group_order) > 1 and len(set(order)) < len(workload.group_order):
                order = dict.fromkeys(order)
            groups = map(self.books_of_type.get, order)
        for group in groups:
            if group is None:
                continue  # not a machine type of this pool
            for book in group:
                room = book.size - book.held
                if book.reserved_total:
                    room -= book.reserved_total - book.reserved.get(wid, 0)
                if book.no_launch is not None and room > len(book.idle):
                    room = len(book.idle)  # no new machine: its idle ones only
                if room <= 0:
                    continue
                access = book.access_by_labels.get(lid) or self.access(book, workload)
                if access.denial is not None:
                    continue
                quota, rule = access.quota, access.rule
                if quota is not None and rule is not None:
                    quota_room = (
                        quota - book.rule_used[rule] - book.rule_reserved_for_others(rule, wid)
                    )
                    if quota_room < room:
                        room = quota_room
                        if room <= 0:
                            continue
                if room >= remaining:
                    takes.append((book, remaining))
                    return takes, 0
                takes.append((book, room))
                remaining -= room
        return takes, remaining

    def fit_and_take(
        self, workload: Workload, own: Mapping[str, Any]
    ) -> tuple[list[tuple[Book, int]], list[NodeAssignment]] | None:
        """``fit`` in its own group order, then ``take`` of each partition it found, when the
        free room is enough (None, nothing booked, when it is not): for a workload holding no
        room, as one walk (the rule found for each partition is the one it books against).
        ``own``: its FIELDS."""
        wid = own["workload_id"]
        remaining = own["num_nodes"]
        lid = self._label_of.get(wid)
        if lid is None:
            lid = self.label_id(workload)
        group_of = self.books_of_type.get
        found: list[tuple[Book, int]] = []  # nodes per partition
        # The machine types walked, once the walk goes on past the first: one its group order
        # names twice is walked once (most walks end in the first; none is set up for them).
        walked: list[str] | None = None
        for machine_type in own["group_order"]:  # its machine types' partitions, in order
            if walked is not None and machine_type in walked:
                continue
            group = group_of(machine_type)
            if group is None:
                continue  # not a machine type of this pool
            for book in group:
                room = book.size - book.held
                if book.reserved_total:
                    room -= book.reserved_total - book.reserved.get(wid, 0)
                if book.no_launch is not None and room > len(book.idle):
                    room = len(book.idle)  # no new machine: its idle ones only
                if room <= 0:
                    continue
                access = book.access_by_labels.get(lid) or self.access(book, workload)
                if access.denial is not None:
                    continue
                quota, rule = access.quota, access.rule
                if quota is not None and rule is not None:
                    quota_room = quota - book.rule_used[rule]
                    if book.reserved:
                        quota_room -= book.rule_reserved_for_others(rule, wid)
                    if quota_room < room:
                        room = quota_room
                        if room <= 0:
                            continue
                if room >= remaining:
                    found.append((book, remaining))
                    remaining = 0
                    break
                found.append((book, room))
                remaining -= room
            if not remaining:
                break
            if walked is None:
                walked = [machine_type]
            else:
                walked.append(machine_type)
        if remaining:
            return None
        nodes: list[NodeAssignment] = []
        for book, count in found:
            book.held += count
            rule = book.access_by_labels[lid].rule  # as the walk found it
            if rule is not None:
                book.rule_used[rule] += count
            idle = book.idle
            if idle:
                if count == 1:
                    nodes.append(trusted.node(book.machine_type, book.name, idle.pop()))
                    continue
                used = idle[-count:]  # the warmest, taken from the end
                del idle[-count:]
                used.reverse()
                nodes.extend(trusted.nodes(book.machine_type, book.name, used))
                count -= len(used)
            if count:
                if book.launch_node is None:
                    book.launch_node = trusted.node(book.machine_type, book.name, None)
                nodes.extend([book.launch_node] * count)
        return found, nodes

    def room(
        self,
        book: Book,
        workload: Workload,
        freed: Freed | None = None,
        access: Access | None = None,
    ) -> int:
        """Machines of this partition the workload could take now (with ``freed`` released;
        ``access``: its rule decision here, when the caller has it)."""
        if access is None:
            access = self.access(book, workload)
        if access.denial is not None:
            return 0
        wid = workload.workload_id
        room = book.size - book.held
        if book.reserved_total:
            room -= book.reserved_total - book.reserved.get(wid, 0)
        if freed is not None:
            room += freed.machines.get(book.key, 0)
        if book.no_launch is not None:  # no new machine: its idle ones and those freed only
            room = min(room, len(book.idle) + (freed.machines.get(book.key, 0) if freed else 0))
        quota, rule = access.quota, access.rule
        if quota is not None and rule is not None:
            quota_room = quota - book.rule_used[rule] - book.rule_reserved_for_others(rule, wid)
            if freed is not None:
                quota_room += freed.rule_machines.get((book.key, rule), 0)
            room = min(room, quota_room)
        return max(0, room)

    # ----------------------------------------------------------------- booking
    def take(self, book: Book, workload: Workload, count: int) -> list[NodeAssignment]:
        """Book ``count`` machines for the workload: idle ones first, then new launches."""
        if count <= 0:
            return []
        lid = self._label_of.get(workload.workload_id)
        access = book.access_by_labels.get(lid) if lid is not None else None
        rule = (access or self.access(book, workload)).rule
        book.held += count
        if rule is not None:
            book.rule_used[rule] += count
        idle = book.idle
        if not idle:
            out = []
        else:
            used = idle[-count:]  # the warmest, taken from the end
            del idle[-count:]
            used.reverse()
            out = trusted.nodes(book.machine_type, book.name, used)
        if len(out) < count:
            if book.launch_node is None:
                book.launch_node = trusted.node(book.machine_type, book.name, None)
            out.extend([book.launch_node] * (count - len(out)))
        return out

    def reserve(self, book: Book, workload: Workload, count: int) -> None:
        """Hold room in the partition for this workload."""
        wid = workload.workload_id
        book.reserved[wid] = book.reserved.get(wid, 0) + count
        book.reserved_total += count
        book.reserved_rule[wid] = self.access(book, workload).rule
        self.holding[wid].add(book.key)

    def drop_reservations(self, workload_id: str) -> None:
        if not self.holding:
            return
        for key in self.holding.pop(workload_id, ()):
            book = self.books[key]
            book.reserved_total -= book.reserved.pop(workload_id, 0)
            book.reserved_rule.pop(workload_id, None)

    def reservations(self) -> list[Reservation]:
        """The holds as they stand, for the plan."""
        return [
            Reservation(workload_id=wid, machine_type=b.machine_type, partition=b.name, count=n)
            for b in self.books.values()
            if b.reserved
            for wid, n in sorted(b.reserved.items())
            if n > 0
        ]


@dataclass(slots=True)
class Freed:
    """Machines that chosen victims would give back: per partition and per (partition, rule)."""

    machines: dict[BookKey, int] = field(default_factory=dict)
    rule_machines: dict[tuple[BookKey, int], int] = field(default_factory=dict)

    def add(self, state: PoolState, victim: Workload, sign: int = 1) -> None:
        """Count (or, with ``sign=-1``, uncount) a victim's machines."""
        for key, count in machines_by_book(state, victim.workload_id).items():
            self.machines[key] = self.machines.get(key, 0) + sign * count
            rule = state.access(state.books[key], victim).rule
            if rule is not None:
                self.rule_machines[(key, rule)] = self.rule_machines.get((key, rule), 0) + (
                    sign * count
                )


def machines_by_book(state: PoolState, workload_id: str) -> dict[BookKey, int]:
    """How many machines a workload holds in each partition the pool defines."""
    out: dict[BookKey, int] = {}
    for machine in state.machines_of.get(workload_id, ()):
        key = (machine.machine_type, machine.partition)
        if key in state.books:
            out[key] = out.get(key, 0) + 1
    return out
