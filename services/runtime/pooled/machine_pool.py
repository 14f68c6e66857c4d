"""Machine pools (:class:`MachinePools`): the pool-kind implementation for a machine pool file.

A workload (a task whose compute config names the pool) is placed by the machine-pool
scheduler (:func:`corral.shared.scheduling.schedule`) on warm machines of the pool's
partitions; a machine outlives its work until idle reaping or a replacement retires it. A
workload's compute config ``head_node`` is launched outside the pool for as long as it is
placed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import budgets_of, catalog_for
from corral.services.runtime.pooled import work
from corral.services.runtime.pooled.pool_kind import Held, LaunchOrder, PassResult
from corral.services.runtime.typed_task import task_of
from corral.services.state.blocks import RememberedBlock
from corral.services.state.docstore import DocStore
from corral.services.state.pool_store import PoolKind as KindName
from corral.services.state.pool_store import PoolRecord
from corral.shared.config.compute_config import ComputeConfig
from corral.shared.config.machine_pool import LaunchTemplate, MachinePool
from corral.shared.config.task import Task
from corral.shared.lifecycle import RequestState
from corral.shared.records import Instance, LaunchRequest, OwnerKind
from corral.shared.routing import pool_of
from corral.shared.scheduling import MachineTypeState
from corral.shared.scheduling.build import machine_types_of, with_launch_blocks, workload_of
from corral.shared.scheduling.fallback import FallbackPolicy, Setback
from corral.shared.scheduling.ledger import (
    PoolLedger,
    PoolMachine,
    add_head,
    add_workload,
    head_of,
    machine_failed,
    machine_gone,
    machine_lost,
    machine_up,
    release,
)
from corral.shared.scheduling.pool_passes import (
    Costing,
    PassKnobs,
    machine_pool_pass,
    machine_type_prices,
)

log = logging.getLogger("corral.pools")

HEAD_NODE = "head_node"  # what a workload's head node shows as its machine_type


def _types_now(
    deps: Deps, record: PoolRecord, remembered: Sequence[RememberedBlock]
) -> tuple[MachineTypeState, ...]:
    """The pool's machine types as a pass sees them: one whose every place ``remembered``
    (the blocks every launch shares, in force now) covers books no new machine (a workload
    placed there would only fail its launch and back off; its idle machines still serve)."""
    pool, cloud = MachinePool.model_validate(record.spec), record.cloud
    blocks = [(b.block, b.until) for b in remembered]
    return with_launch_blocks(
        machine_types_of(pool),
        pool,
        lambda templates: work.blocked_launch(deps, record.name, cloud, templates, blocks),
    )


def _costing(deps: Deps, record: PoolRecord) -> Costing | None:
    """The dollar budgets over this pool, with its machine types' prices (None: no budgets)."""
    budgets = budgets_of(deps)
    if not budgets:
        return None
    pool = MachinePool.model_validate(record.spec)
    return Costing(budgets, machine_type_prices(pool, record.cloud, catalog_for(deps)))


