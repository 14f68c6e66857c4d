"""Failover: after a zone fails, the next candidate is chosen in the same task, walking the
scopes outwards (the rest of its region, the cloud's other regions, the rest of the chain)
without a broker message per level, and one attempt is published on its cloud's queue. Every
step is idempotent by a compare-and-set on the request's position. The choice itself is
:func:`corral.shared.failover.next_step`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from corral.services.queues import dispatch
from corral.services.runtime.attempt_record import (
    add_attempt,
    attempt_id_for,
    attempt_line,
    blocked_reason,
    end_attempt,
    fail_request,
    finish_attempt,
)
from corral.services.runtime.deps import Deps
from corral.services.state.blocks import RememberedBlock
from corral.shared.blocking import Block, Placed, place_key
from corral.shared.errors import Scope
from corral.shared.failover import Within
from corral.shared.failover_plan import (
    Attempt,
    Decision,
    Fail,
    Snapshot,
    WaitPolicy,
    WaitUntil,
    plan_step,
)
from corral.shared.lifecycle import RequestState
from corral.shared.records import ChainStep, LaunchRequest, Waiting
from corral.shared.waiting import (
    Backoff,
    WaitTerms,
    backoff_of,
    lifted_by_release,
    looking_since,
    still_blocked,
    waits_on,
    woken_by_release,
)

STEP_TASKS = {
    Within.REGION: dispatch.RETRY_REGION,
    Within.CLOUD: dispatch.RETRY_CLOUD,
    Within.ANY: dispatch.NEXT_CLOUD,
}


def send_step(deps: Deps, req: LaunchRequest, after: int, within: Within) -> None:
    """Queue the failover step ``within`` for ``req``, after chain position ``after``."""
    cloud = req.chain[after].cloud if after >= 0 and within != Within.ANY else None
    dispatch.send(
        STEP_TASKS[within],
        [req.id, after],
        queue=dispatch.provision_queue(cloud),
        settings=deps.settings,
    )


def send_attempt(
    deps: Deps, req: LaunchRequest, step: int, try_no: int = 0, countdown: float | None = None
) -> None:
    """Queue the zone attempt for chain position ``step`` on its cloud's queue."""
    dispatch.send(
        dispatch.ATTEMPT,
        [req.id, step, try_no],
        queue=dispatch.provision_queue(req.chain[step].cloud),
        countdown=countdown,
        settings=deps.settings,
    )


def resume(deps: Deps, req: LaunchRequest) -> None:
    """Hand a PROVISIONING request to whatever its position calls for (after a crash, or from
    the watchdog): the next step if nothing was chosen yet, else its current attempt."""
    if req.next_step < 0:
        send_step(deps, req, -1, Within.ANY)
    else:
        send_attempt(deps, req, req.next_step)


Ended = tuple[str, str, str | None]  # (attempt id, outcome, error) of an attempt that failed


@dataclass(frozen=True, slots=True)
class Walked:
    """What a step of the walk did. ``outcome``: the step task's result (``attempt 3``,
    ``failed``, ``waiting``, ``stale``, ``raced``, ...). ``run_here``: the chain position the
    caller (an attempt task of that cloud) runs now, its attempt recorded by this write;
    ``written``: the request as this write left it, when the write started that attempt (the
    caller starts from it without reading it again); ``published``: the chain position whose
    attempt was published on its cloud's queue; ``decision``: what was planned; ``claimed``:
    the owner under which the write took the claim of the attempt it started (the caller
    holds it: :func:`~corral.services.runtime.provisioning.attempt` does not take it again)."""

    outcome: str
    run_here: int | None = None
    written: LaunchRequest | None = None
    published: int | None = None
    decision: Decision | None = None
    claimed: str | None = None


def after_failure(
    deps: Deps,
    req: LaunchRequest,
    step: int,
    scope: Scope,
    inline: str | None = None,
    *,
    ended: Ended | None = None,
    current: LaunchRequest | None = None,
    lines: Sequence[str] = (),
    remembered: Sequence[RememberedBlock] | None = None,
) -> Walked:
    """A zone attempt failed: walk on to the next candidate now, in this task (an invalid
    request fails now). ``inline``: the cloud whose next attempt the caller runs itself.
    ``ended``: the failed attempt's outcome, written in the same compare-and-set.
    ``current``: ``req`` is as just read or written (the write starts from it). ``lines``:
    the caller's progress lines (the failure's), written first, with the walk's own.
    ``remembered``: the blocks as the caller just read them (else the walk reads them)."""
    if scope == Scope.REQUEST:
        deps.store.append_events(req.id, lines, deps.now())
        if ended is not None:
            finish_attempt(deps, req.id, *ended)
        fail_request(
            deps,
            req.id,
            "the cloud refused the request as invalid",
            expected={RequestState.PROVISIONING},
            step=step,
        )
        return Walked("failed")
    walked = walk(deps, req.id, step, Within.REGION, inline=inline, ended=ended, current=current,
                  lines=lines, remembered=remembered)  # fmt: skip
    if walked.published is not None:
        return replace(walked, outcome="failed over")
    return walked


