"""Where a launch request goes, decided once at submit: straight down a failover chain, onto a
machine pool, or into a Determined resource pool; or refused, with the reasons.

:func:`route` is a pure function of the task and a :class:`RegistryView` (the pools registered
when it was submitted, the catalog, the clouds that can launch). The route it returns is stored
on the request; every later step (admit, terminate, reconcile, why) matches on it instead of
deriving it again. The rules:

1. A task whose compute config's worker groups name a machine pool is a workload of that pool.
2. Else a task that names a ``resources.resource_pool``, or asks for slots while a master
   config is registered, goes to that master's pool (zero slots: the aux default).
3. Else it runs on machines of its own, down the failover chain the planner builds.

A route is refused when the request could never run there (a pool that is not registered,
machine types the pool lacks, more slots than the pool can ever give, no candidate at all),
never for a passing shortage: that is what queues and failover are for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.shared.catalog import Catalog
from corral.shared.config.compute_config import ComputeConfig
from corral.shared.config.machine_pool import MachinePool
from corral.shared.config.master_config import MasterConfig
from corral.shared.config.task import Task
from corral.shared.planner import Plan, plan
from corral.shared.resource_pools import ResolvedPools, UnknownPoolError, resolve_pools, route_task
from corral.shared.scheduling.build import det_limits, workload_of
from corral.shared.scheduling.fitting import can_ever_fit
from corral.shared.scheduling.model import DetPoolSnapshot


class _Route(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Direct(_Route):
    """Machines of its own, launched down the failover chain."""

    kind: Literal["direct"] = "direct"


class MachinePoolRoute(_Route):
    """A workload of a registered machine pool: its scheduler places it on warm machines."""

    kind: Literal["machine_pool"] = "machine_pool"
    pool: str


class DeterminedRoute(_Route):
    """A task of the registered master config, sent to one of its resource pools."""

    kind: Literal["determined"] = "determined"
    master: str
    resource_pool: str


Route = Annotated[Direct | MachinePoolRoute | DeterminedRoute, Field(discriminator="kind")]
PooledRoute = MachinePoolRoute | DeterminedRoute


@dataclass(frozen=True)
class Refusal:
    """The request could never run where it would go; ``reasons`` say why, one line each."""

    reasons: tuple[str, ...]


@dataclass(frozen=True)
class MasterView:
    """The registered Determined master config."""

    name: str
    config: MasterConfig


@dataclass(frozen=True)
class RegistryView:
    """What routing reads: registered pools, the catalog and the clouds that can launch."""

    catalog: Catalog
    clouds: tuple[str, ...]
    machine_pools: Mapping[str, MachinePool] = field(default_factory=dict)
    master: MasterView | None = None


def pool_of(route: Route | None) -> str | None:
    """The registered pool document a pooled route lives in (machine pool or master config)."""
    match route:
        case MachinePoolRoute(pool=name):
            return name
        case DeterminedRoute(master=name):
            return name
        case _:
            return None


def route(task: Task, view: RegistryView) -> Route | Refusal:
    """Where ``task`` goes (see the module docstring), or why it can never run."""
    return route_with_plan(task, view)[0]


def reads_pools(task: Task) -> bool:
    """Whether routing ``task`` looks at the registered pools (``RegistryView.machine_pools``
    and ``master``): only a task with a compute config, a resource pool or slots can go to a
    pool. For any other, a view without the pools routes the same (and reads none)."""
    res = task.resources
    return task.compute_config is not None or res.resource_pool is not None or res.slots is not None


def route_with_plan(task: Task, view: RegistryView) -> tuple[Route | Refusal, Plan | None]:
    """:func:`route`, with the failover chain it planned for a direct route (None for the
    others): the request carries it, so admission does not plan it again."""
    if task.compute_config is not None and _names_a_machine_pool(task):
        return _to_machine_pool(task, view), None
    if task.resources.resource_pool is not None or (
        task.resources.slots is not None and view.master is not None
    ):
        return _to_determined(task, view), None
    planned = plan(task, view.catalog, clouds=view.clouds)
    if not planned.candidates:
        reasons = tuple(planned.reasons) or ("no launchable candidate for these resources",)
        return Refusal(reasons), planned
    return Direct(), planned


# ----------------------------------------------------------------------------------------------
# Machine pools


def machine_pool_of(task: Task) -> str | None:
    """The machine pool a task's compute config draws its workers from, if any."""
    compute = task.compute_config
    if not isinstance(compute, ComputeConfig):
        return None
    return next((w.machine_pool() for w in compute.worker_nodes if w.machine_pool()), None)


