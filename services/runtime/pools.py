"""Machine pools at run time: register pool files, queue workloads, run scheduling passes,
and carry their decisions out on warm machines.

- :func:`apply_pool`, :func:`list_pools`, :func:`delete_pool`: the registry (`corral pools`).
- :func:`enqueue`: a request whose task carries a compute config joins its pool's queue.
- :func:`run_pass`: one scheduling pass over a pool (:func:`corral.shared.scheduling.schedule`)
  computed from a snapshot of the pool's ledger and committed with a compare-and-set; a pass
  that lost the race is computed again from a fresh snapshot. Any number of scheduling
  workers may run passes over the same pool at once; no partition is ever over its size.
- :func:`sync`: carries the ledger out: machines to launch are handed to the provisioning
  worker, placed workloads are assigned to their machines (the local cloud's agents run them),
  preempted work is withdrawn and requeued, finished jobs end their requests, retired and
  reaped machines are terminated. Every step is idempotent; running it again changes nothing.
- :func:`launch_machine`: the provisioning worker's part, one machine of the pool.
- :func:`why`: the scheduler's own word on a workload (`corral why`).

Machines are warm: once up, a machine serves one workload after another until idle reaping
or a replacement retires it.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from corral.services.providers.base import (
    TAG_MACHINE,
    TAG_MANAGED,
    TAG_POOL,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.queues import dispatch
from corral.services.runtime import determined
from corral.services.runtime import workloads as work
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.state.pools import PoolKind, PoolRecord
from corral.shared.config.compute_config import ComputeConfig
from corral.shared.config.machine_pool import LaunchTemplate, MachinePool
from corral.shared.config.task import Task
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import RequestState
from corral.shared.merge import MergeError, merge_advanced_instance_config
from corral.shared.records import LaunchRequest
from corral.shared.scheduling import MachineTypeState, schedule
from corral.shared.scheduling.build import machine_types_of, workload_of
from corral.shared.scheduling.det_ledger import DetLedger
from corral.shared.scheduling.ledger import (
    PoolLedger,
    PoolMachine,
    add_head,
    add_workload,
    commit,
    head_of,
    machine_failed,
    machine_gone,
    machine_up,
    release,
    snapshot_of,
)

log = logging.getLogger("corral.pools")

NO_REAPING = 10**9  # a pass that must not reap (only beat's rebalancing reaps)
HEAD_NODE = "head_node"  # what a workload's head node shows as its machine_type


class PoolError(ValueError):
    """A registry request that cannot be done (unknown pool, pool in use, bad file)."""


class PoolNotFound(PoolError, LookupError):
    pass


# ----------------------------------------------------------------------------------------------
# Registry


def apply_pool(
    deps: Deps, *, name: str, kind: PoolKind, file_name: str, spec: dict[str, Any], cloud: str
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

        updated = deps.pools.update(name, replace)
        record = updated or record
    if kind == "machine_pool":
        deps.ledgers.create(name, PoolLedger(pool=name))
    else:
        deps.det_ledgers.create(name, DetLedger(master=name))
    dispatch.pool_pass(name, settings=deps.settings)  # new sizes or rules apply at once
    return record


def list_pools(deps: Deps) -> list[dict[str, Any]]:
    """Every registered pool with its machine types, machines and workloads, for `pools list`."""
    return [pool_view(deps, name) for name in deps.pools.names()]


def pool_view(deps: Deps, name: str) -> dict[str, Any]:
    record = deps.pools.get(name)
    if record is None:
        raise PoolNotFound(f"no pool {name!r} is registered (see `corral pools list`)")
    ledger = deps.ledgers.get(name) or PoolLedger(pool=name)
    view: dict[str, Any] = {
        "name": name,
        "kind": record.kind,
        "file": record.file_name,
        "cloud": record.cloud,
        "applied_at": record.applied_at,
        "machines": [_machine_view(m) for m in ledger.machines.values()],
        "workloads": [
            {"id": w.workload_id, "phase": w.phase, "priority": w.priority}
            for w in ledger.workloads.values()
        ],
    }
    if record.kind == "master_config":
        det = deps.det_ledgers.get(name) or DetLedger(master=name)
        view["machines"] = [
            {
                "id": a.agent_id,
                "pool": a.pool,
                "slots": a.slots,
                "status": a.status,
                "provider_id": a.provider_id,
                "zone": a.zone,
                "market": a.market,
            }
            for a in det.agents.values()
        ]
        view["workloads"] = [
            {
                "id": tid,
                "pool": det.pool_of(tid),
                "slots": t.slots,
                "phase": "stopping" if t.stopping else ("running" if t.allocations else "pending"),
                "priority": t.priority,
            }
            for tid, t in det.tasks.items()
        ]
    if record.kind == "machine_pool":
        pool = MachinePool.model_validate(record.spec)
        held = _held(ledger)
        view["machine_types"] = [
            {
                "machine_type": t.machine_type,
                "market": t.market,
                "partitions": [
                    {"name": p.name, "size": p.size, "held": held.get((t.machine_type, p.name), 0)}
                    for p in t.partitions
                ],
            }
            for t in machine_types_of(pool)
        ]
    return view


def _machine_view(m: PoolMachine) -> dict[str, Any]:
    return {
        "id": m.machine_id,
        "machine_type": m.machine_type,
        "partition": m.partition,
        "status": m.status,
        "workload": m.workload_id,
        "provider_id": m.provider_id,
        "zone": m.zone,
        "market": m.market,
    }


def _held(ledger: PoolLedger) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for m in ledger.machines.values():
        if not m.head:
            key = (m.machine_type, m.partition)
            out[key] = out.get(key, 0) + 1
    return out


def delete_pool(deps: Deps, name: str) -> dict[str, Any]:
    """Unregister a pool and terminate its machines; refused while workloads use it."""
    record = deps.pools.get(name)
    if record is None:
        raise PoolNotFound(f"no pool {name!r} is registered (see `corral pools list`)")
    ledger = deps.ledgers.get(name)
    det = deps.det_ledgers.get(name)
    ids = [*(ledger.workloads if ledger else {}), *(det.tasks if det else {})]
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
    machines: list[Any] = [
        *(ledger.machines.values() if ledger else ()),
        *(det.agents.values() if det else ()),
    ]
    for machine in machines:
        if machine.provider_id and machine.cloud:
            deps.provider(machine.cloud).terminate([machine.provider_id], zone=machine.zone)
            terminated.append(getattr(machine, "machine_id", None) or machine.agent_id)
    deps.ledgers.delete(name)
    deps.det_ledgers.delete(name)
    deps.pools.delete(name)
    return {"name": name, "deleted": True, "machines_terminated": terminated}


def machine_pool_of(task: Task) -> str | None:
    """The machine pool a task's compute config draws its workers from, if any."""
    compute = task.compute_config
    if not isinstance(compute, ComputeConfig):
        return None
    return next((w.machine_pool() for w in compute.worker_nodes if w.machine_pool()), None)


