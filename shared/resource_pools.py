"""Determined resource pools: each pool's effective scheduler, and which pool a task goes to.

The rules, as Determined states them:

- A pool's own ``scheduler`` is all-or-nothing. Blank (absent, null or ``{}``): the pool takes
  the whole ``resource_manager.scheduler``. Any field set: it inherits nothing, an unset
  ``type`` means ``priority`` and an unset ``fitting_policy`` means ``best``. (Determined's
  ``master/internal/config/scheduler_config.go``, ``SchedulerConfig.UnmarshalJSON``: a section
  naming no type gets the priority scheduler, with default priority 42, since its PR #9385;
  before that it was fair share.)
- The legacy format (top-level ``scheduler``/``provisioner``) is one pool named ``default``,
  the default for both auxiliary and compute tasks.
- A task's explicit ``resources.resource_pool`` wins; otherwise a zero-slot task goes to the
  default aux pool and a slot task to the default compute pool. A task's slots are
  ``resources.slots``, else its accelerator count, else 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .config.master_config import (
    DEFAULT_POOL_NAME,
    MasterConfig,
    Provider,
    ResourceManager,
    ResourcePool,
    SchedulerConfig,
)
from .config.task import Task

DEFAULT_SCHEDULER_TYPE = "priority"  # Determined's since its PR #9385
DEFAULT_FITTING_POLICY = "best"


class UnknownPoolError(KeyError):
    """A pool name that the master config does not define."""

    def __init__(self, pool: str, known: tuple[str, ...], what: str = "resource pool") -> None:
        super().__init__(pool)
        self.pool = pool
        self.known = known
        self.what = what

    def __str__(self) -> str:
        return f"{self.what} {self.pool!r} does not exist; expected one of {', '.join(self.known)}"


@dataclass(frozen=True)
class SchedulerSettings:
    """A pool's effective scheduler, every field resolved."""

    type: str  # fair_share | priority | round_robin
    fitting_policy: str  # best | worst
    preemption: bool | None = None  # None: the scheduler type's own default
    allow_heterogeneous_fits: bool | None = None
    default_priority: int | None = None  # Determined's scale; None: 42
    inherited: bool = False  # True when taken whole from resource_manager.scheduler

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResolvedPool:
    """One pool as it will run."""

    pool_name: str
    description: str | None
    scheduler: SchedulerSettings
    provider: dict[str, Any] | None  # the provider fields the file set (durations in seconds)
    max_aux_containers_per_agent: int | None = None  # zero-slot tasks per agent; None: 100

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool_name": self.pool_name,
            "description": self.description,
            "scheduler": self.scheduler.as_dict(),
            "provider": self.provider,
        }