class MachinePools:
    """The machine-pool kind (see :class:`corral.services.runtime.pooled.pool_kind.PoolKind`)."""

    name: KindName = "machine_pool"
    owner_kind: OwnerKind = "pool"
    label: str = "machine pool"

    def ledgers(self, deps: Deps) -> DocStore[PoolLedger]:
        return deps.ledgers

    def new_ledger(self, name: str) -> PoolLedger:
        return PoolLedger(pool=name)

    # ------------------------------------------------------------------------------------------
    # The queue and passes

    def add_work(self, record: PoolRecord, req: LaunchRequest) -> Callable[[PoolLedger], bool]:
        task = task_of(req)
        compute = task.compute_config
        assert isinstance(compute, ComputeConfig)
        workload = workload_of(
            task, compute, workload_id=req.id, pool_name=record.name, submitted_at=req.created_at
        )
        return lambda ledger: add_workload(ledger, workload)

    def work_ids(self, ledger: PoolLedger) -> list[str]:
        return list(ledger.workloads)

    def pass_over(
        self,
        deps: Deps,
        record: PoolRecord,
        ledger: PoolLedger,
        now: float,
        *,
        rebalance: bool,
        held: Held,
        blocks: Sequence[RememberedBlock] = (),
    ) -> PassResult:
        types = _types_now(deps, record, blocks)
        name, version = record.name, ledger.version

        def new_id(node: Any, wid: str, index: int) -> str:
            raw = f"{name}/{wid}/{version}/{index}/{node.machine_type}/{node.partition}"
            return "m-" + hashlib.sha1(raw.encode()).hexdigest()[:10]

        after, plan = machine_pool_pass(
            ledger,
            types,
            now,
            PassKnobs.of(deps.settings.timers),
            rebalance=rebalance,
            new_id=new_id,
            costing=_costing(deps, record),
        )
        return PassResult(after, lambda: _log_plan(deps, plan, now))

    def lose_machine(self, ledger: PoolLedger, machine_id: str, now: float) -> list[str]:
        return machine_lost(ledger, machine_id, now)

    # ------------------------------------------------------------------------------------------
    # Carrying the ledger out

    def sync_work(
        self, deps: Deps, record: PoolRecord, ledger: PoolLedger, work_id: str, held: Held
    ) -> bool:
        return _sync_workload(deps, record.name, ledger, work_id, held)

    def machines(self, ledger: PoolLedger) -> dict[str, PoolMachine]:
        return dict(ledger.machines)

    def sync_machine(
        self,
        deps: Deps,
        record: PoolRecord,
        ledger: PoolLedger,
        machine_id: str,
        machine: PoolMachine,
        held: Held,
    ) -> bool:
        if machine.status == "retiring":
            return _retire(deps, record.name, ledger, machine, held)
        cloud_machine = work.as_machine(held, machine)
        if machine.workload_id is None and cloud_machine is not None:
            work.withdraw(deps, cloud_machine)
        return False

    def drop_machine(self, ledger: PoolLedger, machine_id: str) -> bool:
        return machine_gone(ledger, machine_id) is not None

    # ------------------------------------------------------------------------------------------
    # Launching one machine

    def cloud_of(self, record: PoolRecord, machine: PoolMachine) -> str:
        return record.cloud

    def launch_order(
        self, deps: Deps, record: PoolRecord, machine: PoolMachine
    ) -> LaunchOrder | str:
        templates = _templates(deps, record, machine)
        if not templates:
            return "its machine type left the pool file"
        return LaunchOrder(record.cloud, templates, _workload_config(deps, machine))

    def machine_up(self, ledger: PoolLedger, machine_id: str, now: float) -> bool:
        machine = ledger.machines.get(machine_id)
        if machine is None or machine.status != "launching":
            return False
        machine_up(ledger, machine_id)
        return True

    def machine_failed(
        self, ledger: PoolLedger, machine_id: str, now: float, *, why: str, policy: FallbackPolicy
    ) -> bool:
        if machine_id not in ledger.machines:
            return False
        machine_failed(ledger, machine_id, now, policy=policy, why=why)
        return True

    def setback_of(self, ledger: PoolLedger, work_id: str) -> Setback | None:
        return ledger.setbacks.get(work_id)

    def workload_of(self, machine: PoolMachine) -> str | None:
        return machine.workload_id

    # ------------------------------------------------------------------------------------------
    # Views

    def why(self, deps: Deps, req: LaunchRequest, ledger: PoolLedger | None) -> dict[str, Any]:
        name = pool_of(req.route)
        out: dict[str, Any] = {"id": req.id, "state": req.state.value, "pool": name}
        workload = ledger.workloads.get(req.id) if ledger else None
        if ledger is None or workload is None:
            out.update(code="not_queued", reason=f"it is not on {name}'s queue ({req.state.value})")
            return out
        out["phase"] = workload.phase
        out["preempted_by"] = workload.preempted_by
        note = ledger.notes.get(req.id)
        if workload.phase == "pending" and note is not None:
            out.update(code=note.code, reason=note.reason)
            if note.budget:
                out["budget"] = note.budget
        elif workload.phase == "pending":
            out.update(code="queued", reason="queued; the next scheduling pass decides")
        elif workload.phase == "stopping":
            out.update(
                code="stopping",
                reason=f"preempted by {workload.preempted_by}; giving its machines back",
            )
        else:
            mine = ledger.machines_of(req.id)
            rows = work.held_rows(deps, mine)
            machines = [machine_view(m, work.as_machine(rows, m)) for m in mine]
            out.update(
                code="placed", reason=ledger.placed_by.get(req.id, "placed"), machines=machines
            )
        return out

    def view(self, record: PoolRecord, ledger: PoolLedger, rows: Held) -> dict[str, Any]:
        pool = MachinePool.model_validate(record.spec)
        held = _held(ledger)
        return {
            "machines": [
                machine_view(m, work.as_machine(rows, m)) for m in ledger.machines.values()
            ],
            "workloads": [
                {"id": w.workload_id, "phase": w.phase, "priority": w.priority}
                for w in ledger.workloads.values()
            ],
            "machine_types": [
                {
                    "machine_type": t.machine_type,
                    "market": t.market,
                    "partitions": [
                        {
                            "name": p.name,
                            "size": p.size,
                            "held": held.get((t.machine_type, p.name), 0),
                        }
                        for p in t.partitions
                    ],
                }
                for t in machine_types_of(pool)
            ],
        }