def names_a_pool(task: Task) -> bool:
    """Whether the task is a machine-pool workload: a compute config whose worker groups name
    a machine pool (a path is the CLI's to read; sent as is, it is refused at submit)."""
    return isinstance(task.compute_config, str) or machine_pool_of(task) is not None


def check_workload(deps: Deps, task: Task) -> str:
    """The pool a workload goes to; PoolError (refused at submit) when it could never run."""
    compute = task.compute_config
    if isinstance(compute, str):
        raise PoolError(
            f"compute_config {compute!r} is a path: send the compute config inline (the CLI "
            "reads the file for you)"
        )
    name = machine_pool_of(task)
    if name is None or compute is None:
        raise PoolError("the compute config's worker_nodes name no machine pool")
    record = deps.pools.get(name)
    if record is None or record.kind != "machine_pool":
        raise PoolError(
            f"machine pool {name!r} is not registered; register it with "
            f"`corral pools apply FILE --name {name}`"
        )
    pool = MachinePool.model_validate(record.spec)
    workload = workload_of(task, compute, workload_id="check", pool_name=name, submitted_at=0)
    known = {m.machine_type: m for m in pool.machine_types}
    missing = [t for t in workload.group_order if t not in known]
    if missing:
        raise PoolError(
            f"machine type(s) {', '.join(missing)} of the compute config are not in pool "
            f"{name!r} (it has {', '.join(known) or 'none'})"
        )
    capacity = sum(known[t].size() for t in workload.group_order)
    if capacity < task.num_nodes:
        raise PoolError(
            f"the workload needs {task.num_nodes} node(s); its groups in {name!r} hold at most "
            f"{capacity}"
        )
    return name


