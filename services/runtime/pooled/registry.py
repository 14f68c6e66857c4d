"""Registered pools (`corral pools`): apply, list, view and delete a machine pool file or a
Determined master config; and the registry as routing reads it."""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime import usage
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import catalog_for
from corral.services.runtime.pooled import work
from corral.services.runtime.pooled.kind_registry import KINDS, kind_named
from corral.services.state.pool_store import PoolKind as KindName
from corral.services.state.pool_store import PoolRecord
from corral.shared.config.machine_pool import MachinePool
from corral.shared.config.master_config import MasterConfig
from corral.shared.routing import MasterView, RegistryView


class PoolError(ValueError):
    """A registry request that cannot be done (unknown pool, pool in use, bad file)."""


class PoolNotFound(PoolError, LookupError):
    pass


def apply_pool(
    deps: Deps, *, name: str, kind: KindName, file_name: str, spec: dict[str, Any], cloud: str
) -> PoolRecord:
    """Register (or replace) a pool file. A master config replaces any other master config."""
    now = deps.now()
    record = PoolRecord(
        name=name, kind=kind, file_name=file_name, spec=spec, cloud=cloud, applied_at=now
    )
    if kind == "master_config":
        for other in deps.pools.names():
            found = deps.pools.get(other)
            if found is not None and found.kind == "master_config" and other != name:
                # One master at a time: the old one goes as `pools delete` would (refused
                # while its tasks run; its agents terminated).
                delete_pool(deps, other)
    if not deps.pools.create(name, record):

        def replace(current: PoolRecord) -> bool:
            if current.kind != kind:
                raise PoolError(
                    f"{name!r} is registered as a {current.kind.replace('_', ' ')}; delete it "
                    f"first to register a {kind.replace('_', ' ')} under that name"
                )
            current.file_name, current.spec, current.cloud = file_name, spec, cloud
            current.applied_at = now
            return True

        record = deps.pools.update(name, replace) or record
    kind_named(kind).ledgers(deps).create(name, kind_named(kind).new_ledger(name))
    dispatch.pool_pass(name, settings=deps.settings)  # new sizes or rules apply at once
    return record


def list_pools(deps: Deps) -> list[dict[str, Any]]:
    """Every registered pool with its machine types, machines and workloads, for `pools list`."""
    return [pool_view(deps, name) for name in deps.pools.names()]


def pool_view(deps: Deps, name: str) -> dict[str, Any]:
    record = deps.pools.get(name)
    if record is None:
        raise PoolNotFound(f"no pool {name!r} is registered (see `corral pools list`)")
    kind = kind_named(record.kind)
    ledger = kind.ledgers(deps).get(name) or kind.new_ledger(name)
    view = kind.view(record, ledger, work.held_rows(deps, kind.machines(ledger).values()))
    for machine in view.get("machines") or []:  # what each machine uses (runtime/usage.py)
        if machine.get("provider_id"):
            used = usage.of_machine(deps, record.cloud, str(machine["provider_id"]))
            machine.update({k: v for k, v in used.items() if k in usage.FIELDS})
    return {
        "name": name,
        "kind": record.kind,
        "file": record.file_name,
        "cloud": record.cloud,
        "applied_at": record.applied_at,
        **view,
    }


def delete_pool(deps: Deps, name: str) -> dict[str, Any]:
    """Unregister a pool and terminate its machines; refused while workloads use it."""
    record = deps.pools.get(name)
    if record is None:
        raise PoolNotFound(f"no pool {name!r} is registered (see `corral pools list`)")
    kind = kind_named(record.kind)
    ledger = kind.ledgers(deps).get(name)
    ids = kind.work_ids(ledger) if ledger else []
    live = [
        wid
        for wid in ids
        if (req := deps.store.get_request(wid)) is not None and not req.is_terminal
    ]
    if live:
        raise PoolError(
            f"pool {name!r} still has {len(live)} workload(s): {', '.join(sorted(live)[:5])}; "
            "terminate them first (`corral terminate ID`)"
        )
    terminated = []
    machines = kind.machines(ledger) if ledger else {}
    rows = work.held_rows(deps, machines.values())
    for machine_id, machine in machines.items():
        if work.terminate(deps, work.as_machine(rows, machine), f"pool {name} deleted"):
            terminated.append(machine_id)
    for each in KINDS.values():
        each.ledgers(deps).delete(name)
    deps.pools.delete(name)
    return {"name": name, "deleted": True, "machines_terminated": terminated}


def registry_view(deps: Deps, pools: bool = True) -> RegistryView:
    """The registry as :func:`corral.shared.routing.route` reads it; without the registered
    pools (nothing read from Redis) when ``pools`` is False, for a task that routing would not
    look at them for (:func:`corral.shared.routing.reads_pools`)."""
    machine_pools: dict[str, MachinePool] = {}
    master = None
    for name in deps.pools.names() if pools else ():
        record = deps.pools.get(name)
        if record is None:
            continue
        if record.kind == "machine_pool":
            machine_pools[name] = MachinePool.model_validate(record.spec)
        else:
            master = MasterView(name, MasterConfig.model_validate(record.spec))
    return RegistryView(
        catalog=catalog_for(deps),
        clouds=deps.launchable_clouds(),
        machine_pools=machine_pools,
        master=master,
    )