def advance(deps: Deps, request_id: str, after: int, within: Within | str) -> str:
    """A failover step task (``retry_region``, ``retry_cloud``, ``next_cloud``): :func:`walk`
    on from chain position ``after``; returns what it did."""
    return walk(deps, request_id, after, within).outcome


def walk(
    deps: Deps,
    request_id: str,
    after: int,
    within: Within | str,
    *,
    chain: list[ChainStep] | None = None,
    why: str | None = None,
    inline: str | None = None,
    ended: Ended | None = None,
    current: LaunchRequest | None = None,
    lines: Sequence[str] = (),
    remembered: Sequence[RememberedBlock] | None = None,
) -> Walked:
    """Walk the failover steps from ``within`` outwards (the rest of the region, then the
    cloud's other regions, then the rest of the chain) in one go, and publish the one attempt
    chosen, or make the request wait or fail when nothing is left. Plan, then apply: the
    decision is :func:`corral.shared.failover_plan.plan_step`'s, from a snapshot of the
    request as read, and it is written in one compare-and-set (planned again from the fresh
    record if another writer got in first). One task whatever the scope: no broker message and
    no re-read of the request per level.

    With ``chain`` (admission: ``after`` is -1 and the request PENDING), the request takes the
    chain and moves to PROVISIONING (``why``) in the same write that picks its first step.
    With ``inline`` (a cloud), a next attempt on that cloud is not published: the answer's
    ``run_here`` is its step, for the caller (an attempt task of that cloud) to run; that
    attempt (try 0) is recorded in the same write, so the caller need not write the request
    again to start it, and the answer's ``written`` is the record as written, for the caller to
    start from without reading it again (only if this write started it: an attempt found
    there already may have been launched by an earlier delivery, so the caller reads afresh).
    ``current``: the request as the caller just read it (the write starts from it).
    ``lines``: the caller's progress lines, written first in the walk's one command.
    ``remembered``: the blocks as the caller just read them (those still in force now are
    walked against), else they are read here."""
    scope = Within(within)
    now = deps.now()
    if remembered is None:
        remembered = deps.blocks.active(now)
    else:
        remembered = [b for b in remembered if b.until > now]
    blocks = [(b.block, b.until) for b in remembered]
    backoff = backoff_of(deps.settings.timers)

    def plan_and_apply(r: LaunchRequest) -> tuple[bool, tuple[Decision, bool] | None]:
        if chain is not None:
            if r.state != RequestState.PENDING:
                return False, None
            r.chain, r.next_step = list(chain), -1
            r.move(RequestState.PROVISIONING, now, why or f"planned {len(chain)} candidates")
        elif r.state != RequestState.PROVISIONING or r.next_step != after:
            # Moved on meanwhile: only the failed attempt's outcome is left to write.
            return ended is not None and end_attempt(r, ended[0], ended[1], now, ended[2]), None
        if ended is not None:
            end_attempt(r, ended[0], ended[1], now, ended[2])
        snap = snapshot(r, after, scope, blocks, now, backoff)
        decision = plan_step(snap)
        return True, (decision, apply(r, decision, snap, remembered, inline))

    def written_lines(r: LaunchRequest, applied: tuple[Decision, bool] | None) -> list[str]:
        # The progress lines of this write, written by its script (one round trip).
        return [] if applied is None else _progress(r, applied[0], lines, chain, inline)

    def claim_of(r: LaunchRequest, applied: tuple[Decision, bool] | None) -> str | None:
        # The claim of the attempt this write starts for the caller to run, taken by its
        # script too: the attempt is never started and unclaimed, and costs no round trip.
        if applied is None or not applied[1] or not isinstance(applied[0], Attempt):
            return None
        return f"attempt:{attempt_id_for(r, applied[0].index, 0)}"

    owner = None if inline is None else uuid.uuid4().hex
    claim = None if owner is None else (claim_of, owner, deps.settings.timers.claim_ttl_s)
    updated, applied, claimed = deps.store.decide_request_claiming(
        request_id, plan_and_apply, current=current, log=(written_lines, now), claim=claim
    )
    if updated is None or applied is None:
        if updated is not None:
            deps.store.append_events(request_id, lines, now)
        return Walked("stale" if chain is None else "raced")
    decision, started = applied  # written, with its lines
    if not isinstance(decision, Attempt):
        if updated.state == RequestState.FAILED:
            return Walked("failed", decision=decision)
        if updated.state == RequestState.WAITING:
            return Walked("waiting", decision=decision)
        return Walked("stale", decision=decision)
    step = decision.index
    if updated.state != RequestState.PROVISIONING or updated.next_step != step:
        return Walked("stale", decision=decision)
    if inline is not None and updated.chain[step].cloud == inline:
        return Walked(f"run {step} here", step, updated if started else None, decision=decision,
                      claimed=owner if claimed else None)  # fmt: skip
    send_attempt(deps, updated, step)
    return Walked(f"attempt {step}", published=step, decision=decision)


