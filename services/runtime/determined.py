"""Determined resource pools at run time: a registered master config's pools, each with its
own scheduler, their agents launched on a cloud (the local cloud's ``provider: {type: local}``
included), and tasks routed to them.

- :func:`route`: where a task goes (its ``resources.resource_pool``, else the aux default for
  zero slots and the compute default for slots); a task the pool can never fit, or a pool the
  master does not define, is refused at submit with the reason.
- :func:`run_pass`: every pool's scheduler over a snapshot of the master's ledger
  (:func:`corral.shared.scheduling.schedule_pools`, fallback pools included), agents added for
  tasks left waiting for room, committed with a compare-and-set (a lost race recomputes).
- :func:`sync`: carries the ledger out, as :func:`corral.services.runtime.pools.sync` does for
  machine pools: agents launched and reaped, tasks assigned to their agents' slots, preempted
  tasks stopped and requeued, finished jobs ended.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from functools import partial
from typing import Any

from corral.services.providers.base import TAG_MACHINE, TAG_MANAGED, TAG_POOL
from corral.services.queues import dispatch
from corral.services.runtime import workloads as work
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import catalog_with_local
from corral.services.state.pools import PoolRecord
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.config.master_config import MasterConfig
from corral.shared.config.task import Task
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import RequestState
from corral.shared.pools import ResolvedPools, UnknownPoolError, resolve_pools, route_task
from corral.shared.records import LaunchRequest
from corral.shared.scheduling import DetTask, can_ever_fit, schedule_pools
from corral.shared.scheduling.build import det_limits
from corral.shared.scheduling.det_ledger import (
    DetAgent,
    DetLedger,
    add_task,
    agent_lost,
    commit_det,
    grow,
    release_task,
    snapshots_of,
)
from corral.shared.scheduling.model import DetPoolSnapshot

log = logging.getLogger("corral.determined")


class RouteError(ValueError):
    """The task can never run in the registered master's pools (refused at submit)."""


def master_record(deps: Deps) -> PoolRecord | None:
    """The registered master config (there is at most one)."""
    for name in deps.pools.names():
        record = deps.pools.get(name)
        if record is not None and record.kind == "master_config":
            return record
    return None


def wants_determined(deps: Deps, task: Task) -> bool:
    """Whether a task goes to a Determined pool: it names one, or it asks for slots while a
    master config is registered."""
    if task.resources.resource_pool is not None:
        return True
    return task.resources.slots is not None and master_record(deps) is not None


def _resolved(record: PoolRecord) -> ResolvedPools:
    return resolve_pools(MasterConfig.model_validate(record.spec))


def _limits(deps: Deps, record: PoolRecord, pools: ResolvedPools) -> dict[str, dict[str, Any]]:
    """Per pool, its provider's limits (slots per agent, max and min agents, idle period)."""
    settings = deps.settings
    path = str(settings.local_cloud_file)
    try:
        mtime = settings.local_cloud_file.stat().st_mtime_ns
    except OSError:
        mtime = 0
    catalog = catalog_with_local(path, mtime)
    return {p.pool_name: det_limits(p, catalog) for p in pools.pools}


def route(deps: Deps, task: Task) -> tuple[str, str]:
    """(master name, pool) for a task; RouteError with the reason when it can never run."""
    record = master_record(deps)
    if record is None:
        raise RouteError(
            f"the task names resource pool {task.resources.resource_pool!r} but no master "
            "config is registered; register one with `corral pools apply master.yaml`"
        )
    pools = _resolved(record)
    try:
        pool = route_task(pools, task)
    except UnknownPoolError as exc:
        raise RouteError(str(exc)) from None
    if pools.pool(pool).provider is None:
        raise RouteError(
            f"pool {pool!r} of {record.name} is a static pool (no provider): Corral launches "
            "agents only for pools with a provider and cannot register existing agents, so the "
            "task would never run; send it to a pool with a provider"
        )
    limits = _limits(deps, record, pools).get(pool, {})
    snapshot = DetPoolSnapshot(pool=pool, **limits)
    verdict = can_ever_fit(snapshot, task.slots())
    if not verdict.ok:
        raise RouteError(verdict.reason)
    unknown = [
        p
        for p in (task.scheduling.fallback_pools if task.scheduling else [])
        if p not in pools.names()
    ]
    if unknown:
        raise RouteError(
            f"scheduling.fallback_pools names {', '.join(unknown)}, not a pool of "
            f"{record.name} (it has {', '.join(pools.names())})"
        )
    return record.name, pool


