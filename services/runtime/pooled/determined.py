"""Determined resource pools (:class:`DeterminedPools`): the pool-kind implementation for a
registered master config.

Each of the master's pools has its own scheduler (fair_share, priority, round_robin; best or
worst fit, :func:`corral.shared.scheduling.schedule_pools`, fallback pools included); agents are
launched on the pool's provider's cloud (the local cloud's ``provider: {type: local}``
included) for tasks left waiting for room, and run several tasks each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from corral.services.runtime import typed_task
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import budgets_of, catalog_for
from corral.services.runtime.pooled import work
from corral.services.runtime.pooled.agent_places import agent_zones
from corral.services.runtime.pooled.cloud_ready import cloud_not_ready
from corral.services.runtime.pooled.kube_pods import kube_template
from corral.services.runtime.pooled.pool_kind import Held, LaunchOrder, PassResult
from corral.services.state.blocks import RememberedBlock
from corral.services.state.docstore import DocStore
from corral.services.state.pool_store import PoolKind as KindName
from corral.services.state.pool_store import PoolRecord
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.config.master_config import MasterConfig
from corral.shared.config.task import Task
from corral.shared.det_providers import agent_launch
from corral.shared.lifecycle import AgentStatus, RequestState
from corral.shared.machine_walk import LaunchBlocked
from corral.shared.records import LaunchRequest, OwnerKind
from corral.shared.resource_pools import ResolvedPools, resolve_pools
from corral.shared.routing import DeterminedRoute, pool_limits
from corral.shared.scheduling import DetTask
from corral.shared.scheduling.det_ledger import (
    DetAgent,
    DetLedger,
    add_task,
    agent_lost,
    release_task,
)
from corral.shared.scheduling.fallback import FallbackPolicy, Setback
from corral.shared.scheduling.pool_passes import Costing, determined_pass, slot_prices


def resolved(record: PoolRecord) -> ResolvedPools:
    return resolve_pools(MasterConfig.model_validate(record.spec))


def task_of(req: LaunchRequest, task: Task) -> DetTask:
    """A request as a Determined task: its own group (job), its slots, Determined's priority,
    and its group's ``max_slots``."""
    return DetTask(
        task_id=req.id,
        group_id=task.labels.get("experiment", req.id),
        slots=task.slots(),
        priority=task.resources.priority,
        weight=float(task.labels.get("weight", 1.0)),
        max_slots=task.resources.max_slots,
        preemptible=bool(task.scheduling.preemptible)
        if task.scheduling and task.scheduling.preemptible is not None
        else True,
        submitted_at=req.created_at,
        fallback_pools=tuple(task.scheduling.fallback_pools if task.scheduling else ()),
        labels=dict(task.labels),
    )