# ----------------------------------------------------------------------------------------------
# Queue and passes (scheduling worker)


def enqueue(deps: Deps, req: LaunchRequest) -> str:
    """Put a PENDING request's workload on its pool's queue (once), then run a pass."""
    name = req.pool
    assert name is not None
    task = Task.model_validate(req.task)
    compute = task.compute_config
    assert isinstance(compute, ComputeConfig)
    workload = workload_of(
        task, compute, workload_id=req.id, pool_name=name, submitted_at=req.created_at
    )
    ledger = deps.ledgers.update(name, lambda led: add_workload(led, workload))
    if ledger is None:
        work.fail_pending(deps, req.id, f"machine pool {name!r} was deleted")
        return "failed"
    return run_pass(deps, name)


def _types(record: PoolRecord) -> tuple[MachineTypeState, ...]:
    return machine_types_of(MachinePool.model_validate(record.spec))


def run_pass(deps: Deps, name: str, *, rebalance: bool = False) -> str:
    """One scheduling pass over pool ``name``, committed by compare-and-set, then carried out.
    ``rebalance`` (beat): replacement and idle reaping are decided too."""
    record = deps.pools.get(name)
    if record is None or record.kind != "machine_pool":
        return "no such pool"
    types = _types(record)
    timers = deps.settings.timers
    for attempt in range(200):
        ledger = deps.ledgers.get(name)
        if ledger is None:
            return "no such pool"
        now = deps.now()
        plan = schedule(
            snapshot_of(ledger, types),
            now,
            min_runtime_s=timers.min_runtime_s,
            replacement_budget=timers.replacement_budget if rebalance else 0,
            replacement_guard_s=timers.replacement_guard_s,
            min_machines=timers.pool_min_machines if rebalance else NO_REAPING,
        )
        version = ledger.version

        def new_id(node: Any, wid: str, index: int, version: int = version) -> str:
            raw = f"{name}/{wid}/{version}/{index}/{node.machine_type}/{node.partition}"
            return "m-" + hashlib.sha1(raw.encode()).hexdigest()[:10]

        after = commit(ledger, plan, types, now, new_id)
        if after.model_dump(exclude={"version"}) == ledger.model_dump(exclude={"version"}):
            break  # nothing to write
        written = deps.ledgers.write(name, after, version)
        if written == 1:
            _log_plan(deps, plan, now)
            break
        if written == -1:
            return "no such pool"
        time.sleep(0.002 * min(attempt, 20))  # lost the race: recompute from a fresh snapshot
    return sync(deps, name)


def _log_plan(deps: Deps, plan: Any, now: float) -> None:
    for placement in plan.placements:
        deps.store.append_event(placement.workload_id, f"scheduler: {placement.reason}", now)
    for preemption in plan.preemptions:
        deps.store.append_event(preemption.workload_id, f"scheduler: {preemption.reason}", now)
        deps.store.append_event(
            preemption.preempted_by, f"scheduler: preempting {preemption.workload_id}", now
        )
    for step in plan.replacements:
        deps.store.append_event(step.workload_id, f"scheduler: replacement: {step.reason}", now)


def rebalance_all(deps: Deps) -> dict[str, str]:
    """Beat: every machine pool's machines checked, then its pass with replacement and idle
    reaping; the master config's pools' pass (idle agents are reaped by it)."""
    out = {}
    for name in deps.pools.names():
        record = deps.pools.get(name)
        if record is not None and record.kind == "machine_pool":
            check_machines(deps, name, record.cloud)
            out[name] = run_pass(deps, name, rebalance=True)
        elif record is not None:
            out[name] = determined.run_pass(deps, name)
    return out


def pass_any(deps: Deps, name: str) -> str:
    """A scheduling pass over a machine pool or a master config's pools."""
    record = deps.pools.get(name)
    if record is None:
        return "no such pool"
    return (
        run_pass(deps, name) if record.kind == "machine_pool" else determined.run_pass(deps, name)
    )


