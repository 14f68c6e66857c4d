"""Failover: after a zone fails, the next candidate is chosen in the same task, walking the
scopes outwards (the rest of its region, the cloud's other regions, the rest of the chain)
without a broker message per level, and one attempt is published on its cloud's queue. Every
step is idempotent by a compare-and-set on the request's position. The choice itself is
:func:`corral.shared.failover.next_step`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
from corral.shared.blocking import Block, Placed, place_key
from corral.shared.errors import Scope
from corral.shared.failover import WIDER, Within, next_step
from corral.shared.lifecycle import RequestState
from corral.shared.records import ChainStep, LaunchRequest, Waiting
from corral.shared.waiting import (
    WaitTerms,
    backoff_of,
    decide_wait,
    lifted_by_release,
    looking_since,
    retry_rng,
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


NEXT = "next "  # advance's answer when the caller runs the next attempt itself: NEXT + step


Ended = tuple[str, str, str | None]  # (attempt id, outcome, error) of an attempt that failed


def after_failure(
    deps: Deps,
    req: LaunchRequest,
    step: int,
    scope: Scope,
    inline: str | None = None,
    *,
    ended: Ended | None = None,
    current: LaunchRequest | None = None,
    written: list[LaunchRequest] | None = None,
) -> str:
    """A zone attempt failed: walk on to the next candidate now, in this task (an invalid
    request fails now). ``inline``: the cloud whose next attempt the caller runs itself.
    ``ended``: the failed attempt's outcome, written in the same compare-and-set.
    ``current``: ``req`` is as just read or written (the write starts from it).
    ``written``: as for :func:`advance`."""
    if scope == Scope.REQUEST:
        if ended is not None:
            finish_attempt(deps, req.id, *ended)
        fail_request(
            deps,
            req.id,
            "the cloud refused the request as invalid",
            expected={RequestState.PROVISIONING},
            step=step,
        )
        return "failed"
    outcome = advance(
        deps,
        req.id,
        step,
        Within.REGION,
        inline=inline,
        ended=ended,
        current=current,
        written=written,
    )
    return "failed over" if outcome.startswith("attempt") else outcome


def advance(
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
    written: list[LaunchRequest] | None = None,
) -> str:
    """Walk the failover steps from ``within`` outwards (the rest of the region, then the
    cloud's other regions, then the rest of the chain) in one go, and publish the one attempt
    chosen, or fail the request when nothing is left. One task whatever the scope: no broker
    message and no re-read of the request per level (the step tasks of each scope still
    arrive here, from a system upgraded mid-chain, and walk on from their own scope).

    With ``chain`` (admission: ``after`` is -1 and the request PENDING), the request takes the
    chain and moves to PROVISIONING (``why``) in the same write that picks its first step.
    With ``inline`` (a cloud), a next attempt on that cloud is not published: the answer is
    ``NEXT`` and its step, for the caller (an attempt task of that cloud) to run; that
    attempt (try 0) is recorded in the same write, so the caller need not write the request
    again to start it, and the record as written is appended to ``written`` for the caller
    to start from without reading it again (only if this write started it: an attempt found
    there already may have been launched by an earlier delivery, so the caller reads afresh).
    ``current``: the request as the caller just read it (the write starts from it)."""
    scope = Within(within)
    now = deps.now()
    remembered = deps.blocks.active(now)
    blocks = [b.block for b in remembered]
    found: dict[str, Any] = {}

    def move_on(r: LaunchRequest) -> bool:
        found.clear()  # a run after a lost race decides afresh
        if chain is not None:
            if r.state != RequestState.PENDING:
                return False
            r.chain, r.next_step = list(chain), -1
            r.move(RequestState.PROVISIONING, now, why or f"planned {len(chain)} candidates")
        elif r.state != RequestState.PROVISIONING or r.next_step != after:
            # Moved on meanwhile: only the failed attempt's outcome is left to write.
            return ended is not None and end_attempt(r, ended[0], ended[1], now, ended[2])
        if ended is not None:
            end_attempt(r, ended[0], ended[1], now, ended[2])
        decision = next_step(r.chain, after, blocks, scope)
        level = scope
        while decision.action == "escalate":
            level = WIDER[level]
            decision = next_step(r.chain, after, blocks, level)
        found["decision"] = decision
        # The widest look passed over every block the narrower ones saw: each told once (and
        # not again on each walk of a waiting request: `why` names the blocks it waits on).
        rewalk = r.history[-1].from_state == RequestState.WAITING.value
        for index, block in () if rewalk else decision.passed_over:
            reason = blocked_reason(block, next((b for b in remembered if b.block == block), None))
            add_attempt(r, f"{r.id}-{r.generation}-{index}-blocked", r.chain[index], now,
                        "blocked", reason)  # fmt: skip
        found["recorded"] = found["started"] = False
        if decision.index is None:
            exhausted(deps, r, now, [(b.block, b.until) for b in remembered])
            return True
        r.next_step = decision.index
        if inline is not None and r.chain[decision.index].cloud == inline:
            # The caller runs it now: its attempt starts in this write, not in one more.
            step = decision.index
            # Started by this write (not found there already): the caller may take the
            # record as it wrote it, and knows no earlier delivery launched it.
            found["started"] = add_attempt(r, attempt_id_for(r, step, 0), r.chain[step], now)
            found["recorded"] = True
        return True

    updated = deps.store.update_request(request_id, move_on, current=current)
    decision = found.get("decision")
    if updated is None or decision is None:
        return "stale" if chain is None else "raced"
    # The progress lines of this write, in one command.
    lines = [f"state: PROVISIONING ({len(chain)} candidates)"] if chain is not None else []
    if decision.index is None:
        if updated.state == RequestState.FAILED:
            deps.store.append_events(request_id, [*lines, f"state: FAILED ({updated.error})"], now)
            return "failed"
        if updated.state == RequestState.WAITING:
            waiting = f"state: WAITING ({updated.history[-1].reason})"
            deps.store.append_events(request_id, [*lines, waiting], now)
            return "waiting"
        deps.store.append_events(request_id, lines, now)
        return "stale"
    if updated.state != RequestState.PROVISIONING or updated.next_step != decision.index:
        deps.store.append_events(request_id, lines, now)
        return "stale"
    if found["recorded"]:
        deps.store.append_events(request_id, [*lines, attempt_line(updated, decision.index)], now)
        if written is not None and found["started"]:
            written.append(updated)
        return f"{NEXT}{decision.index}"
    deps.store.append_events(request_id, lines, now)
    send_attempt(deps, updated, decision.index)
    return f"attempt {decision.index}"


def exhausted(deps: Deps, r: LaunchRequest, now: float, blocks: list[tuple[Block, float]]) -> None:
    """``r``'s chain is walked to its end with nothing launched (inside a compare-and-set):
    it waits for capacity (WAITING, with when it walks the chain again), or, if it asked to
    fail fast or its ``max_wait`` has passed, it FAILS
    (:func:`corral.shared.waiting.decide_wait`)."""
    tried = sum(a.outcome not in (None, "blocked") for a in r.attempts)
    verdict = f"all {len(r.chain)} candidates failed or are blocked ({tried} tried)"
    since = looking_since(r.created_at, r.history)
    last = r.waiting
    retries = last.retries if last is not None and last.since == since else 0
    terms = WaitTerms.of(r.task)
    decided = decide_wait(
        now=now,
        since=since,
        retries=retries,
        retry_until_up=terms.retry_until_up,
        max_wait_s=terms.max_wait_s,
        expiries=[until for _, until in waits_on(r.chain, blocks)],
        backoff=backoff_of(deps.settings.timers),
        rng=retry_rng(r.id, retries),
        candidates=len(r.chain),
    )
    if decided.action == "fail":
        r.error = f"{verdict}; {decided.reason}"
        if last is not None and last.since == since:
            r.waiting = last.model_copy(update={"retry_at": None, "reason": decided.reason})
        r.move(RequestState.FAILED, now, r.error)
        return
    r.waiting = Waiting(
        since=since,
        retries=retries,
        retry_at=decided.retry_at,
        deadline=decided.deadline,
        because=decided.because,
        reason=decided.reason,
    )
    r.next_step = -1  # the next walk starts from the top of the chain
    r.move(RequestState.WAITING, now, f"{verdict}; {decided.reason}")


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
    woke: list[int] = []
    renewed_ends: list[float] = []

    def due(r: LaunchRequest) -> bool:
        woke.clear()  # a run after a lost race decides afresh
        renewed_ends.clear()
        wait = r.waiting
        if r.state != RequestState.WAITING or wait is None:
            return False
        if not freed and wait.retry_at is not None and wait.retry_at > now:
            return False
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
                renewed_ends.append(renewed.retry_at or now)
                return True
        r.waiting = wait.model_copy(update={"retries": wait.retries + 1, "retry_at": None})
        r.walks += 1  # new attempt ids: the last walk's failures are not this walk's
        r.next_step = -1
        why = "capacity freed in its chain" if freed else "walk the chain again"
        r.move(RequestState.PROVISIONING, now, f"retry {wait.retries + 1}: {why}")
        woke.append(wait.retries + 1)
        return True

    updated = deps.store.update_request(request_id, due)
    if updated is None:
        return "missing"
    if renewed_ends:
        return "still blocked"
    if not woke or updated.state != RequestState.PROVISIONING:
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