def task_of(req: LaunchRequest, task: Task) -> DetTask:
    """A request as a Determined task: its own group (job), its slots, Determined's priority."""
    return DetTask(
        task_id=req.id,
        group_id=task.labels.get("experiment", req.id),
        slots=task.slots(),
        priority=task.resources.priority,
        weight=float(task.labels.get("weight", 1.0)),
        preemptible=bool(task.scheduling.preemptible)
        if task.scheduling and task.scheduling.preemptible is not None
        else True,
        submitted_at=req.created_at,
        fallback_pools=tuple(task.scheduling.fallback_pools if task.scheduling else ()),
    )


def enqueue(deps: Deps, req: LaunchRequest) -> str:
    """Put a PENDING request on its pool's queue (once), then run a pass."""
    master, pool = req.master or "", req.resource_pool or ""
    task = task_of(req, Task.model_validate(req.task))
    if deps.det_ledgers.get(master) is None:
        deps.det_ledgers.create(master, DetLedger(master=master))
    ledger = deps.det_ledgers.update(master, lambda led: add_task(led, task, pool) or True)
    if ledger is None:
        work.fail_pending(deps, req.id, f"master config {master!r} was deleted")
        return "failed"
    return run_pass(deps, master)


def run_pass(deps: Deps, master: str) -> str:
    """Every pool's scheduler over one snapshot, committed by compare-and-set, then carried
    out."""
    record = deps.pools.get(master)
    if record is None or record.kind != "master_config":
        return "no such master"
    pools = _resolved(record)
    limits = _limits(deps, record, pools)
    for attempt in range(200):
        ledger = deps.det_ledgers.get(master)
        if ledger is None:
            return "no ledger"
        now = deps.now()
        snapshots = snapshots_of(ledger, pools, limits)
        plans = schedule_pools(snapshots, now)
        after = commit_det(ledger, plans, now)
        version = ledger.version

        def new_id(pool: str, index: int, version: int = version) -> str:
            raw = f"{master}/{pool}/{version}/{index}"
            return "a-" + hashlib.sha1(raw.encode()).hexdigest()[:10]

        grow(after, snapshots, plans, now, new_id)
        if after.model_dump(exclude={"version"}) == ledger.model_dump(exclude={"version"}):
            break
        written = deps.det_ledgers.write(master, after, version)
        if written == 1:
            for plan in plans:
                for start in plan.starts:
                    deps.store.append_event(start.task_id, f"scheduler: {start.reason}", now)
                for rel in plan.releases:
                    deps.store.append_event(rel.task_id, f"scheduler: {rel.reason}", now)
            break
        if written == -1:
            return "no ledger"
        time.sleep(0.002 * min(attempt, 20))
    return sync(deps, master)


# ----------------------------------------------------------------------------------------------
# Carrying the ledger out


def _as_machine(agent: DetAgent) -> work.Machine | None:
    if not agent.provider_id or not agent.cloud:
        return None
    return work.Machine(
        machine_id=agent.agent_id,
        cloud=agent.cloud,
        provider_id=agent.provider_id,
        region=agent.region,
        zone=agent.zone,
        instance_type=agent.instance_type,
        market=agent.market,
    )


def sync(deps: Deps, master: str) -> str:
    """Carry the master's ledger out once (idempotent)."""
    ledger = deps.det_ledgers.get(master)
    record = deps.pools.get(master)
    if ledger is None or record is None:
        return "no such master"
    changed = False
    for task_id in list(ledger.tasks):
        changed |= _sync_task(deps, master, ledger, task_id)
    ledger = deps.det_ledgers.get(master) or ledger
    for agent in list(ledger.agents.values()):
        changed |= _sync_agent(deps, master, record, ledger, agent)
    if changed:
        dispatch.pool_pass(master, settings=deps.settings)
        return "changed"
    return "steady"


