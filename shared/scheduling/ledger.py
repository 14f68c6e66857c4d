"""A machine pool's run-time state, one versioned document, and the pure steps that change it.

The store keeps one :class:`PoolLedger` per registered pool and writes it with a
compare-and-set on ``version``. A scheduling pass reads the ledger, turns it into a
:class:`~.model.PoolSnapshot` (:func:`snapshot_of`), computes a plan, and commits it with
:func:`commit`; a writer that lost the race reads again and recomputes, so no partition is
ever over its size. The other steps record what the machines did (:func:`machine_up`,
:func:`machine_failed`, :func:`machine_gone`) and what the workloads did (:func:`release`).

Machines are warm: a machine is launched for a placement and then serves one workload after
another until it is reaped or retired. While a machine is on its way out (``reaping``, or
``retiring`` after a replacement brought up its successor) it still counts against its
partition, so the real machines of a partition never exceed its size either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import ClassVar

from pydantic import BaseModel, Field

from ..budgets import BudgetSpend
from ..lifecycle import MachineStatus
from . import trusted
from .fallback import FallbackPolicy, Setback, after_failure, note
from .model import (
    Machine,
    MachineTypeState,
    NodeAssignment,
    Pending,
    Plan,
    PoolSnapshot,
    Reservation,
    Workload,
)
from .notes import file_answers
from .pooled import PooledMachine

_PENDING_ID = attrgetter("workload_id")  # whose answer a Pending is

_NO_CHANGE: dict[str, object] = {}  # a copy of a machine as it is (``trusted.updated``)

REAPING_OWNER = "~reaping"  # what a reaped machine is "held by" until it is gone

NewMachineId = Callable[[NodeAssignment, str, int], str]  # (node, workload id, index) -> id


class PoolMachine(PooledMachine):
    """One machine of the pool, as the control plane knows it."""

    KIND: ClassVar[str] = "machine"

    machine_id: str
    machine_type: str
    partition: str
    status: MachineStatus = MachineStatus.LAUNCHING
    workload_id: str | None = None  # the workload it serves; None: idle
    replaces: str | None = None  # a replacement's new machine: the one it retires once up
    head: bool = False  # a workload's head node: launched outside the pool, never counted

    @property
    def key(self) -> str:
        return self.machine_id

    def pool_type(self) -> str | None:
        return self.machine_type


class PoolLedger(BaseModel):
    """Everything Corral knows about one pool at run time."""

    pool: str
    version: int = 0
    machines: dict[str, PoolMachine] = Field(default_factory=dict)
    workloads: dict[str, Workload] = Field(default_factory=dict)
    reservations: list[Reservation] = Field(default_factory=list)
    free_since: dict[str, float] = Field(default_factory=dict)  # "type/partition" -> since
    notes: dict[str, Pending] = Field(default_factory=dict)  # why each waiting workload waits
    placed_by: dict[str, str] = Field(default_factory=dict)  # workload -> the placement's reason
    budget_spend: dict[str, BudgetSpend] = Field(default_factory=dict)  # budget name -> spend
    setbacks: dict[str, Setback] = Field(default_factory=dict)  # workload -> its failed launches

    def machines_of(self, workload_id: str) -> list[PoolMachine]:
        """The machines serving a workload, in node order (best group first, then id); not
        the ones reaped with it (they still name it until they are gone)."""
        workload = self.workloads.get(workload_id)
        order = {t: i for i, t in enumerate(workload.group_order)} if workload else {}
        mine = [
            m
            for m in self.machines.values()
            if m.workload_id == workload_id and not m.head and m.status != "reaping"
        ]
        return sorted(mine, key=lambda m: (order.get(m.machine_type, 99), m.machine_id))

    def machines_by_workload(self) -> dict[str, list[PoolMachine]]:
        """``machines_of`` every workload serving on a machine, in one walk over the machines
        (a sync that looks at every running workload would walk them once per workload)."""
        mine: dict[str, list[PoolMachine]] = {}
        for m in self.machines.values():
            if m.workload_id is not None and not m.head and m.status != "reaping":
                mine.setdefault(m.workload_id, []).append(m)
        out = {}
        for wid, machines in mine.items():
            workload = self.workloads.get(wid)
            order = {t: i for i, t in enumerate(workload.group_order)} if workload else {}
            out[wid] = sorted(machines, key=lambda m: (order.get(m.machine_type, 99), m.machine_id))
        return out


def _key(machine_type: str, partition: str) -> str:
    return f"{machine_type}/{partition}"


def snapshot_of(ledger: PoolLedger, machine_types: Iterable[MachineTypeState]) -> PoolSnapshot:
    """The scheduler's view of the ledger under the pool file's machine types."""
    types = tuple(
        t.model_copy(
            update={
                "partitions": tuple(
                    p.model_copy(
                        update={"free_since": ledger.free_since.get(_key(t.machine_type, p.name))}
                    )
                    for p in t.partitions
                )
            }
        )
        for t in machine_types
    )
    machines = tuple(
        Machine(
            machine_id=m.machine_id,
            machine_type=m.machine_type,
            partition=m.partition,
            workload_id=REAPING_OWNER if m.status == "reaping" else m.workload_id,
            idle_since=m.idle_since,
        )
        # A machine still coming up for a replacement is already booked for its workload.
        for m in ledger.machines.values()
        if not m.head
    )
    in_flight = {m.workload_id for m in ledger.machines.values() if m.replaces}
    return PoolSnapshot(
        pool=ledger.pool,
        versions={ledger.pool: ledger.version},
        machine_types=types,
        machines=machines,
        workloads=tuple(ledger.workloads.values()),
        reservations=tuple(ledger.reservations),
        replacements_in_flight=len(in_flight),
    )


def copy_ledger(ledger: PoolLedger) -> PoolLedger:
    """An independent copy, as a deep copy but at a fraction of its cost: the containers and
    the (mutable) machines are copied; workloads, notes and reservations are frozen models and
    are shared."""
    return ledger.model_copy(
        update={
            "machines": {k: trusted.updated(m, _NO_CHANGE) for k, m in ledger.machines.items()},
            "workloads": dict(ledger.workloads),
            "reservations": list(ledger.reservations),
            "free_since": dict(ledger.free_since),
            "notes": dict(ledger.notes),
            "placed_by": dict(ledger.placed_by),
            "budget_spend": {k: s.model_copy() for k, s in ledger.budget_spend.items()},
            "setbacks": dict(ledger.setbacks),
        }
    )


def commit(
    ledger: PoolLedger,
    plan: Plan,
    machine_types: Iterable[MachineTypeState],
    now: float,
    new_machine_id: NewMachineId,
) -> PoolLedger:
    """The ledger once ``plan`` is committed at ``now`` (the store bumps the version).

    Placements take idle machines or add machines to launch; preemptions make their victims
    ``stopping``; a replacement adds the better machine (``replaces`` the worse one, which
    is retired only once the better one is up); a reap marks the machine ``reaping``."""
    out = copy_ledger(ledger)
    for placement in plan.placements:
        wid = placement.workload_id
        for index, node in enumerate(placement.nodes):
            _attach(out, node, wid, now, new_machine_id(node, wid, index))
        out.workloads[wid] = out.workloads[wid].model_copy(
            update={"phase": "running", "started_at": now}
        )
        out.notes.pop(wid, None)
        out.placed_by[wid] = placement.reason
    for preemption in plan.preemptions:
        victim = out.workloads[preemption.workload_id]
        out.workloads[victim.workload_id] = victim.model_copy(
            update={"phase": "stopping", "preempted_by": preemption.preempted_by}
        )
    for step in plan.replacements:
        reuse = step.bring_up.machine_id
        new_id = (
            reuse if reuse in out.machines else new_machine_id(step.bring_up, step.workload_id, -1)
        )
        _attach(out, step.bring_up, step.workload_id, now, new_id)
        successor = out.machines[new_id]
        successor.replaces = step.retire_machine_id
        old = out.machines.get(step.retire_machine_id)
        if successor.status == "up" and old is not None:
            old.move(MachineStatus.RETIRING)  # a warm machine took over: retire once it runs it
        workload = out.workloads[step.workload_id]
        out.workloads[step.workload_id] = workload.model_copy(update={"last_replaced_at": now})
    for reap in plan.reaps:
        machine = out.machines.get(reap.machine_id)
        if machine is not None and machine.workload_id is None:
            machine.move(MachineStatus.REAPING)
    out.reservations = list(plan.reservations)
    file_answers(out.notes, plan.pending, _PENDING_ID)
    refresh_free_since(out, machine_types, now)
    return out


def _attach(ledger: PoolLedger, node: NodeAssignment, wid: str, now: float, new_id: str) -> None:
    if node.machine_id is not None and node.machine_id in ledger.machines:
        machine = ledger.machines[node.machine_id]
        machine.workload_id, machine.idle_since = wid, None
        return
    ledger.machines[new_id] = PoolMachine(
        machine_id=new_id,
        machine_type=node.machine_type,
        partition=node.partition,
        workload_id=wid,
        created_at=now,
    )


def refresh_free_since(
    ledger: PoolLedger, machine_types: Iterable[MachineTypeState], now: float
) -> None:
    """Keep each partition's ``free_since`` while it has room, set it when room appears,
    clear it when the partition fills (machines and held room both count)."""
    held: dict[str, int] = {}
    for m in ledger.machines.values():
        if m.head:
            continue
        if m.workload_id is not None or m.status == "reaping":
            held[_key(m.machine_type, m.partition)] = held.get(_key(m.machine_type, m.partition), 0)
            held[_key(m.machine_type, m.partition)] += 1
    for r in ledger.reservations:
        key = _key(r.machine_type, r.partition)
        held[key] = held.get(key, 0) + r.count
    for t in machine_types:
        for p in t.partitions:
            key = _key(t.machine_type, p.name)
            if p.size - held.get(key, 0) > 0:
                ledger.free_since.setdefault(key, now)
            else:
                ledger.free_since.pop(key, None)


def head_of(ledger: PoolLedger, workload_id: str) -> PoolMachine | None:
    """The head node launched for a workload's placement, if any."""
    return next(
        (
            m
            for m in ledger.machines.values()
            if m.head and m.workload_id == workload_id and m.status != "reaping"
        ),
        None,
    )


