"""Admission and provisioning steps: plan a request's chain, try its candidates one attempt at
a time, record every attempt, remember failed scopes, and never launch twice.

Each function here is one Celery task's body (workers/ wraps them). Every one is idempotent:
run twice with the same arguments (a redelivered message), it does the work at most once.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import time
import uuid
from typing import Any, cast

from corral.services import dispatch
from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import plan_launch
from corral.shared.blocking import Block, is_blocked
from corral.shared.config.task import Task
from corral.shared.errors import LaunchTimeoutError, ProviderError, Scope, ThrottledError
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import Attempt, AttemptOutcome, Instance, LaunchRequest, Transition

log = logging.getLogger("corral.provisioning")


class RetryLater(Exception):
    """Run this step again after ``countdown_s`` with ``try_no`` (the Celery task retries)."""

    def __init__(self, countdown_s: float, try_no: int) -> None:
        super().__init__(f"retry in {countdown_s:.1f}s")
        self.countdown_s = countdown_s
        self.try_no = try_no


# ----------------------------------------------------------------------------------------------
# Admission (scheduling worker)


def admit(deps: Deps, request_id: str) -> str:
    """Plan the chain of a PENDING request and start its first attempt."""
    req = deps.store.get_request(request_id)
    if req is None:
        return "missing"
    if req.state == RequestState.PROVISIONING:
        dispatch_step(deps, req)  # a redelivery after a crash between commit and dispatch
        return "redispatched"
    if req.state != RequestState.PENDING:
        return f"nothing to do ({req.state})"
    task = Task.model_validate(req.task)
    planned = plan_launch(deps, task)
    now = deps.now()
    if not planned.candidates:
        reason = "; ".join(planned.reasons) or "no launchable candidate"
        _fail(deps, request_id, RequestState.PENDING, f"nothing can be launched now: {reason}")
        return "failed"
    chain = [c.to_dict() for c in planned.candidates]

    def start(r: LaunchRequest) -> bool:
        if r.state != RequestState.PENDING:
            return False
        r.chain, r.next_step = chain, 0
        r.move(RequestState.PROVISIONING, now, f"planned {len(chain)} candidates")
        return True

    updated = deps.store.update_request(request_id, start)
    if updated is None or updated.state != RequestState.PROVISIONING:
        return "raced"
    deps.store.append_event(request_id, f"state: PROVISIONING ({len(chain)} candidates)", now)
    dispatch_step(deps, updated)
    return "provisioning"


def dispatch_step(
    deps: Deps, req: LaunchRequest, try_no: int = 0, countdown: float | None = None
) -> None:
    cand = req.chain[req.next_step]
    dispatch.send(
        dispatch.ATTEMPT,
        [req.id, req.next_step, try_no],
        queue=dispatch.provision_queue(cand["cloud"]),
        countdown=countdown,
        settings=deps.settings,
    )


# ----------------------------------------------------------------------------------------------
# One attempt (provisioning worker)


def attempt_id_for(req: LaunchRequest, step: int, try_no: int) -> str:
    return f"{req.id}-{req.relaunches}-{step}-{try_no}"


def instance_id_for(attempt_id: str, node: int) -> str:
    """Corral's id of node ``node`` of an attempt: the same on every redelivery."""
    digest = hashlib.sha1(f"{attempt_id}/{node}".encode()).hexdigest()[:10]
    return f"i-{digest}"


def attempt(deps: Deps, request_id: str, step: int, try_no: int = 0) -> str:
    """Try candidate ``step`` of the request's chain; on failure, hand over to the next one."""
    req = deps.store.get_request(request_id)
    if req is None or req.state != RequestState.PROVISIONING or req.next_step != step:
        return "stale"  # already moved on: a duplicate delivery
    attempt_id = attempt_id_for(req, step, try_no)
    owner = uuid.uuid4().hex
    timers = deps.settings.timers
    claim_ttl_s = timers.attempt_deadline_s + 5
    if not deps.store.claim(f"attempt:{attempt_id}", owner, claim_ttl_s):
        # Another delivery is running this attempt (or died holding it: the claim expires).
        raise RetryLater(min(5.0, claim_ttl_s), try_no)
    try:
        return _attempt(deps, req, step, try_no, attempt_id)
    finally:
        deps.store.release(f"attempt:{attempt_id}", owner)


