"""The machine-pool scheduler: one pure pass from a :class:`PoolSnapshot` to a :class:`Plan`.

A pass, in order:

1. Pending workloads are queued by the best rule priority they have in any partition of their
   groups, then their own priority (both: higher first), then ``submitted_at`` (earlier first;
   a preempted workload keeps its original time, so its place), then id.
2. Each in turn is placed if it fits: its nodes fill its groups in rank order, spanning groups
   as they fill (a 2-node workload may get 1 reserved + 1 spot). One that does not fit is
   passed over, so a later, smaller workload may still be placed (queue bypass).
3. One that does not fit may preempt lower work (:mod:`.preemption`); the room its victims
   free, and any free room it will use, is held for it (a reservation) until they have
   stopped. A workload holding room is placed once it fits, and waits while its victims stop.
4. Replacement (:mod:`.replacement`) and idle reaping (:mod:`.reaping`) use what is left.

Every workload the pass leaves waiting gets a :class:`Pending` with the reason from the
decision itself, which is what ``corral why`` shows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from itertools import compress, islice, repeat
from operator import is_, itemgetter, ne
from typing import Any

from . import trusted
from .model import (
    NodeAssignment,
    Pending,
    PendingCode,
    Placement,
    Plan,
    PoolSnapshot,
    Preemption,
    Workload,
)
from .partitions import FIELDS, Access, Book, PoolState
from .preemption import Choice, choose_victims, protected
from .queue_order import KIND_FIELDS, VerdictKey, ordered
from .reaping import plan_machine_reaps
from .replacement import plan_replacements


def schedule(
    snapshot: PoolSnapshot,
    now: float,
    *,
    min_runtime_s: float = 0.0,
    replacement_budget: int = 1,
    replacement_guard_s: float = 0.0,
    min_machines: int = 0,
    reuse_verdicts: bool = True,
    passed_over: Mapping[str, str] | None = None,
) -> Plan:
    """One scheduling pass over a machine pool.

    ``min_runtime_s``: a workload that has run less than this is never a victim.
    ``replacement_budget``: replacements in flight at most (the snapshot's in-flight count
    included); ``replacement_guard_s``: a workload is not replaced twice within this.
    ``min_machines``: idle reaping never leaves the pool with fewer machines.
    ``reuse_verdicts``: tell a waiting workload what one alike was told this pass (see
    :func:`_decide`); off only to check that it changes nothing.
    ``passed_over``: by workload id, the groups a waiting workload passes over after a
    failed launch (``fallback.seen_at``): its reason says so (:func:`told_passed_over`),
    told as its answer is made rather than in a second walk over the plan.
    """
    state = PoolState(snapshot)
    placements: list[Placement] = []
    preemptions: list[Preemption] = []
    pending: list[Pending] = []
    verdicts: dict[VerdictKey, Pending] | None = {} if reuse_verdicts else None
    holding, fit_and_take = state.holding, state.fit_and_take
    waiting, kinds = _queue(state)
    ids = list(map(_WORKLOAD_ID, map(FIELDS, waiting)))
    one_by_one = 0  # up to here, each workload of its run is looked at on its own
    at, n = 0, len(waiting)
    while at < n:
        workload, its_kind = waiting[at], kinds[at]
        at += 1
        # The common cases first, as _decide would take them: no room held for it, and alike
        # work was told it waits since the last move (then so is it), or the free room is
        # enough. A move forgets what alike work was told, as after _decide.
        own = workload.__dict__  # its fields (see FIELDS)
        if (
            verdicts
            and at > one_by_one
            and at + _RUN_AT_ONCE <= n
            and kinds[at + _RUN_AT_ONCE - 1] == its_kind  # a long run, maybe
            and its_kind in verdicts
        ):
            # Told, and so is the rest of its run of alike workloads (one verdict key, in a
            # row: a long queue that cannot move is a few runs, the held-out-shaped day's 726
            # waiting workloads 10) when it is long and none of it holds room: each is told
            # what alike work was (_told_too, or _told_too_over for one passing groups over),
            # looked up at once (_told_run). A short run is told workload by workload.
            end = _run_end(kinds, at - 1)
            run = ids[at - 1 : end]
            if end - at >= _RUN_AT_ONCE and holding.keys().isdisjoint(run):
                pending.extend(_told_run(verdicts[its_kind], run, passed_over))
                at = end
                continue
            one_by_one = end
        kind = None  # its verdict key, when looked up and not found
        if verdicts and own["workload_id"] not in holding:
            kind = its_kind
            known = verdicts.get(kind)
            if known is not None:
                gone = passed_over.get(own["workload_id"]) if passed_over else None
                pending.append(
                    _told_too(known, own["workload_id"])
                    if gone is None
                    else _told_too_over(known, own["workload_id"], gone)
                )
                continue
        if own["on_full"] == "fallback" and own["workload_id"] not in holding:
            done = fit_and_take(workload, own)
            if done is not None:
                takes, nodes = done
                placements.append(_placed(own, takes, nodes))
                if verdicts:
                    verdicts.clear()
                continue
            fits_now = False  # the free room is not enough: _decide need not look again
        else:
            fits_now = None  # not known yet
        moves, told = len(placements) + len(preemptions), len(pending)
        _decide(
            state,
            workload,
            now,
            min_runtime_s,
            placements,
            preemptions,
            pending,
            verdicts,
            fits_now,
            kind,
        )
        if passed_over and len(pending) != told:
            pending[told:] = told_passed_over(pending[told:], passed_over)
        if verdicts and len(placements) + len(preemptions) != moves:
            verdicts.clear()  # the room changed: what alike workloads were told may not hold
    if state.stopping:  # this pass's victims, and those stopping in the snapshot
        told = len(pending)
        pending.extend(
            Pending(
                workload_id=wid,
                code="stopping",
                reason="giving its machines back after being preempted"
                + (f" by {w.preempted_by}" if w.preempted_by else ""),
                preempted_by=w.preempted_by,
            )
            for wid, w in state.workloads.items()
            if w.phase == "stopping"
        )
        if passed_over:
            pending[told:] = told_passed_over(pending[told:], passed_over)
    replacements = plan_replacements(
        state, now, budget=replacement_budget, guard_s=replacement_guard_s
    )
    return Plan(
        pool=snapshot.pool,
        based_on=dict(snapshot.versions),
        computed_at=now,
        placements=tuple(placements),
        preemptions=tuple(preemptions),
        reservations=tuple(state.reservations()),
        replacements=tuple(replacements),
        reaps=tuple(plan_machine_reaps(state, now, min_machines)),
        pending=tuple(pending),
    )


_WORKLOAD_ID = itemgetter("workload_id")


def queue(state: PoolState) -> list[Workload]:
    """Pending workloads in the order they are considered (see the module docstring)."""
    return _queue(state)[0]


def _queue(state: PoolState, keep: bool = True) -> tuple[list[Workload], list[VerdictKey]]:
    """``queue`` and each of its workloads' verdict key (:func:`_verdict_key`): the order
    kept from the pool's last pass, updated by the workloads that changed
    (:func:`.queue_order.ordered`; ``keep`` off: worked out afresh)."""
    return ordered(state, keep)


def _verdict_key(state: PoolState, workload: Workload) -> VerdictKey:
    return (state.label_id(workload), KIND_FIELDS(workload.__dict__))


def _told_too(known: Pending, workload_id: str) -> Pending:
    """What ``known`` says, for this workload (``trusted.pending_for``). A long queue that
    cannot move is told the same pass after pass: the answer made for a workload is kept and
    given again while the verdict it was made from says the same (the models are frozen), so
    a pass makes no model per waiting workload, and what reads the answers next (the notes,
    the setbacks' reasons) finds the very object it saw before. The last two answers are
    kept, as :func:`.trusted.kept_or_made` keeps them (written out here: this is the pass's
    most frequent call): a full pool's verdict often goes back and forth between two texts
    (room held for others, then not) from one pass to the next."""
    said, fields_set = known.__dict__, known.__pydantic_fields_set__
    says = (said["code"], said["reason"], said["preempted_by"], said["budget"], fields_set)
    kept = _TOLD_TOO.get(workload_id)
    if kept is not None:
        for was, answer in kept:
            if was == says:
                return answer
    return trusted.kept_or_made(
        _TOLD_TOO, workload_id, says, trusted.pending_for, known, workload_id
    )


_TOLD_TOO: dict[str, list[tuple[Any, Pending]]] = {}
_TOLD_TOO_MAX = 50_000


# A run this long or longer (the rest of it, counted from its second workload) is told at
# once; a shorter one workload by workload, which costs less for a few.
_RUN_AT_ONCE = 8


def _run_end(kinds: Sequence[VerdictKey], at: int) -> int:
    """Where the run of equal verdict keys that holds ``at`` ends (found at C speed)."""
    kind = kinds[at]
    differs = map(ne, islice(kinds, at + 1, None), repeat(kind))
    return next(compress(itertools.count(at + 1), differs), len(kinds))


def _told_run(
    known: Pending, run: list[str], passed_over: Mapping[str, str] | None
) -> list[Pending]:
    """What ``known`` says, for each workload of ``run`` (their ids, in queue order): each
    one's :func:`_told_too` answer, or :func:`_told_too_over`'s for one that passes groups
    over. The answers made under a verdict are kept by workload and groups passed over, and
    looked up for the whole run at C speed: a long queue told the same pass after pass
    (runs that gain or lose a workload, setbacks that come and go) makes only the answers
    that are new."""
    said = known.__dict__
    says = (said["code"], said["reason"], said["preempted_by"], said["budget"])
    verdict = (says, frozenset(known.__pydantic_fields_set__))
    made = _TOLD_BY_VERDICT.get(verdict)
    if made is None:
        if len(_TOLD_BY_VERDICT) >= _VERDICTS_MAX:
            _TOLD_BY_VERDICT.clear()
        made = _TOLD_BY_VERDICT[verdict] = {}
    elif len(made) >= _TOLD_TOO_MAX:
        made.clear()
    if passed_over:
        asked = list(zip(run, map(passed_over.get, run), strict=True))
    else:
        asked = list(zip(run, repeat(None), strict=False))  # repeat: as long as the run
    answers = list(map(made.get, asked))
    missing = list(map(is_, answers, repeat(None)))
    if any(missing):
        for i in compress(range(len(answers)), missing):
            wid, over = asked[i]
            answer = _told_too(known, wid) if over is None else _told_too_over(known, wid, over)
            answers[i] = made[asked[i]] = answer
    return answers  # type: ignore[return-value]  # every None filled in


# Per verdict (what it says, its fields set): the answer made for each (workload, groups it
# passes over, None for none).
_TOLD_BY_VERDICT: dict[tuple[Any, ...], dict[tuple[str, str | None], Pending]] = {}
_VERDICTS_MAX = 256


def _told_too_over(known: Pending, workload_id: str, gone: str) -> Pending:
    """``told_passed_over([_told_too(known, workload_id)], {workload_id: gone})[0]``, made
    at once (one model, not two), and kept as :func:`_told_too` keeps its answers: given
    again while the verdict and the groups passed over are equal."""
    said, fields_set = known.__dict__, known.__pydantic_fields_set__
    kept = _TOLD_OVER.get(workload_id)
    if (
        kept is not None
        and (kept[0] is said or kept[0] == said)
        and kept[1] == fields_set
        and kept[2] == gone
    ):
        return kept[3]
    told = trusted.updated(
        known, {"workload_id": workload_id, "reason": _passed_over_reason(said["reason"], gone)}
    )
    if len(_TOLD_OVER) >= _TOLD_TOO_MAX:
        _TOLD_OVER.clear()
    _TOLD_OVER[workload_id] = (said, fields_set, gone, told)
    return told


_TOLD_OVER: dict[str, tuple[dict[str, Any], set[str], str, Pending]] = {}


def told_passed_over(pending: Sequence[Pending], passed_over: Mapping[str, str]) -> list[Pending]:
    """Each answer of a workload that passes groups over after a failed launch
    (``passed_over``: by id, the groups as ``fallback.passed_over`` says them) with them
    added to its reason: it speaks of the groups it may use, not of the ones it waits to use
    again. A workload backing off is told so already."""
    return [
        trusted.updated(p, {"reason": _passed_over_reason(p.reason, passed_over[p.workload_id])})
        if p.workload_id in passed_over and p.code != "backing_off"
        else p
        for p in pending
    ]


def _passed_over_reason(reason: str, gone: str) -> str:
    return f"{reason}; passed over after a failed launch: {gone}"


def _decide(
    state: PoolState,
    workload: Workload,
    now: float,
    min_runtime_s: float,
    placements: list[Placement],
    preemptions: list[Preemption],
    pending: list[Pending],
    verdicts: dict[VerdictKey, Pending] | None = None,
    fits_now: bool | None = None,
    kind: VerdictKey | None = None,
) -> None:
    """Place, preempt for, or explain one workload. ``verdicts``: kinds of workload found
    unplaceable, with no victim to take, since the pass last placed or preempted. Nothing
    changed since, so another of the same kind waits for the very same reason, and is told
    so without walking the partitions again: a pass over a long queue that cannot move costs
    the kinds waiting, not the queue. Any placement or preemption forgets them all.
    ``fits_now``: False when the caller just found its free room short (None: not known).
    ``kind``: its verdict key, when the caller just looked it up and found nothing."""
    books = state.books_for(workload)
    wid = workload.workload_id
    held = [b for b in books if b.reserved.get(wid)] if state.holds_room(wid) else []
    key = kind  # its kind, worked out only when a verdict is looked up or kept
    if not held and verdicts and key is None:
        key = _verdict_key(state, workload)
        known = verdicts.get(key)
        if known is not None:
            pending.append(trusted.pending_for(known, wid))
            return
    if held:
        takes, short = state.fit(workload, books)
        if not short:
            placements.append(_place(state, workload, takes))
            return
        if _still_stopping(state, held):
            pending.append(_waiting(state, workload, held))
            return
        state.drop_reservations(wid)  # the hold no longer covers it: decide afresh
        if verdicts:
            verdicts.clear()  # the room it held is free again
    short_now = fits_now is False  # its free room, as the pass stands, is known short
    if workload.on_full == "fallback" and not short_now:
        takes, short = state.fit(workload, books)
        if not short:
            placements.append(_place(state, workload, takes))
            return
        short_now = True
    # Without a victim anywhere, choosing victims comes to the free room, just found short.
    choice = (
        None
        if short_now and not state.any_preemptible
        else choose_victims(state, workload, now, min_runtime_s)
    )
    if choice is None:
        why = explain_pending(state, workload, now, min_runtime_s)
        pending.append(why)
        if not held and verdicts is not None:
            verdicts[key if key is not None else _verdict_key(state, workload)] = why
    elif not choice.victims:
        placements.append(_place(state, workload, [(state.books[k], n) for k, n in choice.takes]))
    else:
        preemptions.extend(_preempt(state, workload, choice))
        pending.append(_waiting(state, workload, [state.books[k] for k, _ in choice.takes]))


def _place(state: PoolState, workload: Workload, takes: Sequence[tuple[Book, int]]) -> Placement:
    state.drop_reservations(workload.workload_id)
    if len(takes) == 1:
        book, count = takes[0]
        nodes = state.take(book, workload, count)
        where = f"{count} on {book.label}"
    else:
        nodes = []
        for book, count in takes:
            nodes.extend(state.take(book, workload, count))
        where = ", ".join(f"{count} on {book.label}" for book, count in takes)
    return _placed(workload.__dict__, takes, nodes, where)


def _placed(
    own: Mapping[str, Any],
    takes: Sequence[tuple[Book, int]],
    nodes: Sequence[NodeAssignment],
    where: str | None = None,
) -> Placement:
    """The placement of these nodes for the workload whose FIELDS are ``own``, booked in
    these partitions (``where``: as text)."""
    if where is None:
        if len(takes) == 1:
            book, count = takes[0]
            where = book.on(count)
        else:
            where = ", ".join([book.on(count) for book, count in takes])
    order = own["group_order"]
    if takes and order and takes[0][0].machine_type != order[0]:
        where = f"{where} ({order[0]} had no room for it)"
    return trusted.placement(
        own["workload_id"], tuple(nodes), f"placed {own['num_nodes']} node(s): {where}"
    )


def _preempt(state: PoolState, preemptor: Workload, choice: Choice) -> list[Preemption]:
    out = []
    for victim in choice.victims:
        state.stopping.add(victim.workload_id)
        machines = tuple(m.machine_id for m in state.machines_of.get(victim.workload_id, ()))
        out.append(
            Preemption(
                workload_id=victim.workload_id,
                preempted_by=preemptor.workload_id,
                machine_ids=machines,
                reason=(
                    f"preempted by {preemptor.workload_id} (priority {preemptor.priority}); "
                    f"requeued at its original place"
                ),
            )
        )
    for key, count in choice.takes:
        state.reserve(state.books[key], preemptor, count)
    return out


def _still_stopping(state: PoolState, held: Sequence[Book]) -> bool:
    """Whether work that is giving machines back still holds some where this hold is."""
    return any(_stops_for(state, victim, held) for victim in state.stopping)


def _waiting(state: PoolState, workload: Workload, held: Sequence[Book]) -> Pending:
    wid = workload.workload_id
    where = ", ".join(f"{b.reserved.get(wid, 0)} on {b.label}" for b in held)
    victims = sorted(v for v in state.stopping if _stops_for(state, v, held))
    names = ", ".join(victims) or "preempted work"
    return Pending(
        workload_id=wid,
        code="waiting_for_preemption",
        reason=f"room held for it ({where}) while {names} stop(s)",
    )


def _stops_for(state: PoolState, victim_id: str, held: Sequence[Book]) -> bool:
    """Whether this stopping workload holds machines in any of these partitions."""
    keys = {b.key for b in held}
    return any((m.machine_type, m.partition) in keys for m in state.machines_of.get(victim_id, ()))


# --------------------------------------------------------------------------- why pending
def explain_pending(
    state: PoolState, workload: Workload, now: float, min_runtime_s: float
) -> Pending:
    """Why a workload could not be placed, partition by partition, as one reason code and a
    line of text (``corral why``)."""
    books = state.books_for(workload)
    parts: list[str] = []
    allowed_cap = 0
    free_total = 0
    quota_bound = False
    for book in books:
        access = state.access(book, workload)
        if access.denial is not None:
            parts.append(f"{book.label}: {access.denial}")
            continue
        allowed_cap += book.size if access.quota is None else min(book.size, access.quota)
        room = state.room(book, workload, access=access)
        free_total += room
        others = book.reserved_for_others(workload.workload_id)
        parts.append(_book_status(book, access, others))
        bare = book.size - book.held - others
        if access.quota is not None and room < max(0, bare):
            quota_bound = True
    code: PendingCode
    if not books:
        code, head = "no_fitting_machine", "no machine type of its group order is in this pool"
    elif allowed_cap == 0:
        code, head = "rule_denies", "no partition of its groups lets it in"
    elif allowed_cap < workload.num_nodes:
        code = "no_fitting_machine"
        head = f"needs {workload.num_nodes} nodes; the partitions open to it hold {allowed_cap}"
    else:
        code = "quota_reached" if quota_bound else "partition_full"
        head = f"needs {workload.num_nodes} node(s), {free_total} free to it"
    young = (
        protected(state, workload, now, min_runtime_s)
        if code in ("partition_full", "quota_reached")
        else None
    )
    if young:
        names = ", ".join(sorted(w.workload_id for w in young))
        head += f"; lower work ({names}) has run less than min_runtime_s"
    if workload.preempted_by and code in ("partition_full", "quota_reached"):
        code = "preempted"
        head = f"preempted by {workload.preempted_by}, queued at its original place; " + head
    return trusted.pending(
        workload.workload_id,
        code,
        head + (": " + "; ".join(parts) if parts else ""),
        workload.preempted_by,
    )


def _book_status(book: Book, access: Access, others: int) -> str:
    """What a partition holds, as ``corral why`` shows it (``others``: held for others)."""
    text = f"{book.label}: {book.held} of {book.size} held"
    if others:
        text += f", {others} held for others"
    if access.quota is not None and access.rule is not None:
        rule = book.rules[access.rule].selector.text or "(empty selector)"
        used = book.rule_used[access.rule]
        text += f"; rule {rule!r} quota {used} of {access.quota} used"
    if book.no_launch is not None:
        text += f"; {book.no_launch}"
    return text
