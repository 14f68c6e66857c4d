"""Snapshots from the users' files: a machine pool file's types and partitions, a task's
workload, a Determined pool's scheduler and limits.

The store adds what only it knows (machines, agents, since when a partition has had room,
versions); these functions read what the files say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..catalog.catalog import Catalog
from ..config.compute_config import ComputeConfig
from ..config.machine_pool import LaunchTemplate, MachinePool, MachineType
from ..config.task import Task
from ..machine_walk import LaunchBlocked
from ..placement import Market
from ..reservations import targets_reservation
from ..resource_pools import ResolvedPool, SchedulerSettings
from .model import (
    DEFAULT_REPLACEMENT_THRESHOLD_S,
    DETERMINED_DEFAULT_PRIORITY,
    DetScheduler,
    MachineTypeState,
    PartitionState,
    RuleSpec,
    Workload,
)


def with_launch_blocks(
    types: Sequence[MachineTypeState],
    pool: MachinePool,
    blocked: Callable[[Sequence[LaunchTemplate]], LaunchBlocked | None],
) -> tuple[MachineTypeState, ...]:
    """The pool's machine types as a pass should see them now: each whose launch templates
    ``blocked`` finds all blocked (:func:`corral.shared.machine_walk.launch_blocked` over the
    blocks in force) marked so, its partitions lending only their idle machines; the rest as
    they are (the very objects)."""
    out = []
    for state in types:
        found = pool.machine(state.machine_type)
        block = blocked(found.launch_templates) if found is not None else None
        if block is None and state.launch_blocked_why is None:
            out.append(state)
            continue
        until, why = (None, None) if block is None else (block.until, block.why)
        update = {"launch_blocked_until": until, "launch_blocked_why": why}
        out.append(state.model_copy(update=update))
    return tuple(out)


def market_of(machine_type: MachineType) -> Market:
    """reserved when its first launch template targets a reservation, else spot or on_demand."""
    if not machine_type.launch_templates:
        return "on_demand"
    template = machine_type.launch_templates[0]
    if targets_reservation(template.advanced_instance_config):  # the runtime's one reading
        return "reserved"
    return "spot" if template.market_type == "SPOT" else "on_demand"


def machine_types_of(
    pool: MachinePool, free_since: Mapping[tuple[str, str], float] | None = None
) -> tuple[MachineTypeState, ...]:
    """A pool file's machine types as the scheduler reads them. ``free_since``: per
    (machine type, partition), since when it has had room (the store tracks it)."""
    since = free_since or {}
    out = []
    for machine in pool.machine_types:
        recycle = machine.recycle_policy
        partitions = tuple(
            PartitionState(
                name=p.name,
                size=p.size,
                rules=tuple(
                    RuleSpec(selector=r.selector, priority=r.priority, quota=r.quota)
                    for r in p.rules
                ),
                free_since=since.get((machine.machine_type, p.name)),
            )
            for p in machine.partitions
        )
        out.append(
            MachineTypeState(
                machine_type=machine.machine_type,
                market=market_of(machine),
                max_idle_s=recycle.max_idle_duration_s if recycle else None,
                partitions=partitions,
            )
        )
    return tuple(out)


def group_order(compute: ComputeConfig, pool_name: str) -> tuple[str, ...]:
    """The machine types a compute config draws from this pool, most preferred first: its
    custom group order where it has one, then its other worker groups in file order."""
    groups = {
        w.group_name(): w.instance_type
        for w in compute.worker_nodes
        if w.machine_pool() == pool_name
    }
    ranked = [groups[name] for name in compute.group_order() if name in groups]
    rest = [t for t in groups.values() if t not in ranked]
    return tuple(dict.fromkeys([*ranked, *rest]))


def _replacement(compute: ComputeConfig) -> tuple[bool, float]:
    enabled = False
    for ranker in compute.flags.instance_ranking_strategy if compute.flags else ():
        if ranker.ranker_type == "custom_group_order":
            enabled = ranker.ranker_config.enable_replacement
            break
    threshold = compute.flags.replacement_threshold_s if compute.flags else None
    return enabled, DEFAULT_REPLACEMENT_THRESHOLD_S if threshold is None else threshold


def workload_of(
    task: Task, compute: ComputeConfig, *, workload_id: str, pool_name: str, submitted_at: float
) -> Workload:
    """A task with a compute config (read inline; a path is the CLI's to resolve) as a
    workload of one pool. ``num_nodes`` counts the pool's worker nodes."""
    scheduling = task.scheduling
    enabled, threshold_s = _replacement(compute)
    return Workload(
        workload_id=workload_id,
        workload_type=task.workload_type or "job",
        labels=dict(task.labels),
        priority=task.priority,
        preemptible=scheduling.preemptible if scheduling else None,
        on_full="preempt" if scheduling and scheduling.on_full == "preempt" else "fallback",
        num_nodes=task.num_nodes,
        group_order=group_order(compute, pool_name),
        submitted_at=submitted_at,
        enable_replacement=enabled,
        replacement_threshold_s=threshold_s,
    )


def det_scheduler(settings: SchedulerSettings) -> DetScheduler:
    """A resolved pool scheduler (``shared.pools``) as the Determined schedulers read it."""
    return DetScheduler(
        type=settings.type,  # checked by the master config model
        fitting_policy=settings.fitting_policy,
        preemption=bool(settings.preemption),
        allow_heterogeneous_fits=bool(settings.allow_heterogeneous_fits),
        default_priority=settings.default_priority or DETERMINED_DEFAULT_PRIORITY,
    )


def det_limits(pool: ResolvedPool, catalog: Catalog | None = None) -> dict[str, Any]:
    """The provider's limits as ``DetPoolSnapshot`` fields: slots per agent, max and min
    agents, the idle period (Determined's defaults where unset: 5 agents, 20 minutes).

    Slots per agent: ``instance_slots``; else a GCP instance's ``gpu_num``; else, given a
    catalog, the GPU count of the provider's instance type (0 for a CPU type, so a slot task
    sent there is refused rather than left pending; 1 with ``cpu_slots_allowed``). A static
    pool (no provider) has none of these; its registered agents are what there is.
    """
    provider = pool.provider
    aux = {"max_aux_containers_per_agent": pool.max_aux_containers_per_agent}
    if provider is None:
        return aux
    slots = provider.get("instance_slots")
    instance = provider.get("instance_type")
    if slots is None and isinstance(instance, Mapping):
        slots = instance.get("gpu_num")
    if slots is None and isinstance(instance, str) and catalog is not None:
        offerings = catalog.instance_type(str(provider.get("type")), instance)
        slots = offerings[0].accelerator_count if offerings else None
    if not slots and provider.get("cpu_slots_allowed"):
        slots = 1  # Determined's SlotsPerInstance: a CPU instance is one CPU slot
    return {
        **aux,
        "slots_per_agent": slots,
        "max_agents": provider.get("max_instances", 5),
        "min_agents": provider.get("min_instances") or 0,
        "max_idle_agent_s": provider.get("max_idle_agent_period_s", 20 * 60.0),
    }