def _candidate_block(cand: dict[str, Any]) -> Block:
    return Block(
        cloud=cand["cloud"],
        region=cand["region"],
        zone=cand["zone"],
        instance_type=cand["instance_type"],
        market=cand["market"],
    )


def _attempt(deps: Deps, req: LaunchRequest, step: int, try_no: int, attempt_id: str) -> str:
    cand = req.chain[step]
    now = deps.now()
    existing = next((a for a in req.attempts if a.attempt_id == attempt_id), None)
    if existing is not None and existing.outcome not in (None, "ok"):
        # This attempt failed before a crash; only the hand-over is left to do.
        return _after_failure(deps, req.id, step, existing.outcome, Scope.NONE)
    remembered = deps.blocks.active(now)
    hit = None if existing else is_blocked(_as_candidate(cand), [b.block for b in remembered])
    if hit is not None:
        why = next((b for b in remembered if b.block == hit), None)
        reason = f"remembered as {why.outcome}: {why.reason}" if why else "blocked"
        _record_attempt(deps, req.id, attempt_id, cand, now, outcome="blocked", error=reason)
        return _after_failure(deps, req.id, step, "blocked", Scope.NONE)
    if existing is None:
        _record_attempt(deps, req.id, attempt_id, cand, now)
        where = f"{cand['cloud']} {cand['region']}/{cand['zone']}"
        deps.store.append_event(
            req.id,
            f"attempt {step + 1}/{len(req.chain)}: {where} {cand['instance_type']} "
            f"({cand['market']})",
            now,
        )
    task = Task.model_validate(req.task)
    spec = _spec(req, task, cand, attempt_id)
    provider = deps.provider(cand["cloud"])
    deadline = time.monotonic() + deps.settings.timers.attempt_deadline_s
    try:
        launched = _launch_by_deadline(provider, spec, deadline)
        launched = _wait_until_up(provider, attempt_id, len(launched), deadline)
    except ThrottledError as exc:
        timers = deps.settings.timers
        _finish_attempt(deps, req.id, attempt_id, "throttled", str(exc))
        if try_no < timers.throttle_retries:
            deps.store.append_event(req.id, f"  throttled ({exc}); retrying in place", deps.now())
            raise RetryLater(timers.throttle_backoff_s * (2**try_no), try_no + 1) from None
        return _after_failure(deps, req.id, step, "throttled", Scope.NONE)
    except ProviderError as exc:
        _finish_attempt(deps, req.id, attempt_id, exc.outcome, str(exc))
        deps.store.append_event(req.id, f"  {exc.outcome}: {exc}", deps.now())
        _remember(deps, cand, exc)
        return _after_failure(deps, req.id, step, exc.outcome, exc.scope)
    return _on_launched(deps, req.id, step, attempt_id, cand, launched)


def _as_candidate(cand: dict[str, Any]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**cand)


def _spec(req: LaunchRequest, task: Task, cand: dict[str, Any], attempt_id: str) -> LaunchSpec:
    return LaunchSpec(
        request_id=req.id,
        attempt_id=attempt_id,
        cloud=cand["cloud"],
        region=cand["region"],
        zone=cand["zone"],
        instance_type=cand["instance_type"],
        market=cand["market"],
        count=task.num_nodes,
        setup=task.setup,
        run=task.run,
        envs=dict(task.envs or {}),
        workdir=task.workdir,
        tags={TAG_MANAGED: "true", TAG_REQUEST: req.id, TAG_ATTEMPT: attempt_id},
    )