def _progress(
    r: LaunchRequest,
    decision: Decision,
    lines: Sequence[str],
    chain: list[ChainStep] | None,
    inline: str | None,
) -> list[str]:
    """A walk's progress lines for the record ``r`` as its write leaves it: the caller's
    ``lines``, the move to PROVISIONING (admission), and what was decided (FAILED, WAITING,
    or the attempt the caller runs itself)."""
    out = [
        *lines,
        *([f"state: PROVISIONING ({len(chain)} candidates)"] if chain is not None else []),
    ]
    if not isinstance(decision, Attempt):
        if r.state == RequestState.FAILED:
            return [*out, f"state: FAILED ({r.error})"]
        if r.state == RequestState.WAITING:
            return [*out, f"state: WAITING ({r.history[-1].reason})"]
        return out
    step = decision.index
    here = inline is not None and r.chain[step].cloud == inline
    if here and r.state == RequestState.PROVISIONING and r.next_step == step:
        return [*out, attempt_line(r, step)]
    return out


def snapshot(
    r: LaunchRequest,
    after: int,
    within: Within,
    blocks: list[tuple[Block, float]],
    now: float,
    backoff: Backoff,
) -> Snapshot:
    """What :func:`plan_step` decides ``r``'s next step from: its chain and position, the
    blocks in force, its task's wait terms and where its wait stands."""
    since = looking_since(r.created_at, r.history)
    last = r.waiting
    retries = last.retries if last is not None and last.since == since else 0
    wait = WaitPolicy(WaitTerms.of(r.task), backoff, since, retries, r.id)
    tried = sum(a.outcome not in (None, "blocked") for a in r.attempts)
    return Snapshot(r.chain, after, within, blocks, now, wait, tried)


def apply(
    r: LaunchRequest,
    decision: Decision,
    snap: Snapshot,
    remembered: Sequence[RememberedBlock],
    inline: str | None,
) -> bool:
    """Write ``decision`` into ``r`` (inside the compare-and-set): the blocks it passed over
    as blocked attempts, then its step chosen, or the wait, or the failure. Returns whether
    this write started the attempt the caller runs itself (``inline``)."""
    now = snap.now
    # The widest look passed over every block the narrower ones saw: each told once (and
    # not again on each walk of a waiting request: `why` names the blocks it waits on).
    rewalk = r.history[-1].from_state == RequestState.WAITING.value
    for index, block in () if rewalk else decision.passed_over:
        reason = blocked_reason(block, next((b for b in remembered if b.block == block), None))
        add_attempt(r, f"{r.id}-{r.generation}-{index}-blocked", r.chain[index], now,
                    "blocked", reason)  # fmt: skip
    last = r.waiting
    match decision:
        case Attempt(index=step):
            r.next_step = step
            if inline is not None and r.chain[step].cloud == inline:
                # The caller runs it now: its attempt starts in this write, not in one more.
                # Started by this write (not found there already): the caller may take the
                # record as it wrote it, and knows no earlier delivery launched it.
                return add_attempt(r, attempt_id_for(r, step, 0), r.chain[step], now)
        case Fail():
            r.error = decision.text
            if last is not None and snap.wait is not None and last.since == snap.wait.since:
                r.waiting = last.model_copy(update={"retry_at": None, "reason": decision.reason})
            r.move(RequestState.FAILED, now, r.error)
        case WaitUntil():
            r.waiting = Waiting(
                since=decision.since,
                retries=decision.retries,
                retry_at=decision.at,
                deadline=decision.deadline,
                because=decision.because,
                reason=decision.reason,
            )
            r.next_step = -1  # the next walk starts from the top of the chain
            r.move(RequestState.WAITING, now, f"{decision.verdict}; {decision.reason}")
    return False


