"""One pooled machine up (provisioning worker): a machine pool's machine or a Determined
agent, launched through the one launch path (:mod:`corral.services.runtime.launch`) from the
templates its kind gives, recorded up in the ledger, or failed so that its work waits again."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from corral.services.providers.base import TAG_MACHINE, TAG_MANAGED, TAG_POOL, ProviderInstance
from corral.services.queues import dispatch
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.launch import launch_on_zones, market_of
from corral.services.runtime.pooled.kind import PoolKind
from corral.services.runtime.pooled.kinds import kind_named
from corral.services.state.pools import PoolRecord
from corral.shared.errors import ProviderError
from corral.shared.merge import MergeError

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
    errors: list[str] = []
    for template in order.templates:
        try:
            got, spec = launch_on_zones(
                deps, order.cloud, template, f"pool-{record.name}", machine_id, tags, order.extra
            )
        except ProviderError as exc:
            errors.append(str(exc))
            continue
        except MergeError as exc:
            why = f"advanced_instance_config: {exc}"
            return _failed(deps, kind, record, machine_id, machine, why)
        return _up(deps, kind, record, machine_id, machine, got, market_of(spec, got))
    why = "; ".join(errors) or "no zone offers it"
    return _failed(deps, kind, record, machine_id, machine, why)


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
    where = {
        "provider_id": got.provider_id,
        "cloud": got.cloud,
        "region": got.region,
        "zone": got.zone,
        "instance_type": got.instance_type,
        "market": market,
    }
    now = deps.now()
    updated = kind.ledgers(deps).update(
        record.name, lambda led: kind.machine_up(led, machine_id, where, now)
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
    now = deps.now()
    kind.ledgers(deps).update(record.name, lambda led: kind.machine_failed(led, machine_id, now))
    log.warning("%s machine %s could not be launched: %s", kind.label, machine_id, why)
    if workload := kind.workload_of(machine):
        deps.store.append_event(
            workload,
            f"pool machine {machine.machine_type} could not be launched ({why}); back in the queue",
            now,
        )
    dispatch.pool_pass(record.name, settings=deps.settings)
    return "failed"