def _names_a_machine_pool(task: Task) -> bool:
    # A path is the CLI's to read; sent as is, it is refused below with the reason.
    return isinstance(task.compute_config, str) or machine_pool_of(task) is not None


def _to_machine_pool(task: Task, view: RegistryView) -> MachinePoolRoute | Refusal:
    compute = task.compute_config
    if isinstance(compute, str):
        return Refusal(
            (
                f"compute_config {compute!r} is a path: send the compute config inline (the CLI "
                "reads the file for you)",
            )
        )
    name = machine_pool_of(task)
    if name is None or compute is None:
        return Refusal(("the compute config's worker_nodes name no machine pool",))
    pool = view.machine_pools.get(name)
    if pool is None:
        return Refusal(
            (
                f"machine pool {name!r} is not registered; register it with "
                f"`corral pools apply FILE --name {name}`",
            )
        )
    workload = workload_of(task, compute, workload_id="check", pool_name=name, submitted_at=0)
    known = {m.machine_type: m for m in pool.machine_types}
    missing = [t for t in workload.group_order if t not in known]
    if missing:
        return Refusal(
            (
                f"machine type(s) {', '.join(missing)} of the compute config are not in pool "
                f"{name!r} (it has {', '.join(known) or 'none'})",
            )
        )
    capacity = sum(known[t].size() for t in workload.group_order)
    if capacity < task.num_nodes:
        return Refusal(
            (
                f"the workload needs {task.num_nodes} node(s); its groups in {name!r} hold at "
                f"most {capacity}",
            )
        )
    return MachinePoolRoute(pool=name)


# ----------------------------------------------------------------------------------------------
# Determined resource pools


def pool_limits(pools: ResolvedPools, catalog: Catalog) -> dict[str, dict[str, Any]]:
    """Per pool, its provider's limits (slots per agent, max and min agents, idle period)."""
    return {p.pool_name: det_limits(p, catalog) for p in pools.pools}


def _to_determined(task: Task, view: RegistryView) -> DeterminedRoute | Refusal:
    if view.master is None:
        return Refusal(
            (
                f"the task names resource pool {task.resources.resource_pool!r} but no master "
                "config is registered; register one with `corral pools apply master.yaml`",
            )
        )
    master = view.master
    pools = resolve_pools(master.config)
    try:
        pool = route_task(pools, task)
    except UnknownPoolError as exc:
        return Refusal((str(exc),))
    if pools.pool(pool).provider is None:
        return Refusal(
            (
                f"pool {pool!r} of {master.name} is a static pool (no provider): Corral launches "
                "agents only for pools with a provider and cannot register existing agents, so "
                "the task would never run; send it to a pool with a provider",
            )
        )
    limits = pool_limits(pools, view.catalog).get(pool, {})
    verdict = can_ever_fit(DetPoolSnapshot(pool=pool, **limits), task.slots())
    if not verdict.ok:
        return Refusal((verdict.reason,))
    fallbacks = task.scheduling.fallback_pools if task.scheduling else []
    unknown = [p for p in fallbacks if p not in pools.names()]
    if unknown:
        return Refusal(
            (
                f"scheduling.fallback_pools names {', '.join(unknown)}, not a pool of "
                f"{master.name} (it has {', '.join(pools.names())})",
            )
        )
    return DeterminedRoute(master=master.name, resource_pool=pool)