def wake(deps: Deps, request_id: str, *, freed: bool = False) -> str:
    """A WAITING request whose retry is due walks its whole chain again (blocks that have
    expired meanwhile are tried): PROVISIONING in a new launch generation, its first step
    chosen and published in the same go (:func:`advance`). Idempotent: a request not
    WAITING, or not due, is left alone. One that waits because every candidate was blocked
    walks only if a block it waits on has ended; if every one was renewed meanwhile (other
    requests tried those places and failed), it waits on for their new ends without a walk
    (:func:`corral.shared.waiting.still_blocked`): ``still blocked``. ``freed``: one of our
    machines in a place of its chain just ended (:func:`capacity_freed`): it walks now,
    whenever its retry was due."""
    now = deps.now()
    blocks = [(b.block, b.until) for b in deps.blocks.active(now)]

    def due(r: LaunchRequest) -> tuple[bool, str | None]:
        wait = r.waiting
        if r.state != RequestState.WAITING or wait is None:
            return False, None
        if not freed and wait.retry_at is not None and wait.retry_at > now:
            return False, None
        if not freed and wait.because == "block_expiry":
            waited = waits_on(r.chain, blocks)
            ends = [until for _, until in waited]
            if len(waited) < len(r.chain):
                ends.append(0.0)  # a candidate no block covers now: its blocks have ended
            renewed = still_blocked(now=now, ends=ends, retries=wait.retries,
                                    deadline=wait.deadline)  # fmt: skip
            if renewed is not None:
                r.waiting = wait.model_copy(
                    update={
                        "retry_at": renewed.retry_at,
                        "because": renewed.because,
                        "reason": renewed.reason,
                    }
                )
                return True, "still blocked"
        r.waiting = wait.model_copy(update={"retries": wait.retries + 1, "retry_at": None})
        r.walks += 1  # new attempt ids: the last walk's failures are not this walk's
        r.next_step = -1
        why = "capacity freed in its chain" if freed else "walk the chain again"
        r.move(RequestState.PROVISIONING, now, f"retry {wait.retries + 1}: {why}")
        return True, "woke"

    updated, verdict = deps.store.decide_request(request_id, due)
    if updated is None:
        return "missing"
    if verdict == "still blocked":
        return verdict
    if verdict != "woke" or updated.state != RequestState.PROVISIONING:
        return "not due"
    deps.store.append_event(request_id, f"state: PROVISIONING ({updated.history[-1].reason})", now)
    return advance(deps, request_id, -1, Within.ANY)


def wake_due(deps: Deps, counts: dict[str, int] | None = None) -> int:
    """Wake every WAITING direct request whose retry is due (reconcile's pass, on beat)."""
    now = deps.now()
    woken = 0
    for req in deps.store.list_requests(state=RequestState.WAITING, limit=1000, oldest_first=True):
        wait = req.waiting
        if wait is not None and wait.retry_at is not None and wait.retry_at > now:
            continue
        if wake(deps, req.id) not in ("not due", "missing", "still blocked"):
            woken += 1
    if counts is not None and woken:
        counts["woken"] += woken
    return woken


def capacity_freed(deps: Deps, ended: Sequence[Placed]) -> list[str]:
    """Our machines at these places ended on purpose (their job is over, or their user ended
    them): the blocks they lift end now (:func:`corral.shared.waiting.lifted_by_release`), and
    the oldest WAITING requests whose chains hold those places walk them at once, one per
    machine (:func:`corral.shared.waiting.woken_by_release`). Returns the ids woken. Costs two
    reads when nothing is blocked there and nothing waits."""
    if not ended:
        return []
    lifted = {b: None for place in ended for b in lifted_by_release(place)}
    if not deps.blocks.lift(list(lifted)) and not deps.store.count_requests(RequestState.WAITING):
        return []
    waiting = deps.store.list_requests(state=RequestState.WAITING, limit=1000, oldest_first=True)
    chosen = woken_by_release(
        [place_key(p) for p in ended], [(r.id, r.chain) for r in waiting if r.waiting is not None]
    )
    return [rid for rid in chosen if wake(deps, rid, freed=True) not in ("not due", "missing")]