def add_head(ledger: PoolLedger, workload_id: str, machine_id: str, now: float) -> bool:
    """Ask for a head node for a placed workload (once)."""
    if head_of(ledger, workload_id) is not None or machine_id in ledger.machines:
        return False
    workload = ledger.workloads.get(workload_id)
    if workload is None or workload.phase != "running":
        return False
    ledger.machines[machine_id] = PoolMachine(
        machine_id=machine_id,
        machine_type="head_node",  # as its workload's compute config calls it
        partition="",
        workload_id=workload_id,
        created_at=now,
        head=True,
    )
    return True


def add_workload(ledger: PoolLedger, workload: Workload) -> bool:
    """Queue a workload; False if it is already known (a redelivered submit)."""
    if workload.workload_id in ledger.workloads:
        return False
    ledger.workloads[workload.workload_id] = workload
    return True


def machine_up(ledger: PoolLedger, machine_id: str) -> PoolMachine | None:
    """A launching machine came up (where, and as which of the cloud's machines, is its row of
    the machine table). The machine a replacement retires starts retiring now. None if the
    machine is unknown."""
    machine = ledger.machines.get(machine_id)
    if machine is None:
        return None
    if machine.status == MachineStatus.LAUNCHING:
        machine.move(MachineStatus.UP)
        old = ledger.machines.get(machine.replaces or "")
        if old is not None and old.workload_id == machine.workload_id:
            old.move(MachineStatus.RETIRING)
    return machine