def sync_any(deps: Deps, name: str) -> str:
    """Carry out a machine pool's or a master config's ledger."""
    record = deps.pools.get(name)
    if record is None:
        return "no such pool"
    return sync(deps, name) if record.kind == "machine_pool" else determined.sync(deps, name)


def launch_any(deps: Deps, name: str, machine_id: str) -> str:
    """Launch a machine of a machine pool, or an agent of a master config's pool."""
    record = deps.pools.get(name)
    if record is None:
        return "no such pool"
    if record.kind == "machine_pool":
        return launch_machine(deps, name, machine_id)
    return determined.launch_agent(deps, name, machine_id)


def is_queued(deps: Deps, req: LaunchRequest) -> bool:
    """Whether a pooled request is on its pool's queue (or placed) already."""
    if req.pool is not None:
        ledger = deps.ledgers.get(req.pool)
        return ledger is not None and req.id in ledger.workloads
    det = deps.det_ledgers.get(req.master or "")
    return det is not None and req.id in det.tasks


def knows_machine(deps: Deps, name: str, machine_id: str) -> bool:
    """Whether pool ``name`` (or master config ``name``) still counts this machine."""
    ledger = deps.ledgers.get(name)
    if ledger is not None and machine_id in ledger.machines:
        return True
    det = deps.det_ledgers.get(name)
    return det is not None and machine_id in det.agents


def check_machines(deps: Deps, name: str, cloud: str) -> list[str]:
    """Machines the cloud no longer runs leave the pool; the work on them is queued again
    (at its original place). Returns the machine ids dropped."""
    try:
        seen = {p.provider_id: p for p in deps.provider(cloud).describe({TAG_POOL: name})}
    except ProviderError as exc:
        log.warning("%s did not answer for pool %s (%s); its machines wait", cloud, name, exc)
        return []
    ledger = deps.ledgers.get(name)
    if ledger is None:
        return []
    gone = [
        m
        for m in ledger.machines.values()
        if m.status in ("up", "retiring", "reaping")
        and m.provider_id
        and (m.provider_id not in seen or seen[m.provider_id].state in ("terminated", "lost"))
    ]
    now = deps.now()
    for machine in gone:

        def drop(led: PoolLedger, machine: PoolMachine = machine) -> bool:
            found = led.machines.pop(machine.machine_id, None)
            if found is None:
                return False
            if found.workload_id and found.workload_id in led.workloads and not found.replaces:
                release(led, found.workload_id, now)
            return True

        deps.ledgers.update(name, drop)
        if machine.workload_id:
            work.end_instances(
                deps, machine.workload_id, f"pool machine {machine.machine_id} was lost"
            )
            deps.store.append_event(
                machine.workload_id,
                f"pool machine {machine.machine_id} was lost; requeued at its original place",
                now,
            )
    return [m.machine_id for m in gone]


# ----------------------------------------------------------------------------------------------
# Carrying the ledger out


def sync(deps: Deps, name: str) -> str:
    """Carry pool ``name``'s ledger out once (idempotent; see the module docstring)."""
    ledger = deps.ledgers.get(name)
    record = deps.pools.get(name)
    if ledger is None or record is None:
        return "no such pool"
    changed = False
    for workload_id in list(ledger.workloads):
        changed |= _sync_workload(deps, name, ledger, workload_id)
    ledger = deps.ledgers.get(name) or ledger
    for machine in list(ledger.machines.values()):
        changed |= _sync_machine(deps, name, record, ledger, machine)
    if changed:
        dispatch.pool_pass(name, settings=deps.settings)
        return "changed"
    return "steady"


def _as_machine(m: PoolMachine) -> work.Machine | None:
    """The machine as the cloud knows it; None until it is up."""
    if not m.provider_id or not m.cloud:
        return None
    return work.Machine(
        machine_id=m.machine_id,
        cloud=m.cloud,
        provider_id=m.provider_id,
        region=m.region,
        zone=m.zone,
        instance_type=m.instance_type,
        market=m.market,
        machine_type=m.machine_type,
    )