def _launch_by_deadline(provider: Any, spec: LaunchSpec, deadline: float) -> list[ProviderInstance]:
    """Call ``provider.launch`` but stop waiting at the deadline: a hung region must not hold
    the chain. What a late launch creates is found by its attempt tag and cleaned up."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(provider.launch, spec)
    try:
        return list(future.result(timeout=max(0.0, deadline - time.monotonic())))
    except concurrent.futures.TimeoutError:
        raise LaunchTimeoutError(f"no answer within the attempt deadline in {spec.zone}") from None
    finally:
        pool.shutdown(wait=False)


def _wait_until_up(
    provider: Any, attempt_id: str, count: int, deadline: float
) -> list[ProviderInstance]:
    """Wait for every node to report in (running, or already finished for a quick job)."""
    while True:
        found = provider.describe({TAG_ATTEMPT: attempt_id})
        if len(found) >= count and all(p.state in ("running", "terminated") for p in found):
            return sorted(found, key=lambda p: int(p.tags.get(TAG_NODE, "0")))
        if any(p.state == "lost" for p in found):
            provider.terminate([p.provider_id for p in found])
            raise ProviderError("an instance died while starting", code="InstanceLost")
        if time.monotonic() > deadline:
            provider.terminate([p.provider_id for p in found])
            raise LaunchTimeoutError("instances did not come up within the attempt deadline")
        time.sleep(0.05)


def _remember(deps: Deps, cand: dict[str, Any], exc: ProviderError) -> None:
    block = Block.from_scope(exc.scope, _as_candidate(cand))
    if block is not None:
        deps.blocks.add(
            block,
            now=deps.now(),
            ttl_s=deps.settings.timers.blocked_ttl_s,
            reason=str(exc),
            outcome=exc.outcome,
        )


def _record_attempt(
    deps: Deps,
    request_id: str,
    attempt_id: str,
    cand: dict[str, Any],
    now: float,
    outcome: str | None = None,
    error: str | None = None,
) -> None:
    def add(r: LaunchRequest) -> bool:
        if any(a.attempt_id == attempt_id for a in r.attempts):
            return False
        r.attempts.append(
            Attempt(
                attempt_id=attempt_id,
                cloud=cand["cloud"],
                region=cand["region"],
                zone=cand["zone"],
                instance_type=cand["instance_type"],
                market=cand["market"],
                outcome=cast(AttemptOutcome | None, outcome),
                error=error,
                started_at=now,
                ended_at=now if outcome else None,
            )
        )
        r.updated_at = now
        return True

    deps.store.update_request(request_id, add)


def _finish_attempt(
    deps: Deps, request_id: str, attempt_id: str, outcome: str, error: str | None
) -> None:
    now = deps.now()

    def finish(r: LaunchRequest) -> bool:
        for a in r.attempts:
            if a.attempt_id == attempt_id and a.outcome is None:
                a.finish(cast(AttemptOutcome, outcome), now, error)
                return True
        return False

    deps.store.update_request(request_id, finish)


def _after_failure(deps: Deps, request_id: str, step: int, outcome: str, scope: Scope) -> str:
    """Hand over to the next candidate that is not blocked, or fail the request."""
    req = deps.store.get_request(request_id)
    if req is None or req.state != RequestState.PROVISIONING or req.next_step != step:
        return "stale"
    now = deps.now()
    blocks = [b.block for b in deps.blocks.active(now)]
    nxt: int | None = None
    if scope != Scope.REQUEST:
        for i in range(step + 1, len(req.chain)):
            if is_blocked(_as_candidate(req.chain[i]), blocks) is None:
                nxt = i
                break

    def advance(r: LaunchRequest) -> bool:
        if r.state != RequestState.PROVISIONING or r.next_step != step:
            return False
        if nxt is None:
            why = (
                "the request is invalid"
                if scope == Scope.REQUEST
                else (f"all {len(r.chain)} candidates failed")
            )
            r.error = why
            r.move(RequestState.FAILED, now, why)
        else:
            r.next_step = nxt
        return True

    updated = deps.store.update_request(request_id, advance)
    if updated is None:
        return "stale"
    if updated.state == RequestState.FAILED:
        deps.store.append_event(request_id, f"state: FAILED ({updated.error})", now)
        return "failed"
    if updated.next_step == nxt:
        dispatch_step(deps, updated)
    return f"next {nxt}"


def _on_launched(
    deps: Deps,
    request_id: str,
    step: int,
    attempt_id: str,
    cand: dict[str, Any],
    launched: list[ProviderInstance],
) -> str:
    now = deps.now()
    ids: list[str] = []
    for node, pi in enumerate(launched):
        inst_id = instance_id_for(attempt_id, node)
        ids.append(inst_id)
        inst = Instance(
            id=inst_id,
            request_id=request_id,
            node_index=node,
            provider_id=pi.provider_id,
            attempt_id=attempt_id,
            cloud=pi.cloud,
            region=pi.region,
            zone=pi.zone,
            instance_type=pi.instance_type,
            market=pi.market,
            state=InstanceState.REQUESTED,
            pid=pi.pid,
            created_at=now,
            updated_at=now,
            history=[
                Transition(
                    from_state=None,
                    to_state=InstanceState.REQUESTED,
                    at=now,
                    reason=f"launched by attempt {attempt_id}",
                )
            ],
        )
        inst.move(InstanceState.RUNNING, now, "the provider reports it running")
        deps.store.create_instance(inst)
    _finish_attempt(deps, request_id, attempt_id, "ok", None)

    def run(r: LaunchRequest) -> bool:
        if r.state != RequestState.PROVISIONING or r.next_step != step:
            return False
        r.instance_ids = [*r.instance_ids, *ids]
        r.move(RequestState.RUNNING, now, f"{len(ids)} instance(s) up in {cand['zone']}")
        return True

    updated = deps.store.update_request(request_id, run)
    if (
        updated is not None
        and updated.state == RequestState.RUNNING
        and set(ids) <= set(updated.instance_ids)
    ):
        deps.store.append_event(request_id, f"state: RUNNING ({', '.join(ids)})", now)
        return "running"
    # Cancelled (or moved on) while we launched: what we got must not leak.
    terminate(deps, request_id, None, "the request ended while it was launching")
    return "released"


# ----------------------------------------------------------------------------------------------
# Termination


def release_instances(
    deps: Deps, request_id: str, reason: str, instance_id: str | None = None
) -> LaunchRequest | None:
    """Terminate a request's machines (or one of them) without ending the request."""
    req = deps.store.get_request(request_id)
    if req is None:
        return None
    targets = [
        i
        for i in deps.store.list_instances(request_id=request_id)
        if instance_id is None or i.id == instance_id
    ]
    for inst in targets:
        _terminate_instance(deps, inst, reason)
    if instance_id is None:
        # Machines an in-flight attempt created before any record existed.
        for cloud in {c["cloud"] for c in req.chain}:
            provider = deps.provider(cloud)
            known = {i.provider_id for i in targets}
            strays = [
                p.provider_id
                for p in provider.describe({TAG_REQUEST: request_id})
                if p.provider_id not in known and p.state != "terminated"
            ]
            if strays:
                provider.terminate(strays)
    return req