class DeterminedPools:
    """The master-config kind (see :class:`corral.services.runtime.pooled.pool_kind.PoolKind`)."""

    name: KindName = "master_config"
    owner_kind: OwnerKind = "det_pool"
    label: str = "master config"

    def ledgers(self, deps: Deps) -> DocStore[DetLedger]:
        return deps.det_ledgers

    def new_ledger(self, name: str) -> DetLedger:
        return DetLedger(master=name)

    # ------------------------------------------------------------------------------------------
    # The queue and passes

    def add_work(self, record: PoolRecord, req: LaunchRequest) -> Callable[[DetLedger], bool]:
        assert isinstance(req.route, DeterminedRoute)
        task, pool = task_of(req, typed_task.task_of(req)), req.route.resource_pool
        return lambda ledger: add_task(ledger, task, pool) or True

    def work_ids(self, ledger: DetLedger) -> list[str]:
        return list(ledger.tasks)

    def pass_over(
        self,
        deps: Deps,
        record: PoolRecord,
        ledger: DetLedger,
        now: float,
        *,
        rebalance: bool,
        held: Held,
        blocks: Sequence[RememberedBlock] = (),
    ) -> PassResult:
        pools = resolved(record)
        limits = pool_limits(pools, catalog_for(deps))
        master, version = record.name, ledger.version

        def new_id(pool: str, index: int) -> str:
            raw = f"{master}/{pool}/{version}/{index}"
            return "a-" + hashlib.sha1(raw.encode()).hexdigest()[:10]

        budgets = budgets_of(deps)
        costing = (
            Costing(budgets, slot_prices(pools, limits, catalog_for(deps))) if budgets else None
        )
        # An up agent's market counts in scheduling: its row of the machine table holds it.
        markets = {a: row.market for a in ledger.agents if (row := held.get(a)) is not None}
        after, plans = determined_pass(
            ledger,
            pools,
            limits,
            now,
            new_id=new_id,
            costing=costing,
            markets=markets,
            launch_blocked=self._launch_blocked(deps, record, pools, blocks),
        )

        def log() -> None:
            for plan in plans:
                for start in plan.starts:
                    deps.store.append_event(start.task_id, f"scheduler: {start.reason}", now)
                for rel in plan.releases:
                    deps.store.append_event(rel.task_id, f"scheduler: {rel.reason}", now)

        return PassResult(after, log)

    def lose_machine(self, ledger: DetLedger, machine_id: str, now: float) -> list[str]:
        return agent_lost(ledger, machine_id, now)

    # ------------------------------------------------------------------------------------------
    # Carrying the ledger out

    def sync_work(
        self, deps: Deps, record: PoolRecord, ledger: DetLedger, work_id: str, held: Held
    ) -> bool:
        return _sync_task(deps, record.name, ledger, work_id, held)

    def machines(self, ledger: DetLedger) -> dict[str, DetAgent]:
        return dict(ledger.agents)

    def sync_machine(
        self,
        deps: Deps,
        record: PoolRecord,
        ledger: DetLedger,
        machine_id: str,
        machine: DetAgent,
        held: Held,
    ) -> bool:
        cloud_machine = work.as_machine(held, machine)
        if cloud_machine is not None and not _on_agent(ledger, machine_id):
            work.withdraw(deps, cloud_machine)
        return False

    def drop_machine(self, ledger: DetLedger, machine_id: str) -> bool:
        return ledger.agents.pop(machine_id, None) is not None

    # ------------------------------------------------------------------------------------------
    # Launching one agent

    def cloud_of(self, record: PoolRecord, machine: DetAgent) -> str:
        provider = resolved(record).pool(machine.pool).provider or {}
        return str(provider.get("type") or record.cloud)

    def launch_order(self, deps: Deps, record: PoolRecord, machine: DetAgent) -> LaunchOrder | str:
        """The pool's provider as the cloud receives it (:mod:`corral.shared.det_providers`):
        its region, zone, image, network and the rest; a text saying why not, when the file
        names a place Corral cannot launch the agent in."""
        return self._order(deps, record, resolved(record), machine.pool)

    def _order(
        self, deps: Deps, record: PoolRecord, pools: ResolvedPools, pool: str
    ) -> LaunchOrder | str:
        provider = pools.pool(pool).provider or {}
        if provider.get("type") == "kubernetes" and "pod_spec" in provider:
            pod = kube_template(deps, provider)  # resource_manager: type: kubernetes
            return pod if isinstance(pod, str) else LaunchOrder("kubernetes", [pod])
        launch = agent_launch(provider, record.name)
        cloud = str(provider.get("type") or record.cloud)
        zones = agent_zones(deps, cloud, launch)
        if isinstance(zones, str):
            return zones
        template = LaunchTemplate(
            instance_type=launch.instance_type,
            market_type=launch.market,
            advanced_instance_config=launch.config,
            zones=zones,
        )
        return LaunchOrder(cloud, [template], boot_deadline_s=launch.boot_deadline_s)

    def _launch_blocked(
        self,
        deps: Deps,
        record: PoolRecord,
        pools: ResolvedPools,
        remembered: Sequence[RememberedBlock],
    ) -> dict[str, LaunchBlocked]:
        """The pools whose every agent place the blocks in force cover: a pass grows them by
        no agent (it would only fail its launch). Only a pool whose provider's cloud has a
        block is asked where it launches; a Kubernetes pod is not walked over zones."""
        blocks = [(b.block, b.until) for b in remembered]
        clouds = {block.cloud for block, _ in blocks}
        out: dict[str, LaunchBlocked] = {}
        for pool in pools.pools:
            provider = pool.provider
            if not provider or str(provider.get("type") or record.cloud) not in clouds:
                continue
            order = self._order(deps, record, pools, pool.pool_name)
            if isinstance(order, str) or order.cloud == "kubernetes":
                continue  # a place it cannot launch in: its launch says why, as before
            found = work.blocked_launch(deps, record.name, order.cloud, order.templates, blocks)
            if found is not None:
                out[pool.pool_name] = found
        return out

    def machine_up(self, ledger: DetLedger, machine_id: str, now: float) -> bool:
        found = ledger.agents.get(machine_id)
        if found is None or found.status != AgentStatus.LAUNCHING:
            return False
        found.move(AgentStatus.UP)
        found.idle_since = now
        ledger.launch_failures.pop(found.pool, None)
        return True

    def machine_failed(
        self, ledger: DetLedger, machine_id: str, now: float, *, why: str, policy: FallbackPolicy
    ) -> bool:
        agent = ledger.agents.get(machine_id)
        if agent is not None:
            ledger.launch_failures[agent.pool] = why  # for why: the cause, not only in a log
        agent_lost(ledger, machine_id, now)  # an agent serves its pool: no one task backs off
        return True

    def setback_of(self, ledger: DetLedger, work_id: str) -> Setback | None:
        return None

    def workload_of(self, machine: DetAgent) -> str | None:
        return None  # an agent serves its pool, not one task

    # ------------------------------------------------------------------------------------------
    # Views

    def why(self, deps: Deps, req: LaunchRequest, ledger: DetLedger | None) -> dict[str, Any]:
        route = req.route
        assert isinstance(route, DeterminedRoute)
        out: dict[str, Any] = {
            "id": req.id,
            "state": req.state.value,
            "pool": route.resource_pool,
            "master": route.master,
        }
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
            started = ledger.started_by.get(req.id, "started")
            out.update(code="started", reason=f"{started}: {where}")
        elif note is not None:
            out.update(code=note.code, reason=note.reason)
            if note.budget:
                out["budget"] = note.budget
            if req.id in ledger.preempted_by:
                out["preempted_by"] = ledger.preempted_by[req.id]
        else:
            out.update(code="queued", reason="queued; the next scheduling pass decides")
        if task.stopping or _on_up_agents(ledger, task.allocations):
            return out
        _launch_cause(deps, route.master, ledger, out)
        return out

    def view(self, record: PoolRecord, ledger: DetLedger, rows: Held) -> dict[str, Any]:
        return {
            "machines": [
                {
                    "id": a.agent_id,
                    "pool": a.pool,
                    "slots": a.slots,
                    "status": a.status,
                    "provider_id": None if row is None else row.provider_id,
                    "zone": None if row is None else row.zone or None,
                    "market": None if row is None else row.market,
                }
                for a in ledger.agents.values()
                for row in [work.as_machine(rows, a)]
            ],
            "workloads": [
                {
                    "id": tid,
                    "pool": ledger.pool_of(tid),
                    "slots": t.slots,
                    "phase": "stopping"
                    if t.stopping
                    else ("running" if t.allocations else "pending"),
                    "priority": t.priority,
                }
                for tid, t in ledger.tasks.items()
            ],
        }


