"""Terminating a request's machines: idempotent, and nothing an attempt created is missed."""

from __future__ import annotations

from corral.services.providers.base import TAG_REQUEST
from corral.services.runtime.deps import Deps
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import Instance, LaunchRequest


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
