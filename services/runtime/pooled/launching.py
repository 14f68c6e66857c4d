"""One pooled machine up (provisioning worker): a machine pool's machine or a Determined
agent, launched through the one launch path (:mod:`corral.services.runtime.launch`) from the
templates its kind gives, in the first place that the zone walk a direct launch also uses
picks (:func:`launch_pooled`, :mod:`corral.shared.machine_walk`: the same block memory). The
launch returns once the cloud took it; the boot watch records the machine up in the ledger
(:func:`booted`), or failed so that its work waits again (:func:`boot_failed`)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from corral.services.providers.base import (
    TAG_MACHINE,
    TAG_MANAGED,
    TAG_POOL,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.queues import dispatch
from corral.services.runtime.attempt_record import keep_block, slowed_by_us
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.launch import (
    LaunchDeferred,
    boot_error,
    market_of,
    start,
    zones_for,
)
from corral.services.runtime.planning import accelerator_of, price_of
from corral.services.runtime.pooled.kind_registry import kind_named
from corral.services.runtime.pooled.pool_kind import PoolKind
from corral.services.state.boots import Boot
from corral.services.state.pool_store import PoolRecord
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.errors import ProviderError
from corral.shared.failover_plan import Attempt
from corral.shared.lifecycle import InstanceState
from corral.shared.machine_walk import MachinePlace, MachineWalk, failure_block
from corral.shared.merge import MergeError, merge_advanced_instance_config
from corral.shared.placement import Block
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
    # The spec's place is filled in per place by launch_pooled.
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
    try:
        launch_pooled(deps, order.cloud, order.templates, label, boot, order.extra)
    except LaunchDeferred as full:
        dispatch.pool_machine(
            record.name, machine_id, order.cloud, countdown=full.wait_s, settings=deps.settings
        )
        return "deferred"
    except ProviderError as exc:
        return _failed(deps, kind, record, machine_id, machine, str(exc) or "no zone offers it")
    except MergeError as exc:
        why = f"advanced_instance_config: {exc}"
        return _failed(deps, kind, record, machine_id, machine, why)
    return "booting"


def launch_pooled(
    deps: Deps,
    cloud: str,
    templates: Sequence[LaunchTemplate],
    label: str,
    boot: Boot,
    extra: dict[str, Any] | None = None,
) -> LaunchSpec:
    """Start one pooled machine in the first place of its launch order that takes it (each
    template in order, in the zones that offer it; a reserved template in its reservation's
    zone), idempotent by the boot's attempt id, and hand it to the boot watch; returns the
    spec launched. The walk is :class:`corral.shared.machine_walk.MachineWalk`'s, over the
    blocks every launch remembers: a place a block covers is passed over without a call, and
    a refusal is remembered at its scope for every later launch. Raises a ProviderError whose
    text is the walk's account when no place took it, MergeError for a bad ``extra`` config
    (at the first try of its template), LaunchDeferred when the cloud's limits are full.
    ``boot`` is the watch's record of it (its spec is filled in per place here)."""
    attempt_id, tags = boot.spec.attempt_id, boot.spec.tags
    now = deps.now()
    walk = MachineWalk.of(
        cloud,
        templates,
        lambda template: zones_for(deps, cloud, template),
        [(b.block, b.until) for b in deps.blocks.active(now)],
        accelerator_of=lambda itype: accelerator_of(deps, cloud, itype),
    )
    configs: dict[int, dict[str, Any]] = {}
    while isinstance(step := walk.next(), Attempt):
        at = walk.places[step.index]
        if at.template not in configs:
            config = dict(templates[at.template].advanced_instance_config)
            if extra:
                config = merge_advanced_instance_config(cloud, config, extra)
            configs[at.template] = config
        spec = LaunchSpec(
            request_id=label,
            attempt_id=attempt_id,
            cloud=cloud,
            region=at.region,
            zone=at.zone,
            instance_type=at.instance_type,
            market=at.launch_market,
            count=1,
            advanced_instance_config=configs[at.template],
            tags=tags,
        )
        started = deps.now()
        try:
            start(deps, boot.model_copy(update={"spec": spec}))
        except ProviderError as exc:
            block = walk.failed(step.index, exc, remember=not slowed_by_us(deps, exc, started))
            if block is not None:
                keep_block(deps, block, exc)
            continue
        if walk.passed_over:
            log.info("%s: %s passed over %s", label, attempt_id, walk.account())
        return spec
    last = walk.tried[-1][1].code if walk.tried else ("Blocked" if walk.passed else "NoZone")
    raise ProviderError(walk.account() or f"no zone of {cloud} offers it", code=last)


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
    exc = boot_error(verdict)
    _remember_boot(deps, boot, exc)
    machine = _machine(deps, boot)
    if machine is None:
        return "released"
    kind, record, m = machine
    return _failed(deps, kind, record, boot.key, m, str(exc))


def _remember_boot(deps: Deps, boot: Boot, exc: ProviderError) -> None:
    """A failed boot is remembered as a direct attempt's is (``provisioning.boot_failed``): a
    machine lost while starting blocks its zone's type and market, a launch that timed out
    its region, one whose agent never registered nothing; by the walk's own rule
    (:func:`corral.shared.machine_walk.failure_block`). A timeout an outage of ours overlapped
    blocks nothing: the launch is taken to have begun a whole attempt deadline before the
    boot's (a pool's own, longer deadline makes that later than it was: never a block too
    many)."""
    spec = boot.spec
    cloud = spec.cloud
    place = MachinePlace.launched(
        spec.place,
        spec.advanced_instance_config,
        lambda itype: accelerator_of(deps, cloud, itype),
    )
    began = boot.deadline - deps.settings.timers.attempt_deadline_s
    block = failure_block(exc, place, Block.for_error)
    if block is not None and not slowed_by_us(deps, exc, began):
        keep_block(deps, block, exc)


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
    """Record the launched machine up: its row of the machine table first (where the cloud
    put it, idempotent by its id), then its ledger's word; terminate it if its pool let it go
    meanwhile."""
    at = dataclasses.replace(got.place, market=market)
    now = deps.now()
    deps.machines.up(
        machine_id,
        (kind.owner_kind, record.name),
        got.provider_id,
        at,
        now,
        machine_type=machine.pool_type(),
        created_at=machine.created_at,
        reason=f"up in {got.zone or got.region or got.cloud}",
        price_usd_per_hour=price_of(
            deps, at.cloud, at.instance_type or machine.pool_type(), at.zone or None, at.market
        ),
    )
    updated = kind.ledgers(deps).update(
        record.name, lambda led: kind.machine_up(led, machine_id, now)
    )
    if updated is None or machine_id not in kind.machines(updated):
        deps.provider(got.cloud).terminate([got.provider_id])
        deps.machines.move(machine_id, InstanceState.TERMINATING, now, "its pool let it go")
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