def machine_failed(
    ledger: PoolLedger,
    machine_id: str,
    now: float,
    *,
    policy: FallbackPolicy | None = None,
    why: str = "",
) -> str | None:
    """A machine could not be launched. A replacement's is simply dropped; a placement's
    workload goes back to the queue (its other machines turn idle). Returns the workload id
    sent back, if any. With ``policy``, the failure is remembered on the workload
    (:func:`.fallback.after_failure`): it backs off, and its group is passed over for a while
    (a replacement's too: the workload stays where it runs)."""
    machine = ledger.machines.pop(machine_id, None)
    if machine is None or machine.workload_id is None:
        return None
    wid = machine.workload_id
    workload = ledger.workloads.get(wid)
    if policy is not None and workload is not None:
        ledger.setbacks[wid] = after_failure(
            ledger.setbacks.get(wid),
            workload_id=wid,
            machine_type=machine.machine_type,
            group_order=workload.group_order,
            why=why,
            now=now,
            policy=policy,
        )
    if machine.replaces is not None:
        return None
    release(ledger, wid, now)
    if policy is not None and wid in ledger.workloads:
        ledger.notes[wid] = note(ledger.workloads[wid], ledger.setbacks[wid], now)  # `why`
    return wid


def machine_gone(ledger: PoolLedger, machine_id: str) -> PoolMachine | None:
    """A retired or reaped machine was terminated: it leaves the pool."""
    return ledger.machines.pop(machine_id, None)


def machine_lost(ledger: PoolLedger, machine_id: str, now: float) -> list[str]:
    """A machine the cloud no longer runs (or is about to reclaim) leaves the pool; the
    workload on it, unless it was only that workload's replacement, is queued again at its
    original place. Returns the workloads queued again."""
    found = ledger.machines.pop(machine_id, None)
    if found is None or not found.workload_id or found.workload_id not in ledger.workloads:
        return []
    if found.replaces:
        return []
    release(ledger, found.workload_id, now)
    return [found.workload_id]


def release(
    ledger: PoolLedger, workload_id: str, now: float, *, finished: bool = False, reap: bool = False
) -> None:
    """A workload gives its machines back at ``now`` (they turn idle; retiring ones keep
    going). A stopping or sent-back workload is queued again at its original place; a
    ``finished`` one leaves the ledger. ``reap``: its machines were launched with the
    workload's own ``advanced_instance_config`` (a pod's spec cannot change), so they serve
    no other workload and go instead of turning idle."""
    for machine in ledger.machines.values():
        if machine.workload_id != workload_id:
            continue
        if machine.head:
            machine.move(MachineStatus.REAPING)  # the head goes with its placement
            continue
        if machine.status in ("retiring", "reaping"):
            continue
        if reap:
            machine.move(MachineStatus.REAPING)
            machine.idle_since = now  # when its work ended (its last output is on its way)
            continue
        if machine.status == "launching" and machine.replaces:
            machine.replaces = None  # a replacement's machine, no longer needed by anyone
        machine.workload_id, machine.idle_since = None, now
    ledger.reservations = [r for r in ledger.reservations if r.workload_id != workload_id]
    if finished:
        ledger.workloads.pop(workload_id, None)
        ledger.notes.pop(workload_id, None)
        ledger.placed_by.pop(workload_id, None)
        ledger.setbacks.pop(workload_id, None)
    elif workload_id in ledger.workloads:
        ledger.workloads[workload_id] = ledger.workloads[workload_id].model_copy(
            update={"phase": "pending", "started_at": None}
        )
