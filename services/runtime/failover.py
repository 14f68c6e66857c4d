"""Failover steps as tasks: after a zone fails, the *region* step tries the rest of its
region; an exhausted region hands over to the *cloud* step (its other regions), an exhausted
cloud to the *next-cloud* step (the rest of the chain). Each step is its own task, so a chain
never blocks a worker; each is idempotent by a compare-and-set on the request's position.
The choice itself is :func:`corral.shared.failover.next_step`.
"""

from __future__ import annotations

from corral.services.queues import dispatch
from corral.services.runtime.account import fail_request, record_attempt
from corral.services.runtime.deps import Deps
from corral.shared.errors import Scope
from corral.shared.failover import WIDER, Within, next_step
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest

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


def after_failure(deps: Deps, req: LaunchRequest, step: int, scope: Scope) -> str:
    """A zone attempt failed: hand over to the region step (an invalid request fails now)."""
    if scope == Scope.REQUEST:
        fail_request(
            deps,
            req.id,
            "the cloud refused the request as invalid",
            expected={RequestState.PROVISIONING},
            step=step,
        )
        return "failed"
    send_step(deps, req, step, Within.REGION)
    return "failed over"


def advance(deps: Deps, request_id: str, after: int, within: Within | str) -> str:
    """One failover step: choose the next candidate inside ``within``, hand over to the wider
    step, or fail the request when nothing is left."""
    within = Within(within)
    req = deps.store.get_request(request_id)
    if req is None or req.state != RequestState.PROVISIONING or req.next_step != after:
        return "stale"
    now = deps.now()
    remembered = deps.blocks.active(now)
    decision = next_step(req.chain, after, [b.block for b in remembered], within)
    for index, block in decision.passed_over:
        why = next((b for b in remembered if b.block == block), None)
        reason = f"remembered as {why.outcome}: {why.reason}" if why else str(block)
        attempt_id = f"{req.id}-{req.relaunches}-{index}-blocked"
        record_attempt(deps, req.id, attempt_id, req.chain[index], now, "blocked", reason)
    if decision.action == "escalate":
        send_step(deps, req, after, WIDER[within])
        return f"handed to the {WIDER[within]} step"
    if decision.index is None:
        tried = sum(a.outcome not in (None, "blocked") for a in req.attempts)
        verdict = f"all {len(req.chain)} candidates failed or are blocked ({tried} tried)"
        fail_request(deps, request_id, verdict, expected={RequestState.PROVISIONING}, step=after)
        return "failed"
    chosen = decision.index

    def move_on(r: LaunchRequest) -> bool:
        if r.state != RequestState.PROVISIONING or r.next_step != after:
            return False
        r.next_step = chosen
        return True

    updated = deps.store.update_request(request_id, move_on)
    if updated is None or updated.next_step != chosen:
        return "stale"
    send_attempt(deps, updated, chosen)
    return f"attempt {chosen}"