def _sync_machine(
    deps: Deps, name: str, record: PoolRecord, ledger: PoolLedger, machine: PoolMachine
) -> bool:
    if machine.status == "launching":
        key = f"pool-launch:{machine.machine_id}"
        # Hand it to the provisioning worker once per retry period (the launch is idempotent).
        if deps.store.claim(key, "sent", deps.settings.timers.pool_machine_launch_retry_s):
            dispatch.pool_machine(name, machine.machine_id, record.cloud, settings=deps.settings)
        return False
    if machine.status == "retiring":
        successor = next(
            (m for m in ledger.machines.values() if m.replaces == machine.machine_id), None
        )
        if successor is not None and not _serving(deps, successor, ledger):
            return False  # the better machine is not running the work yet: keep this one
        _terminate_machine(deps, machine, "retired: its workload moved to a better machine")
        deps.ledgers.update(name, lambda led: _drop(led, machine.machine_id))
        if successor is not None:
            deps.ledgers.update(name, lambda led: _clear_replaces(led, successor.machine_id))
        if machine.workload_id:
            work.end_instances(
                deps,
                machine.workload_id,
                "replaced by a better machine",
                provider_id=machine.provider_id,
            )
        return True
    if machine.status == "reaping":
        _terminate_machine(deps, machine, "reaped: idle past its limit")
        deps.ledgers.update(name, lambda led: _drop(led, machine.machine_id))
        return True
    cloud_machine = _as_machine(machine)
    if machine.workload_id is None and cloud_machine is not None:
        work.withdraw(deps, cloud_machine)
    return False


def _drop(ledger: PoolLedger, machine_id: str) -> bool:
    return machine_gone(ledger, machine_id) is not None


def _clear_replaces(ledger: PoolLedger, machine_id: str) -> bool:
    machine = ledger.machines.get(machine_id)
    if machine is None or machine.replaces is None:
        return False
    machine.replaces = None
    return True


def _terminate_machine(deps: Deps, machine: PoolMachine, why: str) -> None:
    if machine.provider_id and machine.cloud:
        log.info("terminating pool machine %s (%s)", machine.machine_id, why)
        deps.provider(machine.cloud).terminate([machine.provider_id], zone=machine.zone)


def _sync_workload(deps: Deps, name: str, ledger: PoolLedger, wid: str) -> bool:
    workload = ledger.workloads[wid]
    req = deps.store.get_request(wid)
    now = deps.now()
    on = [cm for m in ledger.machines_of(wid) if (cm := _as_machine(m)) is not None]
    if req is None or req.is_terminal:
        for machine in on:
            work.withdraw(deps, machine)
        reason = f"its request ended ({req.state.value})" if req else "its request is gone"
        deps.ledgers.update(name, lambda led: _release(led, wid, now, finished=True))
        work.end_instances(deps, wid, reason)
        return True
    if workload.phase == "pending":
        if req.state == RequestState.PROVISIONING:
            work.move_request(
                deps, wid, RequestState.PENDING, "sent back to the queue: a machine failed"
            )
        return False
    if workload.phase == "stopping":
        by = workload.preempted_by or "another workload"
        return work.stop_preempted(
            deps,
            req,
            by,
            [(m, None) for m in on],
            lambda: deps.ledgers.update(name, lambda led: _release(led, wid, now)),
        )
    return _sync_running(deps, name, ledger, wid, req)


def _sync_running(deps: Deps, name: str, ledger: PoolLedger, wid: str, req: LaunchRequest) -> bool:
    workload = ledger.workloads[wid]
    now = deps.now()
    if req.state in (RequestState.PENDING, RequestState.PREEMPTED):
        work.move_request(deps, wid, RequestState.PROVISIONING, ledger.placed_by.get(wid, "placed"))
    task = Task.model_validate(req.task)
    started = workload.started_at or now
    nodes = [m for m in ledger.machines_of(wid) if m.status != "retiring"]
    up = [(m, cm) for m in nodes if m.status == "up" and (cm := _as_machine(m)) is not None]
    for rank, (machine, cloud_machine) in enumerate(up):
        aid = assignment_id(wid, started, machine)
        envs = {
            "CORRAL_REQUEST_ID": wid,
            "CORRAL_NODE_RANK": str(rank),
            "CORRAL_NUM_NODES": str(len(nodes)),
            "CORRAL_MACHINE_TYPE": machine.machine_type,
        }
        work.withdraw_others(deps, cloud_machine, keep={aid})
        if work.ensure_assigned(deps, cloud_machine, work.assignment(aid, task, envs)):
            deps.store.append_event(
                wid,
                f"node {rank} on pool machine {machine.machine_id} ({machine.machine_type})",
                now,
            )
        work.record_instance(deps, cloud_machine, wid, rank, aid)
    if not _head_ready(deps, name, ledger, wid, task, started):
        return False
    if not nodes or len(up) < len(nodes):
        return False
    work.move_request(deps, wid, RequestState.RUNNING, f"{len(nodes)} pool machine(s) run it")
    if not task.run:
        return False
    results = [work.result(deps, cm, assignment_id(wid, started, m)) for m, cm in up]
    return work.finish_when_ended(
        deps,
        wid,
        results,
        lambda: deps.ledgers.update(name, lambda led: _release(led, wid, now, finished=True)),
    )


