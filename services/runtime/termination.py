"""Terminating a request's machines: idempotent, and nothing an attempt created is missed."""

from __future__ import annotations

from corral.services.providers.base import TAG_ATTEMPT, TAG_REQUEST
from corral.services.runtime.attempt_record import move_request_from
from corral.services.runtime.deps import Deps
from corral.services.runtime.failover import capacity_freed
from corral.services.runtime.pooled import passes
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import Instance, LaunchRequest
from corral.shared.routing import pool_of


def release_instances(
    deps: Deps,
    request_id: str,
    reason: str,
    instance_id: str | None = None,
    *,
    attempt_id: str | None = None,
    req: LaunchRequest | None = None,
    look_for_strays: bool = True,
    frees: bool = False,
) -> LaunchRequest | None:
    """Terminate a request's machines without ending the request: one instance, the machines
    of one attempt, or (neither given) all of them, including any an in-flight attempt created
    before it recorded them (``look_for_strays`` False: the recorded ones only, for a caller whose
    reconcile pass cleans strays anyway). ``req``: the request as the caller holds it.
    ``frees``: the request is over (its job ended, or its user ended it), so the room its
    running machines held is free again (:func:`failover.capacity_freed`); a caller letting go
    of a failed attempt's machines leaves it False."""
    req = req if req is not None else deps.store.get_request(request_id)
    if req is None:
        return None
    targets = [
        i
        for i in deps.store.list_instances(request_id=request_id)
        if (instance_id is None or i.id == instance_id)
        and (attempt_id is None or i.attempt_id == attempt_id)
    ]
    ended = [inst for inst in targets if _terminate_instance(deps, inst, reason)]
    # A machine no record knows comes from an attempt that launched and has not recorded what
    # it got (its outcome still unset), or from one that died in between (its outcome never
    # set): with every attempt's outcome in, there is nothing to look for, and the look (the
    # local cloud reads every machine's record for it) is skipped. Reconcile's stray cleaning
    # covers an ended request's strays in any case.
    in_flight = attempt_id is not None or any(a.outcome is None for a in req.attempts)
    if instance_id is None and look_for_strays and in_flight:
        tags = {TAG_REQUEST: request_id, **({TAG_ATTEMPT: attempt_id} if attempt_id else {})}
        known = {i.provider_id for i in targets}
        for cloud in {c.cloud for c in req.chain}:
            provider = deps.provider(cloud)
            strays = [
                p.provider_id
                for p in provider.describe(tags)
                if p.provider_id not in known and p.state != "terminated"
            ]
            if strays:
                provider.terminate(strays)
    if frees and ended:
        capacity_freed(deps, ended)
    return req


def terminate(
    deps: Deps, request_id: str, instance_id: str | None, reason: str, *, by_user: bool = False
) -> str:
    """Terminate a request's instances (or one of them); a running request whose machines are
    all gone is TERMINATED. Idempotent. ``by_user``: the user asked for the whole request to
    end, so one that went back to provisioning meanwhile (a relaunch) is cancelled too."""
    if by_user and instance_id is None:
        move_request_from(deps, request_id, _NOT_RUNNING, RequestState.CANCELLED, reason)
    current = deps.store.get_request(request_id)
    if current is not None and current.route.kind != "direct":
        return _terminate_workload(deps, current, reason)
    req = release_instances(deps, request_id, reason, instance_id, frees=True)
    if req is None:
        return "missing"
    remaining = [
        i
        for i in deps.store.list_instances(request_id=request_id)
        if i.state not in (InstanceState.TERMINATED, InstanceState.FAILED, InstanceState.LOST)
    ]
    if not remaining:
        move_request_from(deps, request_id, _ENDABLE, RequestState.TERMINATED, reason)
    return "terminated"


# A request whose machines are all gone ends TERMINATED from these (a stopped one too).
_ENDABLE = (RequestState.RUNNING, RequestState.STOPPED, RequestState.STARTING)


def _terminate_workload(deps: Deps, req: LaunchRequest, reason: str) -> str:
    """A pool workload: end its request; the pool withdraws its work and keeps the machines."""
    ending = (RequestState.RUNNING, RequestState.PREEMPTED)
    move_request_from(deps, req.id, ending, RequestState.TERMINATED, reason)
    passes.sync(deps, pool_of(req.route) or "")
    return "terminated"


# States in which a request has no machines of its own running: a stop cancels it.
_NOT_RUNNING = frozenset(
    {RequestState.PENDING, RequestState.PROVISIONING, RequestState.WAITING, RequestState.PREEMPTED}
)


def _terminate_instance(deps: Deps, inst: Instance, reason: str) -> bool:
    """Terminate one machine; True when it was up (RUNNING or STOPPED) and this call ended it."""
    if inst.state in (InstanceState.TERMINATED, InstanceState.FAILED):
        return False
    if inst.state == InstanceState.LOST:
        # Whatever may be left of a lost machine is cleaned up; its record keeps saying LOST.
        if inst.provider_id:
            deps.provider(inst.cloud).terminate([inst.provider_id], zone=inst.zone)
        return False
    now = deps.now()

    def to_terminating(i: Instance) -> bool:
        if i.state in (InstanceState.REQUESTED, InstanceState.RUNNING, InstanceState.STOPPED):
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

    ended = deps.store.update_instance(inst.id, to_terminated)
    return inst.state in _UP and ended is not None and ended.state == InstanceState.TERMINATED


_UP = (InstanceState.RUNNING, InstanceState.STOPPED)