def machine_view(m: PoolMachine, row: Instance | None) -> dict[str, Any]:
    """A machine as `pools list` shows it: its assignment, and where its row of the machine
    table says the cloud holds it (None until it is up)."""
    return {
        "id": m.machine_id,
        "machine_type": m.machine_type,
        "partition": m.partition,
        "status": m.status,
        "workload": m.workload_id,
        "provider_id": None if row is None else row.provider_id,
        "zone": None if row is None else row.zone or None,
        "market": None if row is None else row.market,
    }


def _held(ledger: PoolLedger) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for m in ledger.machines.values():
        if not m.head:
            key = (m.machine_type, m.partition)
            out[key] = out.get(key, 0) + 1
    return out


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


# ----------------------------------------------------------------------------------------------
# Carrying a workload out


def _sync_workload(deps: Deps, name: str, ledger: PoolLedger, wid: str, held: Held) -> bool:
    workload = ledger.workloads[wid]
    req = deps.store.get_request(wid)
    now = deps.now()
    on = [cm for m in ledger.machines_of(wid) if (cm := work.as_machine(held, m)) is not None]
    if req is None or req.is_terminal:
        for machine in on:
            work.withdraw(deps, machine)
        reason = f"its request ended ({req.state.value})" if req else "its request is gone"
        own = _own_config(req)
        deps.ledgers.update(name, lambda led: _release(led, wid, now, finished=True, reap=own))
        work.end_instances(deps, wid, reason)
        return True
    if workload.phase == "pending":
        if req.state == RequestState.PROVISIONING:
            # Placed, then sent back (a machine of the placement failed to launch): the
            # records of the nodes already running end with their placement, then it waits.
            _end_stale_records(deps, name, wid)
            work.send_back(deps, wid, "sent back to the queue: a machine failed")
        return False
    if workload.phase == "stopping":
        by = workload.preempted_by or "another workload"
        return work.stop_preempted(
            deps,
            req,
            by,
            [(m, None) for m in on],
            lambda: deps.ledgers.update(
                name, lambda led: _release(led, wid, now, reap=_own_config(req))
            ),
        )
    return _sync_running(deps, name, ledger, wid, req, held)


def _end_stale_records(deps: Deps, name: str, wid: str) -> None:
    def current() -> str | None:
        fresh = deps.ledgers.get(name)
        workload = fresh.workloads.get(wid) if fresh is not None else None
        if workload is None or workload.phase == "pending" or not workload.started_at:
            return None
        return placement_id(wid, workload.started_at)

    work.end_stale_records(deps, wid, "its placement was sent back to the queue", current)


def _sync_running(
    deps: Deps, name: str, ledger: PoolLedger, wid: str, req: LaunchRequest, held: Held
) -> bool:
    workload = ledger.workloads[wid]
    now = deps.now()
    task = task_of(req)
    started = workload.started_at or now
    run = placement_id(wid, started)
    own = _own_config(req)

    def release(finished: bool) -> object:
        return deps.ledgers.update(
            name,
            lambda led: _release(led, wid, now, finished=finished, reap=own, started=started),
        )

    if work.release_told(deps, req, run, release):
        return True
    if req.state in (RequestState.PENDING, RequestState.PREEMPTED, RequestState.PROVISIONING):
        # Not yet running here: an earlier placement may have been sent back and replaced
        # before any sync saw it waiting; its nodes' records end before this one's start.
        _end_stale_records(deps, name, wid)
    if req.state in (RequestState.PENDING, RequestState.PREEMPTED):
        placed = ledger.placed_by.get(wid, "placed")
        work.move_for_run(deps, wid, run, RequestState.PROVISIONING, placed)
    nodes = [m for m in ledger.machines_of(wid) if m.status != "retiring"]
    up = [
        (m, cm) for m in nodes if m.status == "up" and (cm := work.as_machine(held, m)) is not None
    ]
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
        work.record_instance(deps, cloud_machine, wid, rank, aid, run)
    if not _head_ready(deps, name, ledger, wid, task, started, held):
        return False
    if not nodes or len(up) < len(nodes):
        return False
    work.move_for_run(deps, wid, run, RequestState.RUNNING, f"{len(nodes)} pool machine(s) run it")
    if not task.run:
        return False
    results = [work.result(deps, cm, assignment_id(wid, started, m)) for m, cm in up]
    return work.finish_when_ended(deps, wid, run, results, release)