def _head_ready(
    deps: Deps, name: str, ledger: PoolLedger, wid: str, task: Task, started: float
) -> bool:
    """A workload whose compute config has a ``head_node`` gets one, launched outside the
    pool for as long as it is placed; True once it is up (or when it has none)."""
    compute = task.compute_config
    if not isinstance(compute, ComputeConfig) or compute.head_node is None:
        return True
    head = head_of(ledger, wid)
    if head is None:
        raw = f"{name}/{wid}/{int(started * 1000)}/head"
        machine_id = "h-" + hashlib.sha1(raw.encode()).hexdigest()[:10]
        now = deps.now()
        deps.ledgers.update(name, lambda led: add_head(led, wid, machine_id, now))
        dispatch.pool_sync(name, settings=deps.settings)  # its launch is handed over there
        return False
    cloud_machine = _as_machine(head)
    if head.status != "up" or cloud_machine is None:
        return False
    aid = f"{wid}.{int(started * 1000)}.head"
    work.record_instance(
        deps, replace(cloud_machine, machine_type=HEAD_NODE), wid, len(ledger.machines_of(wid)), aid
    )
    return True


def _release(ledger: PoolLedger, wid: str, now: float, *, finished: bool = False) -> bool:
    if wid not in ledger.workloads:
        return False
    release(ledger, wid, now, finished=finished)
    return True


def assignment_id(wid: str, started_at: float, machine: PoolMachine) -> str:
    """The id of a workload's work on one machine, new for every placement."""
    return f"{wid}.{int(started_at * 1000)}.{machine.machine_id}"


def _serving(deps: Deps, machine: PoolMachine, ledger: PoolLedger) -> bool:
    """Whether a replacement's machine is up and has taken its workload's work."""
    cloud_machine = _as_machine(machine)
    if machine.status != "up" or cloud_machine is None or machine.workload_id is None:
        return False
    if work.agents(deps, cloud_machine) is None:
        return True
    workload = ledger.workloads.get(machine.workload_id)
    if workload is None or workload.started_at is None:
        return True
    aid = assignment_id(machine.workload_id, workload.started_at, machine)
    found = work.status(deps, cloud_machine)
    return aid in found.get("running", {}) or aid in found.get("results", {})


# ----------------------------------------------------------------------------------------------
# Launching one machine (provisioning worker)