def _on_up_agents(ledger: DetLedger, allocations: Any) -> bool:
    """Whether the task holds slots and every agent holding them is up."""
    agents = [ledger.agents.get(a.agent_id) for a in allocations]
    return bool(agents) and all(a is not None and a.status == AgentStatus.UP for a in agents)


def _launch_cause(deps: Deps, master: str, ledger: DetLedger, out: dict[str, Any]) -> None:
    """A task that waits for agents: name what keeps its pool's agents from launching (its
    provider's cloud cannot launch here; else the pool's last launch failure)."""
    record = deps.pools.get(master)
    if record is None:
        return
    pool = str(out["pool"])
    try:
        provider = resolved(record).pool(pool).provider
    except KeyError:
        return
    if not provider:
        return  # a static pool: its agents are started by hand
    cloud = str(provider.get("type") or record.cloud)
    blocked = cloud_not_ready(deps, cloud)
    if blocked is not None:
        out.update(
            code="cloud_not_ready",
            reason=f"{out['reason']}; but pool {pool}'s agents cannot launch: {blocked}",
            cloud=cloud,
        )
        return
    blocked = ledger.launch_blocked.get(pool)
    if blocked is not None:
        out["reason"] = f"{out['reason']}; pool {pool}: {blocked}"
        return
    failed = ledger.launch_failures.get(pool)
    if failed is not None:
        out["reason"] = f"{out['reason']}; pool {pool}'s last agent launch failed: {failed}"


