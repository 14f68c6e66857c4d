"""Corral as configured: each request routed as the runtime routes it at submit
(:func:`corral.shared.routing.route`), then down its failover chain (:mod:`.direct`), onto a
machine pool or a Determined pool (:mod:`.pools`), or to its Ray cluster (:mod:`.ray`)."""

from __future__ import annotations

from ..routing import (
    DeterminedRoute,
    Direct,
    MachinePoolRoute,
    MasterView,
    Refusal,
    RegistryView,
    route_with_plan,
)
from .cloud import SimInstance
from .direct import Launcher
from .engine import Sim
from .pool_sims import DeterminedSim, MachinePoolSim
from .ray import RaySim
from .workload import Arrival, Workload

MASTER = "master"


class CorralPolicy:
    """The real decision code over the simulated cloud."""

    name = "corral"
    wide_blocks = False  # see CorralWideBlocksPolicy

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def start(self, sim: Sim) -> None:
        self.sim = sim
        self.launcher = Launcher(
            sim, relaunch_limit=sim.timers.relaunch_limit, wide_blocks=self.wide_blocks
        )
        budgets = self.workload.budgets
        # One memory of blocked scopes for every launch, direct or pooled (the runtime's Redis).
        memory, rule = self.launcher.memory, self.launcher.block_for
        self.pools = {
            name: MachinePoolSim(sim, name, pool, _cloud_of(sim, pool), budgets, memory, rule)
            for name, pool in self.workload.machine_pools.items()
        }
        master = self.workload.master
        self.det = DeterminedSim(sim, MASTER, master, budgets, memory, rule) if master else None
        self.clusters = {
            name: RaySim(sim, name, cluster, self.launcher)
            for name, cluster in self.workload.clusters.items()
        }
        self.view = RegistryView(
            catalog=sim.catalog,
            clouds=tuple(sim.scenario.clouds),
            machine_pools=self.workload.machine_pools,
            master=MasterView(MASTER, master) if master else None,
        )
        self.where: dict[str, object] = {}
        for pool in self.pools.values():
            sim.at(sim.timers.pool_rebalance_interval_s, pool.rebalance)
        if self.det is not None:
            sim.at(sim.timers.pool_rebalance_interval_s, self.det.rebalance)
        for cluster in self.clusters.values():
            cluster.start()

    def arrive(self, arrival: Arrival) -> None:
        if arrival.ray is not None:
            cluster = self.clusters[arrival.ray.cluster]
            self.where[arrival.id] = cluster
            cluster.add(arrival.id, arrival.ray)
            return
        task = arrival.task
        assert task is not None
        found, planned = route_with_plan(task, self.view)  # a direct route's chain, planned once
        match found:
            case Refusal(reasons=reasons):
                self.sim.failed(arrival.id, "refused: " + "; ".join(reasons))
            case MachinePoolRoute(pool=pool):
                self.where[arrival.id] = self.pools[pool]
                self.pools[pool].add(arrival.id, task)
            case DeterminedRoute(resource_pool=pool):
                assert self.det is not None
                self.where[arrival.id] = self.det
                self.det.add(arrival.id, task, pool)
            case Direct():
                self.where[arrival.id] = self.launcher
                self.launcher.submit(arrival.id, task, self._up, self.sim.failed, planned=planned)

    def _up(self, rid: str, instances: list[SimInstance]) -> None:
        self.sim.work_start(rid, sum(i.gpus for i in instances))

    def done(self, request_id: str) -> None:
        where = self.where.pop(request_id, None)
        if where is self.launcher:
            self.launcher.release(request_id)
        elif isinstance(where, MachinePoolSim | DeterminedSim | RaySim):
            where.done(request_id)

    def lost(self, inst: SimInstance) -> None:
        pools: list[MachinePoolSim | DeterminedSim] = [*self.pools.values()]
        if self.det is not None:
            pools.append(self.det)
        for pool in pools:
            if pool.lost(inst):
                return
        for cluster in self.clusters.values():
            if cluster.lost(inst):
                return
        flow = self.launcher.by_instance.get(inst.iid)
        if flow is not None:
            self.sim.work_stop(flow.rid)
            self.launcher.lost(inst)

    def queue_depth(self) -> int:
        pools = sum(p.waiting() for p in self.pools.values())
        det = self.det.waiting() if self.det else 0
        ray = sum(c.waiting_count() for c in self.clusters.values())
        direct = sum(1 for rid, f in self.launcher.flows.items() if not f.up and rid in self.where)
        return pools + det + ray + direct


class CorralWideBlocksPolicy(CorralPolicy):
    """Corral with the blocks it kept before issue #46 (a quota error blocked its whole
    region, a shortfall its zone's type for every ask): not a policy to choose, the measure
    of what blocking at the cloud's own scope buys."""

    name = "corral-wide-blocks"
    wide_blocks = True


def _cloud_of(sim: Sim, pool: object) -> str:
    """The cloud a machine pool launches on: the first whose catalog has its first type."""
    types = [
        t.instance_type for m in getattr(pool, "machine_types", []) for t in m.launch_templates
    ]
    for cloud in sim.scenario.clouds:
        if any(sim.catalog.instance_type(cloud, t) for t in types[:1]):
            return cloud
    return next(iter(sim.scenario.clouds))