def launch_machine(deps: Deps, name: str, machine_id: str) -> str:
    """Launch one machine the ledger asks for, through its type's launch templates and
    zones; record it up, or send its workload back to the queue if nothing could launch it."""
    owner = uuid.uuid4().hex
    key = f"pool-machine:{machine_id}"
    if not deps.store.claim(key, owner, deps.settings.timers.claim_ttl_s):
        return "busy"
    with hold_claim(deps, key, owner):
        ledger = deps.ledgers.get(name)
        record = deps.pools.get(name)
        if ledger is None or record is None:
            return "no such pool"
        machine = ledger.machines.get(machine_id)
        if machine is None or machine.status != "launching":
            return "stale"
        templates = _templates(deps, record, machine)
        if not templates:
            return _launch_failed(deps, name, machine, "its machine type left the pool file")
        tags = {TAG_MANAGED: "true", TAG_POOL: name, TAG_MACHINE: machine_id}
        errors: list[str] = []
        for template in templates:
            try:
                got, spec = launch_on_zones(
                    deps,
                    record.cloud,
                    template,
                    f"pool-{name}",
                    machine_id,
                    tags,
                    _workload_config(deps, machine),
                )
            except ProviderError as exc:
                errors.append(str(exc))
                continue
            except MergeError as exc:
                return _launch_failed(deps, name, machine, f"advanced_instance_config: {exc}")
            where = {
                "provider_id": got.provider_id,
                "cloud": got.cloud,
                "region": got.region,
                "zone": got.zone,
                "instance_type": got.instance_type,
                "market": "reserved" if spec.reservation_id or _reserved(spec) else got.market,
            }
            updated = deps.ledgers.update(name, partial(_up, machine_id=machine_id, where=where))
            if updated is None or machine_id not in updated.machines:
                deps.provider(record.cloud).terminate([got.provider_id])
                return "released"
            if machine.workload_id:
                deps.store.append_event(
                    machine.workload_id,
                    f"pool machine {machine_id} ({machine.machine_type}) up in {got.zone}",
                    deps.now(),
                )
            dispatch.pool_sync(name, settings=deps.settings)
            return "up"
        return _launch_failed(deps, name, machine, "; ".join(errors) or "no zone offers it")


def _templates(deps: Deps, record: PoolRecord, machine: PoolMachine) -> list[LaunchTemplate]:
    """How a machine may be launched: its machine type's launch templates, or for a head
    node its workload's ``head_node`` (on demand, outside the pool)."""
    if not machine.head:
        found = MachinePool.model_validate(record.spec).machine(machine.machine_type)
        return list(found.launch_templates) if found else []
    req = deps.store.get_request(machine.workload_id or "")
    compute = Task.model_validate(req.task).compute_config if req else None
    if not isinstance(compute, ComputeConfig) or compute.head_node is None:
        return []
    head = compute.head_node
    return [
        LaunchTemplate(
            instance_type=head.instance_type,
            advanced_instance_config=head.advanced_instance_config or {},
        )
    ]


def launch_on_zones(
    deps: Deps,
    cloud: str,
    template: LaunchTemplate,
    label: str,
    attempt_id: str,
    tags: dict[str, str],
    extra: dict[str, Any] | None = None,
) -> tuple[ProviderInstance, LaunchSpec]:
    """Launch one machine of ``template`` in the first zone that has it (the reservation's
    zone for a reserved template), idempotent by ``attempt_id``. Raises the last zone's
    ProviderError when none could, or MergeError for a bad ``extra`` config."""
    config = dict(template.advanced_instance_config)
    if extra:
        config = merge_advanced_instance_config(cloud, config, extra)
    last: ProviderError = ProviderError(
        f"no zone of {cloud} offers {template.instance_type}", code="NoZone"
    )
    failures = []
    for zone, region in _zones(deps, cloud, template):
        spec = LaunchSpec(
            request_id=label,
            attempt_id=attempt_id,
            cloud=cloud,
            region=region,
            zone=zone,
            instance_type=template.instance_type,
            market="spot" if template.market_type == "SPOT" else "on_demand",
            count=1,
            advanced_instance_config=config,
            tags=tags,
        )
        try:
            return _launch(deps, cloud, spec), spec
        except ProviderError as exc:
            failures.append(f"{zone}: {exc.outcome}: {exc}")
            last = exc
    if failures:
        raise ProviderError("; ".join(failures), code=last.code)
    raise last


def _up(ledger: PoolLedger, *, machine_id: str, where: dict[str, Any]) -> bool:
    machine = ledger.machines.get(machine_id)
    if machine is None or machine.status != "launching":
        return False
    machine_up(ledger, machine_id, **where)
    return True


def _launch_failed(deps: Deps, name: str, machine: PoolMachine, why: str) -> str:
    now = deps.now()

    def failed(ledger: PoolLedger) -> bool:
        if machine.machine_id not in ledger.machines:
            return False
        machine_failed(ledger, machine.machine_id, now)
        return True

    deps.ledgers.update(name, failed)
    if machine.workload_id:
        deps.store.append_event(
            machine.workload_id,
            f"pool machine {machine.machine_type} could not be launched ({why}); back in the queue",
            now,
        )
    dispatch.pool_pass(name, settings=deps.settings)
    return "failed"