def _head_ready(
    deps: Deps, name: str, ledger: PoolLedger, wid: str, task: Task, started: float, held: Held
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
    cloud_machine = work.as_machine(held, head)
    if head.status != "up" or cloud_machine is None:
        return False
    placement = placement_id(wid, started)
    aid = f"{placement}.head"
    work.record_instance(
        deps,
        cloud_machine,
        wid,
        len(ledger.machines_of(wid)),
        aid,
        placement,
        as_type=HEAD_NODE,
    )
    return True


def _release(
    ledger: PoolLedger,
    wid: str,
    now: float,
    *,
    finished: bool = False,
    reap: bool = False,
    started: float | None = None,
) -> bool:
    """Release a workload (``started``: only its placement started then, not a later one)."""
    if wid not in ledger.workloads:
        return False
    if started is not None and ledger.workloads[wid].started_at not in (started, None):
        return False
    release(ledger, wid, now, finished=finished, reap=reap)
    return True


def _own_config(req: LaunchRequest | None) -> bool:
    """Whether a workload sets its own advanced_instance_config (its task's, its compute
    config's or a worker group's): machines launched for it carry it, so they go with it."""
    if req is None:
        return False
    task = task_of(req)
    compute = task.compute_config
    groups = compute.worker_nodes if isinstance(compute, ComputeConfig) else []
    return bool(
        task.advanced_instance_config
        or (isinstance(compute, ComputeConfig) and compute.advanced_instance_config)
        or any(g.advanced_instance_config for g in groups)
    )


def placement_id(wid: str, started_at: float) -> str:
    """One placement of a workload (new every time it is placed)."""
    return f"{wid}.{int(started_at * 1000)}"


def assignment_id(wid: str, started_at: float, machine: PoolMachine) -> str:
    """The id of a workload's work on one machine, new for every placement."""
    return f"{placement_id(wid, started_at)}.{machine.machine_id}"


# ----------------------------------------------------------------------------------------------
# Replacement: a retiring machine goes once its successor serves the work


def _retire(deps: Deps, name: str, ledger: PoolLedger, machine: PoolMachine, held: Held) -> bool:
    successor = next(
        (m for m in ledger.machines.values() if m.replaces == machine.machine_id), None
    )
    if successor is not None and not _serving(deps, successor, ledger, held):
        return False  # the better machine is not running the work yet: keep this one
    row = work.as_machine(held, machine)
    if work.terminate(deps, row, "retired: its replacement serves its work"):
        log.info("terminated pool machine %s (retired)", machine.machine_id)
    deps.ledgers.update(name, lambda led: machine_gone(led, machine.machine_id) is not None)
    if successor is not None:
        deps.ledgers.update(name, lambda led: _clear_replaces(led, successor.machine_id))
    if machine.workload_id:
        work.end_instances(
            deps,
            machine.workload_id,
            "replaced by a better machine",
            provider_id=None if row is None else row.provider_id,
        )
    return True


def _clear_replaces(ledger: PoolLedger, machine_id: str) -> bool:
    machine = ledger.machines.get(machine_id)
    if machine is None or machine.replaces is None:
        return False
    machine.replaces = None
    return True


def _serving(deps: Deps, machine: PoolMachine, ledger: PoolLedger, held: Held) -> bool:
    """Whether a replacement's machine is up and has taken its workload's work."""
    cloud_machine = work.as_machine(held, machine)
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
# What a machine is launched from


def _templates(deps: Deps, record: PoolRecord, machine: PoolMachine) -> list[LaunchTemplate]:
    """How a machine may be launched: its machine type's launch templates, or for a head
    node its workload's ``head_node`` (on demand, outside the pool)."""
    if not machine.head:
        found = MachinePool.model_validate(record.spec).machine(machine.machine_type)
        return list(found.launch_templates) if found else []
    req = deps.store.get_request(machine.workload_id or "")
    compute = task_of(req).compute_config if req else None
    if not isinstance(compute, ComputeConfig) or compute.head_node is None:
        return []
    head = compute.head_node
    return [
        LaunchTemplate(
            instance_type=head.instance_type,
            advanced_instance_config=head.advanced_instance_config or {},
        )
    ]


def _workload_config(deps: Deps, machine: PoolMachine) -> dict[str, Any]:
    """The workload's own advanced_instance_config for this machine type, if any: its task's,
    or its compute config's worker group's (merged over the launch template's)."""
    if machine.workload_id is None or machine.head:
        return {}  # a head node's own config is its template's
    req = deps.store.get_request(machine.workload_id)
    if req is None:
        return {}
    task = task_of(req)
    out: dict[str, Any] = {}
    compute = task.compute_config
    if isinstance(compute, ComputeConfig):
        out.update(compute.advanced_instance_config or {})
        for group in compute.worker_nodes:
            if group.instance_type == machine.machine_type and group.advanced_instance_config:
                out.update(group.advanced_instance_config)
    out.update(task.advanced_instance_config or {})
    return out
