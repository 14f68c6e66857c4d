"""One pooled machine up (provisioning worker): a machine pool's machine or a Determined
agent, launched through the one launch path (:mod:`corral.services.runtime.launch`) from the
templates its kind gives. The launch returns once the cloud took it; the boot watch records the
machine up in the ledger (:func:`booted`), or failed so that its work waits again
(:func:`boot_failed`)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from corral.services.providers.base import (
    TAG_MACHINE,
    TAG_MANAGED,
    TAG_POOL,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.queues import dispatch
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.launch import LaunchDeferred, boot_error, launch_on_zones, market_of
from corral.services.runtime.pooled.kind_registry import kind_named
from corral.services.runtime.pooled.pool_kind import PoolKind
from corral.services.state.boots import Boot
from corral.services.state.pool_store import PoolRecord
from corral.shared.errors import ProviderError
from corral.shared.merge import MergeError
from corral.shared.scheduling.fallback import PASS_AFTER_S, FallbackPolicy, Setback
from corral.shared.waiting import utc_clock

log = logging.getLogger("corral.pools")


def launch_machine(deps: Deps, name: str, machine_id: str) -> str:
    """Launch one machine the ledger of pool ``name`` asks for (claimed while it runs, so a
    redelivery waits; idempotent by the machine id)."""
    owner = uuid.uuid4().hex
    key = f"pool-machine:{machine_id}"
    if not deps.store.claim(key, owner, deps.settings.timers.claim_ttl_s):
        return "busy"
    with hold_claim(deps, key, owner):
        record = deps.pools.get(name)
        if record is None:
            return "no such pool"
        kind = kind_named(record.kind)
        ledger = kind.ledgers(deps).get(name)
        if ledger is None:
            return "no such pool"
        machine = kind.machines(ledger).get(machine_id)
        if machine is None or machine.status != "launching":
            return "stale"
        return _launch(deps, kind, record, machine_id, machine)


def _launch(deps: Deps, kind: PoolKind, record: PoolRecord, machine_id: str, machine: Any) -> str:
    order = kind.launch_order(deps, record, machine)
    if isinstance(order, str):
        return _failed(deps, kind, record, machine_id, machine, order)
    tags = {TAG_MANAGED: "true", TAG_POOL: record.name, TAG_MACHINE: machine_id}
    label = f"pool-{record.name}"
    # The spec's place is filled in per zone by launch_on_zones.
    spec = LaunchSpec(
        request_id=label,
        attempt_id=machine_id,
        cloud=order.cloud,
        region="",
        zone="",
        instance_type="",
        tags=tags,
    )
    deadline = deps.now() + (order.boot_deadline_s or deps.settings.timers.attempt_deadline_s)
    boot = Boot(
        kind="pool_machine", spec=spec, deadline=deadline, pool=record.name, machine_id=machine_id
    )
    errors: list[str] = []
    for template in order.templates:
        try:
            launch_on_zones(deps, order.cloud, template, label, boot, order.extra)
        except LaunchDeferred as full:
            dispatch.pool_machine(
                record.name, machine_id, order.cloud, countdown=full.wait_s, settings=deps.settings
            )
            return "deferred"
        except ProviderError as exc:
            errors.append(str(exc))
            continue
        except MergeError as exc:
            why = f"advanced_instance_config: {exc}"
            return _failed(deps, kind, record, machine_id, machine, why)
        return "booting"
    why = "; ".join(errors) or "no zone offers it"
    return _failed(deps, kind, record, machine_id, machine, why)


def booted(deps: Deps, boot: Boot, got: ProviderInstance) -> str:
    """The boot watch saw a pooled machine up: record it in its pool's ledger."""
    found = _machine(deps, boot)
    if found is None:
        deps.provider(got.cloud).terminate([got.provider_id])  # its pool let it go meanwhile
        return "released"
    kind, record, machine = found
    return _up(deps, kind, record, boot.key, machine, got, market_of(boot.spec, got))