def _sync_agent(
    deps: Deps, master: str, record: PoolRecord, ledger: DetLedger, agent: DetAgent
) -> bool:
    if agent.status == "launching":
        if deps.store.claim(
            f"pool-launch:{agent.agent_id}",
            "sent",
            deps.settings.timers.pool_machine_launch_retry_s,
        ):
            dispatch.pool_machine(
                master, agent.agent_id, _cloud(record, agent.pool), settings=deps.settings
            )
        return False
    machine = _as_machine(agent)
    if agent.status == "reaping":
        if machine is not None:
            deps.provider(machine.cloud).terminate([machine.provider_id], zone=machine.zone)
        deps.det_ledgers.update(
            master, lambda led: led.agents.pop(agent.agent_id, None) is not None
        )
        return True
    busy = {f"{tid}." for tid, _ in _on_agent(ledger, agent.agent_id)}
    if machine is not None and not busy:
        work.withdraw(deps, machine)
    return False


def _on_agent(ledger: DetLedger, agent_id: str) -> list[tuple[str, int]]:
    return [
        (tid, a.slots)
        for tid, t in ledger.tasks.items()
        for a in t.allocations
        if a.agent_id == agent_id
    ]


def _cloud(record: PoolRecord, pool: str) -> str:
    provider = _resolved(record).pool(pool).provider or {}
    return str(provider.get("type") or record.cloud)


def _sync_task(deps: Deps, master: str, ledger: DetLedger, tid: str) -> bool:
    task = ledger.tasks[tid]
    req = deps.store.get_request(tid)
    now = deps.now()
    agents = [ledger.agents.get(a.agent_id) for a in task.allocations]
    on = [m for a in agents if a is not None and (m := _as_machine(a)) is not None]
    if req is None or req.is_terminal:
        for machine in on:
            work.withdraw(deps, machine, _aid(tid, task.started_at, machine.machine_id))
        deps.det_ledgers.update(master, partial(_release, tid=tid, now=now, finished=True))
        work.end_instances(deps, tid, f"its request ended ({req.state.value if req else 'gone'})")
        return True
    if not task.allocations:
        if req.state == RequestState.PROVISIONING:
            work.move_request(deps, tid, RequestState.PENDING, "sent back to the queue")
        return False
    if task.stopping:
        by = ledger.preempted_by.get(tid, "another task")
        return work.stop_preempted(
            deps,
            req,
            by,
            [(m, _aid(tid, task.started_at, m.machine_id)) for m in on],
            lambda: deps.det_ledgers.update(
                master, partial(_release, tid=tid, now=now, finished=False)
            ),
        )
    if req.state in (RequestState.PENDING, RequestState.PREEMPTED):
        reason = ledger.started_by.get(tid, "started")
        work.move_request(deps, tid, RequestState.PROVISIONING, reason)
    spec = Task.model_validate(req.task)
    for rank, machine in enumerate(on):
        aid = _aid(tid, task.started_at, machine.machine_id)
        slots = next(a.slots for a in task.allocations if a.agent_id == machine.machine_id)
        envs = {
            "CORRAL_REQUEST_ID": tid,
            "CORRAL_NODE_RANK": str(rank),
            "CORRAL_NUM_NODES": str(len(task.allocations)),
            "CORRAL_SLOTS": str(slots),
            "CORRAL_RESOURCE_POOL": ledger.pool_of(tid),
        }
        if work.ensure_assigned(deps, machine, work.assignment(aid, spec, envs)):
            deps.store.append_event(
                tid, f"{slots} slot(s) on agent {machine.machine_id} ({ledger.pool_of(tid)})", now
            )
        work.record_instance(deps, machine, tid, rank, aid)
    if len(on) < len(task.allocations):
        return False
    work.move_request(deps, tid, RequestState.RUNNING, f"{len(on)} agent(s) run it")
    if not spec.run:
        return False
    results = [work.result(deps, m, _aid(tid, task.started_at, m.machine_id)) for m in on]
    return work.finish_when_ended(
        deps,
        tid,
        results,
        lambda: deps.det_ledgers.update(master, partial(_release, tid=tid, now=now, finished=True)),
    )


