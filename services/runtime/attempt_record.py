"""The account of a request: its attempts as recorded, and the scopes failures block.

Every attempt, failed or not, is written into the request (the CLI prints them as a table when
a request fails); a failure's scope goes into the shared capacity-error memory so every worker
and every later request skips it while it lasts.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import cast

from corral.services.runtime.deps import Deps
from corral.services.state.blocks import RememberedBlock
from corral.shared.blocking import Block
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.placement import Placement
from corral.shared.records import Attempt, AttemptOutcome, ChainStep, Instance, LaunchRequest


def attempt_id_for(req: LaunchRequest, step: int, try_no: int) -> str:
    """The id of try ``try_no`` of chain position ``step`` in the request's current launch
    generation: the same on every redelivery (the cloud call is idempotent by it)."""
    return f"{req.id}-{req.generation}-{step}-{try_no}"


def attempt_line(req: LaunchRequest, step: int) -> str:
    """The progress line that says chain position ``step`` is being tried."""
    cand = req.chain[step]
    return (
        f"attempt {step + 1}/{len(req.chain)}: {cand.where()} {cand.instance_type} ({cand.market})"
    )


def record_attempt(
    deps: Deps,
    request_id: str,
    attempt_id: str,
    cand: ChainStep,
    now: float,
    outcome: str | None = None,
    error: str | None = None,
    current: LaunchRequest | None = None,
) -> LaunchRequest | None:
    """Add an attempt to the request's account (once: the id makes it idempotent);
    ``current``: the request as just read, to write from. Returns the request as stored."""
    return deps.store.update_request(
        request_id, lambda r: add_attempt(r, attempt_id, cand, now, outcome, error), current=current
    )


def add_attempt(
    r: LaunchRequest,
    attempt_id: str,
    cand: ChainStep,
    now: float,
    outcome: str | None = None,
    error: str | None = None,
) -> bool:
    """Add an attempt to ``r``'s account, inside a compare-and-set; False if it has it."""
    if any(a.attempt_id == attempt_id for a in r.attempts):
        return False
    r.attempts.append(
        Attempt(
            attempt_id=attempt_id,
            **Placement.of(cand).fields(),
            outcome=cast(AttemptOutcome | None, outcome),
            error=error,
            started_at=now,
            ended_at=now if outcome else None,
        )
    )
    r.updated_at = now
    return True


def end_attempt(r: LaunchRequest, attempt_id: str, outcome: str, now: float,
                error: str | None = None) -> bool:  # fmt: skip
    """Set a running attempt's outcome in ``r``, inside a compare-and-set."""
    for a in r.attempts:
        if a.attempt_id == attempt_id and a.outcome is None:
            a.finish(cast(AttemptOutcome, outcome), now, error)
            return True
    return False


def finish_attempt(
    deps: Deps, request_id: str, attempt_id: str, outcome: str, error: str | None
) -> None:
    """Set a running attempt's outcome."""
    now = deps.now()

    deps.store.update_request(request_id, lambda r: end_attempt(r, attempt_id, outcome, now, error))


def remember(
    deps: Deps, cand: ChainStep, exc: ProviderError, started_at: float | None = None
) -> list[RememberedBlock] | None:
    """Block the scope ``exc`` calls for, for ``blocked_ttl_s``. Only the cloud's answers
    block: an attempt that ran out of time while the control plane had an outage (it ended
    after the attempt began) was slowed by the control plane, so it blocks nothing. Returns
    every block in force, read in the same round trip, when it added one (the walk on from
    the failed zone needs them); else None."""
    if slowed_by_us(deps, exc, started_at):
        return None
    # The candidate itself (not its bare place): a quota error's family is read from what it
    # asks (its accelerator) when the cloud's answer names none.
    block = Block.for_error(exc, cand)
    if block is None:
        return None
    return deps.blocks.add_then_active(
        block,
        now=deps.now(),
        ttl_s=deps.settings.timers.blocked_ttl_s,
        reason=str(exc),
        outcome=exc.outcome,
    )


def slowed_by_us(deps: Deps, exc: ProviderError, started_at: float | None) -> bool:
    """Whether ``exc`` is a timeout the control plane's own outage caused (an outage ended
    after the attempt began): it says nothing of the cloud. The outage is read only for a
    timeout: the other outcomes never ask."""
    return (
        exc.outcome == "timeout" and started_at is not None and deps.outage.last_end() >= started_at
    )


def keep_block(deps: Deps, block: Block, exc: ProviderError) -> None:
    """Remember ``block``, which ``exc`` called for, for ``blocked_ttl_s`` (every worker and
    every later launch, direct or pooled, passes over what it covers)."""
    deps.blocks.add(
        block,
        now=deps.now(),
        ttl_s=deps.settings.timers.blocked_ttl_s,
        reason=str(exc),
        outcome=exc.outcome,
    )


def blocked_reason(block: Block, remembered: RememberedBlock | None) -> str:
    """A blocked attempt's account: the scope that covers it (what the failure was about: a
    zone's type, a shortfall's ceiling, a quota family) and what was remembered there."""
    if remembered is None:
        return f"blocked: {block}"
    return f"{block} ({block.kind}) remembered as {remembered.outcome}: {remembered.reason}"


def fail_request(
    deps: Deps, request_id: str, why: str, *, expected: set[RequestState], step: int | None = None
) -> bool:
    """Move the request to FAILED (if it is still in an ``expected`` state and, when given, at
    position ``step``); True when this call failed it."""
    now = deps.now()

    def fail(r: LaunchRequest) -> tuple[bool, bool]:
        if r.state not in expected or (step is not None and r.next_step != step):
            return False, False
        r.error = why
        r.move(RequestState.FAILED, now, why)
        return True, True

    failed = bool(deps.store.decide_request(request_id, fail)[1])
    if failed:
        deps.store.append_event(request_id, f"state: FAILED ({why})", now)
    return failed


def move_request_from(
    deps: Deps, request_id: str, frm: Collection[RequestState], to: RequestState, why: str
) -> LaunchRequest | None:
    """Move the request from any state in ``frm`` to ``to`` by compare-and-set, with its
    progress line; the request as written if this call moved it, else None."""
    now = deps.now()

    def move(r: LaunchRequest) -> tuple[bool, bool]:
        if r.state not in frm:
            return False, False
        r.move(to, now, why)
        return True, True

    updated, moved = deps.store.decide_request(request_id, move)
    if not moved or updated is None:
        return None
    deps.store.append_event(request_id, f"state: {to.value} ({why})", now)
    return updated


def move_instance_from(
    deps: Deps,
    inst: Instance,
    frm: Collection[InstanceState],
    to: InstanceState,
    why: str,
    *,
    exit_code: int | None = None,
    address: str | None = None,
) -> Instance | None:
    """Move ``inst`` (as the caller read it: the write starts from it) from any state in
    ``frm`` to ``to`` by compare-and-set, with its exit code and new address when given; the
    instance as written if this call moved it, else None."""
    now = deps.now()
    moved = False

    def move(i: Instance) -> bool:
        nonlocal moved
        moved = i.state in frm  # a run after a lost race decides afresh
        if moved:
            i.move(to, now, why)
            if exit_code is not None:
                i.exit_code = exit_code
            if address:
                i.address = address
        return moved

    written = deps.store.update_instance(inst.id, move, current=inst)
    return written if moved else None