def boot_failed(deps: Deps, boot: Boot, verdict: str, found: list[ProviderInstance]) -> str:
    """A pooled machine did not come up by the deadline (or died booting): terminate what
    there is of it; its work waits for the next pass."""
    if found:
        deps.provider(boot.spec.cloud).terminate([p.provider_id for p in found])
    machine = _machine(deps, boot)
    if machine is None:
        return "released"
    kind, record, m = machine
    return _failed(deps, kind, record, boot.key, m, str(boot_error(verdict)))


def _machine(deps: Deps, boot: Boot) -> tuple[PoolKind, PoolRecord, Any] | None:
    """The pool and the ledger's machine a pooled boot is for, if the pool still wants it."""
    record = deps.pools.get(boot.pool or "")
    if record is None:
        return None
    kind = kind_named(record.kind)
    ledger = kind.ledgers(deps).get(record.name)
    machine = None if ledger is None else kind.machines(ledger).get(boot.key)
    if machine is None or machine.status != "launching":
        return None
    return kind, record, machine


def _up(
    deps: Deps,
    kind: PoolKind,
    record: PoolRecord,
    machine_id: str,
    machine: Any,
    got: ProviderInstance,
    market: str,
) -> str:
    """Record the launched machine up; terminate it if its pool let it go meanwhile."""
    at = dataclasses.replace(got.place, market=market)
    now = deps.now()
    updated = kind.ledgers(deps).update(
        record.name, lambda led: kind.machine_up(led, machine_id, got.provider_id, at, now)
    )
    if updated is None or machine_id not in kind.machines(updated):
        deps.provider(got.cloud).terminate([got.provider_id])
        return "released"
    if workload := kind.workload_of(machine):
        up_in = f"pool machine {machine_id} ({machine.machine_type}) up in {got.zone}"
        deps.store.append_event(workload, up_in, now)
    dispatch.pool_sync(record.name, settings=deps.settings)
    return "up"


def _failed(
    deps: Deps, kind: PoolKind, record: PoolRecord, machine_id: str, machine: Any, why: str
) -> str:
    """The machine could not be launched: its work backs off and falls down its group order
    (:mod:`corral.shared.scheduling.fallback` decides; the ledger keeps the setback), and a
    pass is sent for when its pause ends (beat's rebalancing would come later)."""
    now = deps.now()
    policy = FallbackPolicy.of(deps.settings.timers)
    seen: list[Any] = [None]  # the machine as the write found it (it may have left its work)

    def fail(led: Any) -> bool:
        seen[0] = kind.machines(led).get(machine_id)
        return kind.machine_failed(led, machine_id, now, why=why, policy=policy)

    updated = kind.ledgers(deps).update(record.name, fail)
    log.warning("%s machine %s could not be launched: %s", kind.label, machine_id, why)
    machine = seen[0] or machine
    # Its work, if it still had one: a machine whose placement an earlier failure sent back
    # (its mate's) tells that workload nothing new.
    workload = kind.workload_of(machine) if seen[0] is not None else None
    replacing = bool(getattr(machine, "replaces", None))
    setback = kind.setback_of(updated, workload) if updated is not None and workload else None
    if workload:
        text = f"pool machine {machine.machine_type} could not be launched ({why})"
        text += "; the workload stays where it runs" if replacing else "; back in the queue"
        if setback is not None:
            text += _next_try(setback, machine.machine_type, replacing=replacing)
        deps.store.append_event(workload, text, now)
    dispatch.pool_pass(record.name, settings=deps.settings)
    if setback is not None and setback.retry_at > now and not replacing:
        wait_s = setback.retry_at - now + PASS_AFTER_S
        dispatch.pool_pass(record.name, settings=deps.settings, countdown=wait_s)
    return "failed"


def _next_try(setback: Setback, machine_type: str, *, replacing: bool) -> str:
    """The event's word on what follows: when the workload is tried again, which group it
    passes over until when."""
    text = "" if replacing else f": next try at {utc_clock(setback.retry_at)}"
    until = setback.avoid.get(machine_type)
    if until is not None and until > setback.failed_at:
        text += f"; {machine_type} passed over until {utc_clock(until)}"
    return text