def terminate(deps: Deps, request_id: str, instance_id: str | None, reason: str) -> str:
    """Terminate a request's instances (or one of them); a running request whose machines are
    all gone is TERMINATED. Idempotent."""
    req = release_instances(deps, request_id, reason, instance_id)
    if req is None:
        return "missing"
    now = deps.now()
    remaining = [
        i
        for i in deps.store.list_instances(request_id=request_id)
        if i.state not in (InstanceState.TERMINATED, InstanceState.FAILED, InstanceState.LOST)
    ]

    def done(r: LaunchRequest) -> bool:
        if r.state == RequestState.RUNNING and not remaining:
            r.move(RequestState.TERMINATED, now, reason)
            return True
        return False

    updated = deps.store.update_request(request_id, done)
    if (
        updated is not None
        and updated.state == RequestState.TERMINATED
        and req.state != RequestState.TERMINATED
    ):
        deps.store.append_event(request_id, f"state: TERMINATED ({reason})", now)
    return "terminated"


def _terminate_instance(deps: Deps, inst: Instance, reason: str) -> None:
    if inst.state in (InstanceState.TERMINATED, InstanceState.FAILED):
        return
    if inst.state == InstanceState.LOST:
        # Whatever may be left of a lost machine is cleaned up; its record keeps saying LOST.
        if inst.provider_id:
            deps.provider(inst.cloud).terminate([inst.provider_id], zone=inst.zone)
        return
    now = deps.now()

    def to_terminating(i: Instance) -> bool:
        if i.state in (InstanceState.REQUESTED, InstanceState.RUNNING):
            i.move(InstanceState.TERMINATING, now, reason)
            return True
        return False

    deps.store.update_instance(inst.id, to_terminating)
    if inst.provider_id:
        deps.provider(inst.cloud).terminate([inst.provider_id], zone=inst.zone)

    def to_terminated(i: Instance) -> bool:
        if i.state == InstanceState.TERMINATING:
            i.move(InstanceState.TERMINATED, deps.now(), "the provider terminated it")
            return True
        return False

    deps.store.update_instance(inst.id, to_terminated)


def _fail(deps: Deps, request_id: str, expected: RequestState, why: str) -> None:
    now = deps.now()

    def fail(r: LaunchRequest) -> bool:
        if r.state != expected:
            return False
        r.error = why
        r.move(RequestState.FAILED, now, why)
        return True

    if deps.store.update_request(request_id, fail) is not None:
        deps.store.append_event(request_id, f"state: FAILED ({why})", now)