@dataclass(frozen=True)
class ResolvedPools:
    """Every pool of a master config, and the two default pools."""

    default_aux_resource_pool: str
    default_compute_resource_pool: str
    pools: tuple[ResolvedPool, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(p.pool_name for p in self.pools)

    def pool(self, name: str) -> ResolvedPool:
        """The pool of that name; UnknownPoolError when there is none."""
        for pool in self.pools:
            if pool.pool_name == name:
                return pool
        raise UnknownPoolError(name, self.names())

    def as_dict(self) -> dict[str, Any]:
        return {
            "default_aux_resource_pool": self.default_aux_resource_pool,
            "default_compute_resource_pool": self.default_compute_resource_pool,
            "pools": [p.as_dict() for p in self.pools],
        }


def _settings(config: SchedulerConfig | None, inherited: bool) -> SchedulerSettings:
    """Fill a scheduler section's gaps with Determined's defaults."""
    config = config or SchedulerConfig()
    return SchedulerSettings(
        type=config.type or DEFAULT_SCHEDULER_TYPE,
        fitting_policy=config.fitting_policy or DEFAULT_FITTING_POLICY,
        preemption=config.preemption,
        allow_heterogeneous_fits=config.allow_heterogeneous_fits,
        default_priority=config.default_priority,
        inherited=inherited,
    )


def pool_scheduler(own: SchedulerConfig | None, cluster: SchedulerSettings) -> SchedulerSettings:
    """The all-or-nothing rule: a blank pool scheduler takes the cluster's whole; one with
    any field set inherits nothing (unset type -> priority, unset fitting -> best)."""
    if own is None or own.is_blank():
        return replace(cluster, inherited=True)
    return _settings(own, inherited=False)


def _provider(provider: Provider | None) -> dict[str, Any] | None:
    return None if provider is None else provider.model_dump(exclude_unset=True)


# A kubernetes manager's pool, played as Corral's pooled agents: each agent is one pod of
# max_slots_per_pod slots, launched when tasks wait and deleted soon after its last task ends
# (Determined deletes a task's pods when the task ends).
KUBE_POD_IDLE_S = 5.0
KUBE_MAX_PODS = 5  # pods per pool at once (Determined's max_instances default for agents)


def kube_pods(master: MasterConfig, manager: ResourceManager, pool: ResourcePool) -> dict[str, Any]:
    """The pod "provider" of a pool under ``resource_manager: type: kubernetes``.

    ``slot_type`` gpu (or cuda): a pod's slots are ``nvidia.com/gpu``; cpu: a slot is
    ``slot_resource_requests.cpu`` CPUs (1 when unset). A pool that is only the default aux
    pool holds zero-slot tasks (0 slots, CPU pods). The pod template is
    ``task_container_defaults.gpu_pod_spec`` (``cpu_pod_spec`` for CPU pods), the pool's
    ``task_container_defaults`` over the master's; the namespace is the pool's
    ``kubernetes_namespace``, else the manager's ``default_namespace`` (or ``namespace``).
    """
    aux_only = pool.pool_name == manager.aux_pool() and pool.pool_name != manager.compute_pool()
    cpu_pods = manager.slot_type == "cpu" or aux_only
    defaults = {**(master.task_container_defaults or {}), **(pool.task_container_defaults or {})}
    template = defaults.get("cpu_pod_spec" if cpu_pods else "gpu_pod_spec")
    requests = manager.slot_resource_requests
    return {
        "type": "kubernetes",
        "instance_slots": 0 if aux_only else (manager.max_slots_per_pod or 0),
        "slot_type": "cpu" if cpu_pods else "gpu",
        "cpu_per_slot": (requests.cpu if requests and requests.cpu else 1.0),
        "namespace": pool.kubernetes_namespace or manager.kube_namespace(),
        "pod_spec": dict(template) if isinstance(template, dict) else {},
        "max_instances": KUBE_MAX_PODS,
        "min_instances": 0,
        "max_idle_agent_period_s": KUBE_POD_IDLE_S,
    }


def _resolve_legacy(master: MasterConfig) -> ResolvedPools:
    pool = ResolvedPool(
        pool_name=DEFAULT_POOL_NAME,
        description=None,
        scheduler=_settings(master.scheduler, inherited=False),
        provider=_provider(master.provisioner),
    )
    return ResolvedPools(DEFAULT_POOL_NAME, DEFAULT_POOL_NAME, (pool,))


def _pools_of(master: MasterConfig) -> list[ResourcePool]:
    # No resource_pools at all: Determined makes one static pool named "default".
    return master.resource_pools or [ResourcePool(pool_name=DEFAULT_POOL_NAME)]


def resolve_pools(master: MasterConfig) -> ResolvedPools:
    """Every pool's effective scheduler and the default pools.

    Raises UnknownPoolError when a default pool names no pool (``MasterConfig.problems``
    reports the same with a line number when the file is loaded through ``detect``).
    """
    if master.is_legacy():
        return _resolve_legacy(master)
    manager = master.resource_manager or ResourceManager()
    cluster = _settings(manager.scheduler, inherited=False)
    kube = manager.type == "kubernetes"
    pools = tuple(
        ResolvedPool(
            p.pool_name,
            p.description,
            pool_scheduler(p.scheduler, cluster),
            kube_pods(master, manager, p) if kube else _provider(p.provider),
            p.aux_per_agent(),
        )
        for p in _pools_of(master)
    )
    resolved = ResolvedPools(manager.aux_pool(), manager.compute_pool(), pools)
    for what, name in (
        ("default_aux_resource_pool", resolved.default_aux_resource_pool),
        ("default_compute_resource_pool", resolved.default_compute_resource_pool),
    ):
        if name not in resolved.names():
            raise UnknownPoolError(name, resolved.names(), what)
    return resolved


def route_task(pools: ResolvedPools, task: Task) -> str:
    """The pool a task runs in: its explicit ``resource_pool``, else the aux default for a
    zero-slot task and the compute default for a slot task. UnknownPoolError when the named
    pool does not exist."""
    explicit = task.resources.resource_pool
    if explicit is not None:
        return pools.pool(explicit).pool_name
    if task.slots() == 0:
        return pools.default_aux_resource_pool
    return pools.default_compute_resource_pool