def _workload_config(deps: Deps, machine: PoolMachine) -> dict[str, Any]:
    """The workload's own advanced_instance_config for this machine type, if any: its task's,
    or its compute config's worker group's (merged over the launch template's)."""
    if machine.workload_id is None or machine.head:
        return {}  # a head node's own config is its template's
    req = deps.store.get_request(machine.workload_id)
    if req is None:
        return {}
    task = Task.model_validate(req.task)
    out: dict[str, Any] = {}
    compute = task.compute_config
    if isinstance(compute, ComputeConfig):
        out.update(compute.advanced_instance_config or {})
        for group in compute.worker_nodes:
            if group.instance_type == machine.machine_type and group.advanced_instance_config:
                out.update(group.advanced_instance_config)
    out.update(task.advanced_instance_config or {})
    return out


def _zones(deps: Deps, cloud: str, template: LaunchTemplate) -> list[tuple[str, str]]:
    """(zone, region) pairs to try for a template: its own zones, else where the cloud
    offers the type (the reservation's zone first)."""
    if cloud != "local":
        from corral.shared.catalog import load_catalog

        offerings = load_catalog().instance_type(cloud, template.instance_type)
        pairs = [(o.zone, o.region) for o in offerings]
    else:
        local = deps.local_cloud
        itype = local.aliases.get(template.instance_type, template.instance_type)
        pairs = [(z.name, r.name) for r in local.regions for z in r.zones if z.offers(itype)]
        rid = _reservation_of(template.advanced_instance_config)
        reservation = next((x for x in local.reservations if x.id == rid), None)
        if reservation is not None:
            region = next(
                r.name for r in local.regions for z in r.zones if z.name == reservation.zone
            )
            pairs = [(reservation.zone, region)]
    if template.zones:
        pairs = [p for p in pairs if p[0] in template.zones]
    return pairs


def _reservation_of(config: Mapping[str, Any]) -> str | None:
    spec = config.get("CapacityReservationSpecification")
    target = spec.get("CapacityReservationTarget") if isinstance(spec, Mapping) else None
    rid = target.get("CapacityReservationId") if isinstance(target, Mapping) else None
    return str(rid) if rid else None


def _reserved(spec: LaunchSpec) -> bool:
    return _reservation_of(spec.advanced_instance_config) is not None


def _launch(deps: Deps, cloud: str, spec: LaunchSpec) -> ProviderInstance:
    from corral.services.runtime.provisioning import launch_and_wait

    [got] = launch_and_wait(deps, cloud, spec)
    return got


# ----------------------------------------------------------------------------------------------
# Why


def why(deps: Deps, request_id: str) -> dict[str, Any]:
    """The scheduler's word on a request: where it runs, or why it waits."""
    req = deps.store.get_request(request_id)
    if req is None:
        raise LookupError(f"no launch request {request_id!r}")
    if req.master is not None:
        return determined.why(deps, req)
    out: dict[str, Any] = {"id": req.id, "state": req.state.value, "pool": req.pool}
    if req.pool is None:
        out.update(code="not_pooled", reason="it does not run on a pool: " + _plain_why(req))
        return out
    ledger = deps.ledgers.get(req.pool)
    workload = ledger.workloads.get(req.id) if ledger else None
    if ledger is None or workload is None:
        out.update(code="not_queued", reason=f"it is not on {req.pool}'s queue ({req.state.value})")
        return out
    out["phase"] = workload.phase
    out["preempted_by"] = workload.preempted_by
    note = ledger.notes.get(req.id)
    if workload.phase == "pending" and note is not None:
        out.update(code=note.code, reason=note.reason)
    elif workload.phase == "pending":
        out.update(code="queued", reason="queued; the next scheduling pass decides")
    elif workload.phase == "stopping":
        out.update(
            code="stopping",
            reason=f"preempted by {workload.preempted_by}; giving its machines back",
        )
    else:
        machines = [_machine_view(m) for m in ledger.machines_of(req.id)]
        out.update(code="placed", reason=ledger.placed_by.get(req.id, "placed"), machines=machines)
    return out


def _plain_why(req: LaunchRequest) -> str:
    if req.state == RequestState.PENDING:
        return "it waits for the scheduling worker to plan its failover chain"
    if req.error:
        return req.error
    return f"it is {req.state.value}"
