"""Failover: after a zone fails, the next candidate is chosen in the same task, walking the
scopes outwards (the rest of its region, the cloud's other regions, the rest of the chain)
without a broker message per level, and one attempt is published on its cloud's queue. Every
step is idempotent by a compare-and-set on the request's position. The choice itself is
:func:`corral.shared.failover.next_step`.
"""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime.account import add_attempt, end_attempt, fail_request, finish_attempt
from corral.services.runtime.deps import Deps
from corral.shared.errors import Scope
from corral.shared.failover import WIDER, Within, next_step
from corral.shared.lifecycle import RequestState
from corral.shared.records import ChainStep, LaunchRequest

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
) -> str:
    """A zone attempt failed: walk on to the next candidate now, in this task (an invalid
    request fails now). ``inline``: the cloud whose next attempt the caller runs itself.
    ``ended``: the failed attempt's outcome, written in the same compare-and-set."""
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
    outcome = advance(deps, req.id, step, Within.REGION, inline=inline, ended=ended)
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
) -> str:
    """Walk the failover steps from ``within`` outwards (the rest of the region, then the
    cloud's other regions, then the rest of the chain) in one go, and publish the one attempt
    chosen, or fail the request when nothing is left. One task whatever the scope: no broker
    message and no re-read of the request per level (the step tasks of each scope still
    arrive here, from a system upgraded mid-chain, and walk on from their own scope).

    With ``chain`` (admission: ``after`` is -1 and the request PENDING), the request takes the
    chain and moves to PROVISIONING (``why``) in the same write that picks its first step.
    With ``inline`` (a cloud), a next attempt on that cloud is not published: the answer is
    ``NEXT`` and its step, for the caller (an attempt task of that cloud) to run."""
    scope = Within(within)
    now = deps.now()
    remembered = deps.blocks.active(now)
    blocks = [b.block for b in remembered]
    found: dict[str, Any] = {}

    def move_on(r: LaunchRequest) -> bool:
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
        # The widest look passed over every block the narrower ones saw: each told once.
        for index, block in decision.passed_over:
            reason = next(
                (f"remembered as {b.outcome}: {b.reason}" for b in remembered if b.block == block),
                str(block),
            )
            add_attempt(r, f"{r.id}-{r.relaunches}-{index}-blocked", r.chain[index], now,
                        "blocked", reason)  # fmt: skip
        if decision.index is None:
            tried = sum(a.outcome not in (None, "blocked") for a in r.attempts)
            verdict = f"all {len(r.chain)} candidates failed or are blocked ({tried} tried)"
            r.error = verdict
            r.move(RequestState.FAILED, now, verdict)
            return True
        r.next_step = decision.index
        return True

    updated = deps.store.update_request(request_id, move_on)
    decision = found.get("decision")
    if updated is None or decision is None:
        return "stale" if chain is None else "raced"
    if chain is not None:
        deps.store.append_event(request_id, f"state: PROVISIONING ({len(chain)} candidates)", now)
    if decision.index is None:
        if updated.state == RequestState.FAILED:
            deps.store.append_event(request_id, f"state: FAILED ({updated.error})", now)
        return "failed"
    if updated.state != RequestState.PROVISIONING or updated.next_step != decision.index:
        return "stale"
    if inline is not None and updated.chain[decision.index].cloud == inline:
        return f"{NEXT}{decision.index}"
    send_attempt(deps, updated, decision.index)
    return f"attempt {decision.index}"