def _release(ledger: DetLedger, *, tid: str, now: float, finished: bool) -> bool:
    return release_task(ledger, tid, now, finished=finished)


def _aid(tid: str, started_at: float | None, agent_id: str) -> str:
    return f"{tid}.{int((started_at or 0) * 1000)}.{agent_id}"


# ----------------------------------------------------------------------------------------------
# Launching an agent (provisioning worker)


def launch_agent(deps: Deps, master: str, agent_id: str) -> str:
    """Launch one agent of a pool on its provider's cloud; on failure its tasks wait again."""
    from corral.services.runtime.pools import launch_on_zones

    owner = uuid.uuid4().hex
    key = f"pool-machine:{agent_id}"
    if not deps.store.claim(key, owner, deps.settings.timers.claim_ttl_s):
        return "busy"
    with hold_claim(deps, key, owner):
        ledger = deps.det_ledgers.get(master)
        record = deps.pools.get(master)
        if ledger is None or record is None:
            return "no such master"
        agent = ledger.agents.get(agent_id)
        if agent is None or agent.status != "launching":
            return "stale"
        provider = _resolved(record).pool(agent.pool).provider or {}
        cloud = str(provider.get("type") or record.cloud)
        instance = provider.get("instance_type")
        if isinstance(instance, dict):
            instance = instance.get("machine_type")
        template = LaunchTemplate(
            instance_type=str(instance),
            market_type="SPOT" if provider.get("spot") else "ON_DEMAND",
        )
        tags = {TAG_MANAGED: "true", TAG_POOL: master, TAG_MACHINE: agent_id}
        try:
            got, _ = launch_on_zones(deps, cloud, template, f"pool-{master}", agent_id, tags)
        except ProviderError as exc:
            now = deps.now()
            deps.det_ledgers.update(
                master, lambda led: bool(agent_lost(led, agent_id, now)) or True
            )
            log.warning("agent %s of %s could not be launched: %s", agent_id, agent.pool, exc)
            dispatch.pool_pass(master, settings=deps.settings)
            return "failed"
        where = {
            "provider_id": got.provider_id,
            "cloud": got.cloud,
            "region": got.region,
            "zone": got.zone,
            "instance_type": got.instance_type,
            "market": got.market,
        }

        def up(led: DetLedger) -> bool:
            found = led.agents.get(agent_id)
            if found is None or found.status != "launching":
                return False
            for field, value in where.items():
                setattr(found, field, value)
            found.status = "up"
            found.idle_since = deps.now()
            return True

        updated = deps.det_ledgers.update(master, up)
        if updated is None or agent_id not in updated.agents:
            deps.provider(cloud).terminate([got.provider_id])
            return "released"
        dispatch.pool_sync(master, settings=deps.settings)
        return "up"


# ----------------------------------------------------------------------------------------------
# Why


def why(deps: Deps, req: LaunchRequest) -> dict[str, Any]:
    """The Determined scheduler's word on a task."""
    out: dict[str, Any] = {
        "id": req.id,
        "state": req.state.value,
        "pool": req.resource_pool,
        "master": req.master,
    }
    ledger = deps.det_ledgers.get(req.master or "")
    task = ledger.tasks.get(req.id) if ledger else None
    if ledger is None or task is None:
        out.update(code="not_queued", reason=f"it is not on a queue ({req.state.value})")
        return out
    out["pool"] = ledger.pool_of(req.id)
    note = ledger.notes.get(req.id)
    if task.stopping:
        by = ledger.preempted_by.get(req.id)
        out.update(
            code="stopping", reason=f"preempted by {by}; giving its slots back", preempted_by=by
        )
    elif task.allocations:
        where = ", ".join(f"{a.slots} on {a.agent_id}" for a in task.allocations)
        out.update(code="started", reason=f"{ledger.started_by.get(req.id, 'started')}: {where}")
    elif note is not None:
        out.update(code=note.code, reason=note.reason)
        if req.id in ledger.preempted_by:
            out["preempted_by"] = ledger.preempted_by[req.id]
    else:
        out.update(code="queued", reason="queued; the next scheduling pass decides")
    return out