def _on_agent(ledger: DetLedger, agent_id: str) -> list[tuple[str, int]]:
    return [
        (tid, a.slots)
        for tid, t in ledger.tasks.items()
        for a in t.allocations
        if a.agent_id == agent_id
    ]


def _sync_task(deps: Deps, master: str, ledger: DetLedger, tid: str, held: Held) -> bool:
    task = ledger.tasks[tid]
    req = deps.store.get_request(tid)
    now = deps.now()
    agents = [ledger.agents.get(a.agent_id) for a in task.allocations]
    on = [m for a in agents if a is not None and (m := work.as_machine(held, a)) is not None]
    if req is None or req.is_terminal:
        for machine in on:
            work.withdraw(deps, machine, _aid(tid, task.started_at, machine.id))
        deps.det_ledgers.update(master, partial(_release, tid=tid, now=now, finished=True))
        work.end_instances(deps, tid, f"its request ended ({req.state.value if req else 'gone'})")
        return True
    if not task.allocations:
        if req.state == RequestState.PROVISIONING:
            _end_stale_records(deps, master, tid)  # its agents' records end with it
            work.send_back(deps, tid, "sent back to the queue")
        return False
    if task.stopping:
        by = ledger.preempted_by.get(tid, "another task")
        return work.stop_preempted(
            deps,
            req,
            by,
            [(m, _aid(tid, task.started_at, m.id)) for m in on],
            lambda: deps.det_ledgers.update(
                master, partial(_release, tid=tid, now=now, finished=False)
            ),
        )
    started, run = task.started_at, _placement(tid, task.started_at)

    def release(finished: bool) -> object:
        return deps.det_ledgers.update(
            master, partial(_release, tid=tid, now=now, finished=finished, started=started)
        )

    if work.release_told(deps, req, run, release):
        return True
    if req.state in (RequestState.PENDING, RequestState.PREEMPTED, RequestState.PROVISIONING):
        _end_stale_records(deps, master, tid)  # an earlier start sent back, unseen till now
    if req.state in (RequestState.PENDING, RequestState.PREEMPTED):
        reason = ledger.started_by.get(tid, "started")
        work.move_for_run(deps, tid, run, RequestState.PROVISIONING, reason)
    spec = typed_task.task_of(req)
    for rank, machine in enumerate(on):
        aid = _aid(tid, task.started_at, machine.id)
        slots = next(a.slots for a in task.allocations if a.agent_id == machine.id)
        envs = {
            "CORRAL_REQUEST_ID": tid,
            "CORRAL_NODE_RANK": str(rank),
            "CORRAL_NUM_NODES": str(len(task.allocations)),
            "CORRAL_SLOTS": str(slots),
            "CORRAL_RESOURCE_POOL": ledger.pool_of(tid),
        }
        if work.ensure_assigned(deps, machine, work.assignment(aid, spec, envs)):
            deps.store.append_event(
                tid, f"{slots} slot(s) on agent {machine.id} ({ledger.pool_of(tid)})", now
            )
        work.record_instance(deps, machine, tid, rank, aid, run)
    if len(on) < len(task.allocations):
        return False
    work.move_for_run(deps, tid, run, RequestState.RUNNING, f"{len(on)} agent(s) run it")
    if not spec.run:
        return False
    results = [work.result(deps, m, _aid(tid, task.started_at, m.id)) for m in on]
    return work.finish_when_ended(deps, tid, run, results, release)


def _release(
    ledger: DetLedger, *, tid: str, now: float, finished: bool, started: float | None = None
) -> bool:
    """Release a task (``started``: only its start at that time, not a later one)."""
    task = ledger.tasks.get(tid)
    if started is not None and task is not None and task.started_at not in (started, None):
        return False
    return release_task(ledger, tid, now, finished=finished)


def _end_stale_records(deps: Deps, master: str, tid: str) -> None:
    def current() -> str | None:
        fresh = deps.det_ledgers.get(master)
        task = fresh.tasks.get(tid) if fresh is not None else None
        if task is None or not task.allocations:
            return None
        return _placement(tid, task.started_at)

    work.end_stale_records(deps, tid, "its start was sent back to the queue", current)


def _placement(tid: str, started_at: float | None) -> str:
    return f"{tid}.{int((started_at or 0) * 1000)}"


def _aid(tid: str, started_at: float | None, agent_id: str) -> str:
    return f"{_placement(tid, started_at)}.{agent_id}"
