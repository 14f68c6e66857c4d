"""`corral why`: the scheduler's own word on a request, by its route: where it runs, or why it
waits (a plain request's account otherwise)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from corral.services.runtime.deps import Deps
from corral.services.runtime.failover import snapshot
from corral.services.runtime.pooled.kind_registry import kind_of_route
from corral.services.state.blocks import RememberedBlock
from corral.shared.blocking import Block
from corral.shared.failover import Within
from corral.shared.failover_plan import plan_step
from corral.shared.failover_plan import told as plan_told
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest
from corral.shared.routing import DeterminedRoute, Direct, MachinePoolRoute, pool_of
from corral.shared.waiting import backoff_of


def why(deps: Deps, request_id: str) -> dict[str, Any]:
    """The scheduler's word on a request (LookupError for an unknown id)."""
    req = deps.store.get_request(request_id)
    if req is None:
        raise LookupError(f"no launch request {request_id!r}")
    if req.quota_refusal is not None:
        return quota_why(req)
    match req.route:
        case MachinePoolRoute() | DeterminedRoute() as pooled:
            kind = kind_of_route(pooled)
            told = kind.why(deps, req, kind.ledgers(deps).get(pool_of(pooled) or ""))
            if "blocked (" in told.get("reason", ""):
                told["blocked"] = named_blocks(told["reason"], deps.blocks.active(deps.now()))
            return told
        case Direct():
            now = deps.now()
            blocks = deps.blocks.active(now)
            told = direct_why(req, [(b.block, b.until, b.reason) for b in blocks])
            if req.state == RequestState.WAITING and req.chain:
                # What a walk of its chain made now would decide (the walk's own plan).
                backoff = backoff_of(deps.settings.timers)
                snap = snapshot(req, -1, Within.ANY, [(b.block, b.until) for b in blocks], now,
                                backoff)  # fmt: skip
                told["next_walk"] = plan_told(plan_step(snap))
            return told


def quota_why(req: LaunchRequest) -> dict[str, Any]:
    """A request its project's quota refused at admission: the quota and its numbers."""
    refusal = dict(req.quota_refusal or {})
    return {
        "id": req.id,
        "state": req.state.value,
        "pool": None,
        "code": "over_quota",
        "reason": str(refusal.get("reason") or req.error or "over its project's quota"),
        "quota": refusal,
    }


def _place(step: Any) -> str:
    return f"{step.cloud}/{step.zone} {step.instance_type} {step.market}"


def direct_why(req: LaunchRequest, blocks: list[tuple[Block, float, str]]) -> dict[str, Any]:
    """A request on its own machines (no pool): what was tried down its failover chain, why
    each try failed, and what it waits for now. ``blocks``: the remembered blocked scopes
    (block, until, reason); those covering the candidates still ahead are named."""
    tried = [a.to_public() for a in req.attempts]
    failed = [a for a in req.attempts if a.outcome not in (None, "ok")]
    state_is_waiting = req.state == RequestState.WAITING
    ahead = req.chain[0 if state_is_waiting else max(req.next_step, 0) :] if req.chain else []
    blocked = [
        {"kind": b.kind, "scope": str(b), "until": until, "reason": why, **_scope_fields(b)}
        for b, until, why in blocks
        if any(b.matches(c) for c in ahead)
    ]
    state = req.state
    if state == RequestState.PENDING:
        code, reason = "planning", "it waits for the scheduling worker to plan its failover chain"
    elif state == RequestState.PROVISIONING:
        code = "provisioning"
        step = req.chain[req.next_step] if 0 <= req.next_step < len(req.chain) else None
        if step is None:  # between walks: the next candidate is being chosen
            reason = f"it walks its chain of {len(req.chain)} candidates"
        else:
            where = f"candidate {req.next_step + 1} of {len(req.chain)}"
            reason = f"it is trying {where} ({_place(step)})"
        if failed:
            reason += f" after {len(failed)} failed attempt{'s' * (len(failed) != 1)}"
        if blocked:
            reason += f"; {len(blocked)} blocked scope{'s' * (len(blocked) != 1)} ahead"
    elif state_is_waiting:
        code, reason = "waiting", _waiting_reason(req, failed, blocked)
    elif state == RequestState.RUNNING:
        code = "running"
        last = req.attempts[-1] if req.attempts else None
        reason = "it runs" + (f" on {_place(last)}" if last else "")
    elif state == RequestState.FAILED:
        code, reason = "failed", req.error or "it failed"
    else:
        code = state.value.lower()
        reason = f"it ended {state.value}" if req.is_terminal else f"it is {state.value}"
    return {
        "id": req.id,
        "state": state.value,
        "pool": None,
        "code": code,
        "reason": reason,
        "chain_length": len(req.chain),
        "next_step": req.next_step,
        "tried": tried,
        "blocked": blocked,
        **_wait_fields(req),
    }


def named_blocks(reason: str, blocks: Iterable[RememberedBlock]) -> list[dict[str, Any]]:
    """The blocks in force that a pooled workload's reason names (its group's or pool's
    places all blocked, ``machine_walk.launch_blocked``), with their ends as they are now: the
    reason names the blocks, not their ends, which move each time another launch's refusal
    renews them. Only the scopes: what the refusal said may name another project's request."""
    return [
        {"kind": b.block.kind, "scope": str(b.block), "until": b.until, **_scope_fields(b.block)}
        for b in sorted(blocks, key=lambda b: b.until)
        if _names(reason, str(b.block))
    ]


def _names(reason: str, scope: str) -> bool:
    """Whether ``reason``'s list of blocks, ``(a; b; c)``, holds ``scope`` as one item (a
    region's block is not named by a zone's that starts with its text)."""
    items = (f"{before}{scope}{after}" for before in ("(", "; ") for after in (";", ")"))
    return any(item in reason for item in items)


def _scope_fields(block: Block) -> dict[str, Any]:
    """What a block names, field by field (those it leaves open are left out)."""
    return {k: v for k, v in block.to_dict().items() if v is not None and k != "scope"}


def _waiting_reason(req: LaunchRequest, failed: list[Any], blocked: list[Any]) -> str:
    """Why a WAITING request waits: its chain exhausted, what blocks it, when it retries."""
    n = len(req.chain)
    reason = f"its {n} candidate{'s' * (n != 1)} are exhausted"
    if failed:
        reason += f" ({len(failed)} attempt{'s' * (len(failed) != 1)} failed)"
    if blocked:
        reason += f"; {len(blocked)} blocked scope{'s' * (len(blocked) != 1)} cover its chain"
    wait = req.waiting
    if wait is not None and wait.reason:
        reason += f"; {wait.reason}"
    return reason


def _wait_fields(req: LaunchRequest) -> dict[str, Any]:
    """The wait's times, for a request that waits (or waited) for capacity."""
    wait = req.waiting
    if wait is None:
        return {}
    return {
        "retry_at": wait.retry_at if req.state == RequestState.WAITING else None,
        "deadline": wait.deadline,
        "waiting_since": wait.since,
        "retries": wait.retries,
    }
