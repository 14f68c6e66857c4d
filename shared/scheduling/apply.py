"""A committed plan's effect on a snapshot: the state the committer writes, as a pure function.

The committer checks ``plan.based_on`` against the stored versions (compare-and-set), then
writes what :func:`apply_plan` returns and carries the plan's steps out. When a preempted
workload has stopped, or a workload ends, :func:`release` gives its machines back. Tests use
both to run many passes in a row.

- A placement attaches idle machines or launches new ones; the workload runs from ``now``.
- A preemption makes the victim ``stopping`` (it still holds its machines) and records who
  preempted it; ``release`` then makes it ``pending`` again with its original
  ``submitted_at``, so it keeps its place in the queue.
- A replacement's end state: the better machine attached, the worse one retired (gone).
- A reap removes the machine. The plan's reservations replace the snapshot's.
- Each partition's ``free_since`` is kept while it has free room and reset when it fills.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .model import (
    Machine,
    NodeAssignment,
    PartitionState,
    Plan,
    PoolSnapshot,
    Reservation,
    Workload,
)

NewMachineId = Callable[[NodeAssignment, str], str]  # (node, workload id) -> a fresh id


def apply_plan(
    snapshot: PoolSnapshot, plan: Plan, now: float, new_machine_id: NewMachineId
) -> PoolSnapshot:
    """The snapshot after the plan is committed at ``now`` (versions bumped by one)."""
    machines = {m.machine_id: m for m in snapshot.machines}
    workloads = {w.workload_id: w for w in snapshot.workloads}
    for placement in plan.placements:
        wid = placement.workload_id
        for node in placement.nodes:
            _attach(machines, node, wid, new_machine_id)
        workloads[wid] = workloads[wid].model_copy(update={"phase": "running", "started_at": now})
    for preemption in plan.preemptions:
        victim = workloads[preemption.workload_id]
        workloads[victim.workload_id] = victim.model_copy(
            update={"phase": "stopping", "preempted_by": preemption.preempted_by}
        )
    for step in plan.replacements:
        _attach(machines, step.bring_up, step.workload_id, new_machine_id)
        machines.pop(step.retire_machine_id, None)
        workload = workloads[step.workload_id]
        workloads[step.workload_id] = workload.model_copy(update={"last_replaced_at": now})
    for reap in plan.reaps:
        machines.pop(reap.machine_id, None)
    return _rebuild(snapshot, machines.values(), workloads.values(), plan.reservations, now)


def release(
    snapshot: PoolSnapshot, workload_id: str, now: float, *, finished: bool = False
) -> PoolSnapshot:
    """A workload gives its machines back at ``now`` (they turn idle). A stopping (preempted)
    workload becomes pending again; a ``finished`` one leaves the snapshot."""
    machines = {
        m.machine_id: (
            m.model_copy(update={"workload_id": None, "idle_since": now})
            if m.workload_id == workload_id
            else m
        )
        for m in snapshot.machines
    }
    workloads = {w.workload_id: w for w in snapshot.workloads}
    if finished:
        workloads.pop(workload_id, None)
    elif workload_id in workloads:
        workloads[workload_id] = workloads[workload_id].model_copy(
            update={"phase": "pending", "started_at": None}
        )
    return _rebuild(snapshot, machines.values(), workloads.values(), snapshot.reservations, now)


def _attach(
    machines: dict[str, Machine], node: NodeAssignment, wid: str, new_machine_id: NewMachineId
) -> None:
    if node.machine_id is not None:
        machines[node.machine_id] = machines[node.machine_id].model_copy(
            update={"workload_id": wid, "idle_since": None}
        )
        return
    machine_id = new_machine_id(node, wid)
    machines[machine_id] = Machine(
        machine_id=machine_id,
        machine_type=node.machine_type,
        partition=node.partition,
        workload_id=wid,
    )


def _rebuild(
    snapshot: PoolSnapshot,
    machines: Iterable[Machine],
    workloads: Iterable[Workload],
    reservations: Iterable[Reservation],
    now: float,
) -> PoolSnapshot:
    machine_list = tuple(machines)
    held: dict[tuple[str, str], int] = {}
    for m in machine_list:
        if m.workload_id is not None:
            key = (m.machine_type, m.partition)
            held[key] = held.get(key, 0) + 1
    reserved: dict[tuple[str, str], int] = {}
    for r in reservations:
        reserved[(r.machine_type, r.partition)] = reserved.get((r.machine_type, r.partition), 0)
        reserved[(r.machine_type, r.partition)] += r.count

    def partition(machine_type: str, p: PartitionState) -> PartitionState:
        key = (machine_type, p.name)
        has_room = p.size - held.get(key, 0) - reserved.get(key, 0) > 0
        since = (p.free_since if p.free_since is not None else now) if has_room else None
        return p.model_copy(update={"free_since": since})

    types = tuple(
        t.model_copy(
            update={"partitions": tuple(partition(t.machine_type, p) for p in t.partitions)}
        )
        for t in snapshot.machine_types
    )
    return snapshot.model_copy(
        update={
            "versions": {k: v + 1 for k, v in snapshot.versions.items()},
            "machine_types": types,
            "machines": machine_list,
            "workloads": tuple(workloads),
            "reservations": tuple(reservations),
        }
    )
