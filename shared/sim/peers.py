"""The policies Corral is compared with, over the same simulated cloud and workload.

- :class:`GreedyPolicy` (SkyPilot-like): every request gets machines of its own, cheapest
  first; a sold-out place is remembered only within that request's walk; an exhausted chain is
  walked again after ``retry_until_up_s``; a lost machine's request is relaunched by Corral's
  rule (:func:`corral.shared.recovery.relaunch_after_loss`: ``relaunch_limit`` losses in a
  row unless the task has a ``job_recovery``). It knows
  no pools and no reservations, but it is held to a machine pool's size, the limit Corral
  keeps: a pool's workloads hold at most as many machines at once as the pool's partitions
  (of their group order) add up to; one that does not fit waits (:class:`PoolCaps`).
- :class:`OraclePolicy`: knows the capacity ahead: it launches each request in the cheapest
  place that has room now (reservations first) and, on spot, keeps it for the whole run; it
  never tries a place that would refuse. A bound, not a practical policy; but a bound on the
  same problem: a machine pool's workloads hold no more machines of a market (reserved, spot,
  on-demand) than the pool's partitions of that market allow, as under Corral.
- :class:`StaticPolicy` (Determined-like): a fixed number of machines per instance type, held
  all day, shared by Determined's own scheduler (:func:`corral.shared.scheduling.schedule_pool`).

Every request becomes a plain task here (:func:`plain_task`): a machine-pool workload asks for
its group order's instance types, a Determined task for its pool's agents, Ray demand for
enough nodes of the first worker type that fits a bundle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..autoscaler import resolve_cluster
from ..config.compute_config import ComputeConfig
from ..config.task import Task
from ..errors import ProviderError
from ..placement import Placement
from ..planner import Candidate, plan
from ..reservations import reservation_of
from ..resource_pools import resolve_pools, route_task
from ..routing import machine_pool_of
from ..scheduling import Agent, DetPoolSnapshot, DetScheduler, DetTask, schedule_pool
from ..scheduling.build import group_order, machine_types_of
from .cloud import SimInstance
from .direct import Launcher
from .engine import Sim
from .workload import Arrival, StaticPoolSpec, Workload


@dataclass(frozen=True)
class Need:
    """A request as machines of its own: a plain task, and reserved places it may use;
    ``pool``, ``sizes``: a machine pool's workload, and the machines the pool's partitions
    allow per market of its group order (``reserved``, ``spot``, ``on_demand``)."""

    task: Task
    reserved: tuple[Placement, ...] = ()
    pool: str | None = None
    sizes: tuple[tuple[str, int], ...] = ()


def plain_task(arrival: Arrival, workload: Workload, sim: Sim) -> Need | None:
    """The request as a task with machines of its own (None: nothing it could ever run on)."""
    if arrival.ray is not None:
        return _ray_need(arrival, workload, sim)
    task = arrival.task
    assert task is not None
    if isinstance(task.compute_config, ComputeConfig):
        return _pool_need(task, workload, sim)
    if task.resources.resource_pool is not None or task.resources.slots is not None:
        return _det_need(task, workload)
    return Need(task)


def _pool_need(task: Task, workload: Workload, sim: Sim) -> Need | None:
    name = machine_pool_of(task)
    pool = workload.machine_pools.get(name or "")
    compute = task.compute_config
    if pool is None or not isinstance(compute, ComputeConfig):
        return None
    options: list[dict[str, Any]] = []
    reserved = []
    for machine_type in group_order(compute, name or ""):
        found = pool.machine(machine_type)
        for template in found.launch_templates if found else []:
            rid = reservation_of(template.advanced_instance_config)
            res = sim.cloud.reservations.get(rid or "")
            if res is not None:
                region = sim.cloud.regions[(res.cloud, res.zone)]
                reserved.append(
                    Placement(res.cloud, region, res.zone, res.instance_type, "on_demand", res.id)
                )
            option: dict[str, Any] = {"instance_type": template.instance_type}
            if template.market_type == "SPOT":
                option["use_spot"] = True
            if option not in options:
                options.append(option)
    if not options:
        return None
    resources = {"any_of": options}
    order = set(group_order(compute, name or ""))
    sizes: dict[str, int] = {}
    for state in machine_types_of(pool):  # the scheduler's own reading of the pool file
        if state.machine_type in order:
            room = sum(p.size for p in state.partitions)
            sizes[state.market] = sizes.get(state.market, 0) + room
    return Need(
        Task.model_validate({"num_nodes": task.num_nodes, "resources": resources}),
        tuple(reserved),
        name,
        tuple(sorted(sizes.items())),
    )


def _det_need(task: Task, workload: Workload) -> Need | None:
    if workload.master is None:
        return None
    pools = resolve_pools(workload.master)
    try:
        pool = pools.pool(route_task(pools, task))
    except KeyError:
        return None
    provider = pool.provider or {}
    instance = provider.get("instance_type")
    if isinstance(instance, dict):
        instance = instance.get("machine_type")
    slots = int(provider.get("instance_slots") or 0) or None
    if instance is None:
        return None
    nodes = max(1, math.ceil(task.slots() / slots)) if slots else 1
    resources: dict[str, Any] = {"cloud": provider.get("type"), "instance_type": instance}
    if provider.get("spot"):
        resources["use_spot"] = True
    return Need(Task.model_validate({"num_nodes": nodes, "resources": resources}))


def _ray_need(arrival: Arrival, workload: Workload, sim: Sim) -> Need | None:
    assert arrival.ray is not None
    cluster = workload.clusters[arrival.ray.cluster]
    cloud = cluster.provider.type.lower()
    spec = resolve_cluster(cluster, sim.catalog).spec
    bundles = [(b.resources, b.count) for b in arrival.ray.bundles]
    for name, t in spec.node_types.items():
        if name == spec.head_node_type:
            continue
        per_node = min(
            (min(int(t.resources.get(k, 0.0) // v) if v else 10**9 for k, v in shape.items())
             for shape, _ in bundles),
            default=0,
        )  # fmt: skip
        if per_node >= 1:
            nodes = math.ceil(sum(n for _, n in bundles) / per_node)
            resources = {"cloud": cloud, "instance_type": t.instance_type}
            return Need(Task.model_validate({"num_nodes": nodes, "resources": resources}))
    return None


class _PlainPolicy:
    """What greedy and the oracle share: every request as a need of its own."""

    name = "plain"

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def start(self, sim: Sim) -> None:
        self.sim = sim

    def _need(self, arrival: Arrival) -> Need | None:
        need = plain_task(arrival, self.workload, self.sim)
        if need is None:
            self.sim.failed(arrival.id, "no instance type can run it")
        return need

    def _up(self, rid: str, instances: list[SimInstance]) -> None:
        self.sim.work_start(rid, sum(i.gpus for i in instances))


class PoolCaps:
    """Machines held by each pool's workloads against the pool's size (the partitions of their
    group order, every market): a workload is let in when all its nodes fit, else it waits;
    any that fits goes, not only the first."""

    def __init__(self) -> None:
        self.used: dict[str, int] = {}
        self.held: dict[str, tuple[str, int]] = {}  # request -> (pool, nodes)
        self.waiting: dict[str, Need] = {}  # in arrival order

    def admit(self, pool: str) -> list[tuple[str, Need]]:
        """The pool's waiting workloads that fit now, counted as held."""
        out = []
        for rid, need in list(self.waiting.items()):
            nodes = need.task.num_nodes
            if need.pool != pool or self.used.get(pool, 0) + nodes > sum(n for _, n in need.sizes):
                continue
            del self.waiting[rid]
            self.used[pool] = self.used.get(pool, 0) + nodes
            self.held[rid] = (pool, nodes)
            out.append((rid, need))
        return out

    def free(self, rid: str) -> str | None:
        """The request let its machines go (done or failed): the pool it held room in."""
        self.waiting.pop(rid, None)
        found = self.held.pop(rid, None)
        if found is None:
            return None
        pool, nodes = found
        self.used[pool] -= nodes
        return pool


class GreedyPolicy(_PlainPolicy):
    """Cheapest first with retries (see the module docstring)."""

    name = "greedy"

    def start(self, sim: Sim) -> None:
        super().start(sim)
        self.launcher = Launcher(
            sim, shared_memory=False, retry_until_up=True, relaunch_limit=sim.timers.relaunch_limit
        )
        self.caps = PoolCaps()

    def arrive(self, arrival: Arrival) -> None:
        need = self._need(arrival)
        if need is None:
            return
        if need.pool is None:
            self.launcher.submit(arrival.id, need.task, self._up, self._failed)
            return
        self.caps.waiting[arrival.id] = need
        self._admit(need.pool)

    def _admit(self, pool: str) -> None:
        for rid, need in self.caps.admit(pool):
            self.launcher.submit(rid, need.task, self._up, self._failed)

    def _failed(self, request_id: str, why: str) -> None:
        self.sim.failed(request_id, why)
        pool = self.caps.free(request_id)
        if pool is not None:
            self._admit(pool)

    def done(self, request_id: str) -> None:
        self.launcher.release(request_id)
        pool = self.caps.free(request_id)
        if pool is not None:
            self._admit(pool)

    def lost(self, inst: SimInstance) -> None:
        flow = self.launcher.by_instance.get(inst.iid)
        if flow is not None:
            self.sim.work_stop(flow.rid)
            self.launcher.lost(inst)

    def queue_depth(self) -> int:
        return self.launcher.waiting() + len(self.caps.waiting)


@dataclass
class _Wait:
    rid: str
    candidates: list[tuple[Placement, int, int]]  # place, nodes, gpus per node
    duration_s: float | None
    instances: list[SimInstance] = field(default_factory=list)
    pool: str | None = None  # a machine pool's workload: held to its sizes per market
    sizes: dict[str, int] = field(default_factory=dict)
    market: str | None = None  # the market it holds room in, while it runs


class OraclePolicy(_PlainPolicy):
    """Knows capacity ahead (see the module docstring)."""

    name = "oracle"

    def start(self, sim: Sim) -> None:
        super().start(sim)
        self.waiting: dict[str, _Wait] = {}
        self.running: dict[str, _Wait] = {}
        self.used: dict[tuple[str, str], int] = {}  # (pool, market) -> machines held
        self.recheck_due = False
        for t in sim.cloud.change_times():
            sim.at(t, self._recheck)

    def arrive(self, arrival: Arrival) -> None:
        need = self._need(arrival)
        if need is None:
            return
        chain = plan(need.task, self.sim.catalog, clouds=tuple(self.sim.scenario.clouds))
        nodes = need.task.num_nodes
        candidates = [(p, nodes, self._gpus(p)) for p in need.reserved]
        candidates += [(_place(c), nodes, sum(c.accelerators.values())) for c in chain.candidates]
        if not candidates:
            self.sim.failed(arrival.id, "; ".join(chain.reasons) or "no candidate")
            return
        self.waiting[arrival.id] = _Wait(
            arrival.id, candidates, arrival.duration_s, pool=need.pool, sizes=dict(need.sizes)
        )
        self._try(self.waiting[arrival.id])

    def _gpus(self, place: Placement) -> int:
        found = self.sim.catalog.instance_type(place.cloud, place.instance_type)
        return found[0].accelerator_count if found else 0

    def _try(self, wait: _Wait) -> bool:
        now = self.sim.now
        for place, nodes, gpus in wait.candidates:
            if self.sim.cloud.outage(place, now) or self.sim.cloud.free(place, now) < nodes:
                continue
            market = "reserved" if place.reservation else place.market
            if wait.pool is not None:
                used = self.used.get((wait.pool, market), 0)
                if used + nodes > wait.sizes.get(market, 0):
                    continue  # the pool has no more machines of this market
            keys = [f"{wait.rid}/{place.zone}/{place.instance_type}/{n}" for n in range(nodes)]
            if place.market == "spot" and wait.duration_s is not None:
                end = now + wait.duration_s + 600.0
                times = [self.sim.cloud.preempt_time(place, now, k) for k in keys]
                if any(t is not None and t < end for t in times):
                    continue  # it knows this machine would be taken back mid-run
            got = []
            try:
                for key in keys:
                    got.append(self.sim.cloud.launch(place, now, key, gpus))
            except ProviderError:
                for inst in got:
                    self.sim.cloud.end(inst, now)
                continue
            for inst in got:
                inst.owner = wait.rid
                self.sim.launched(inst)
            wait.instances = got
            if wait.pool is not None:
                wait.market = market
                self.used[(wait.pool, market)] = self.used.get((wait.pool, market), 0) + nodes
            del self.waiting[wait.rid]
            self.running[wait.rid] = wait
            self.sim.at(max(i.up_at for i in got), self._up_if, wait)
            return True
        return False

    def _up_if(self, wait: _Wait) -> None:
        if self.running.get(wait.rid) is wait and all(i.ended_at is None for i in wait.instances):
            self._up(wait.rid, wait.instances)

    def _recheck(self) -> None:
        self.recheck_due = False
        for wait in list(self.waiting.values()):
            self._try(wait)

    def _soon(self) -> None:
        if not self.recheck_due and self.waiting:
            self.recheck_due = True
            self.sim.after(0.0, self._recheck)

    def _let_go(self, wait: _Wait) -> None:
        if wait.pool is not None and wait.market is not None:
            self.used[(wait.pool, wait.market)] -= len(wait.instances)
            wait.market = None

    def done(self, request_id: str) -> None:
        wait = self.running.pop(request_id, None)
        if wait is not None:
            self._let_go(wait)
        for inst in wait.instances if wait else []:
            self.sim.cloud.end(inst, self.sim.now)
        self._soon()

    def lost(self, inst: SimInstance) -> None:
        rid = inst.owner
        wait = self.running.pop(rid or "", None)
        if wait is None:
            return
        self.sim.work_stop(wait.rid)
        self.sim.stat(wait.rid).recoveries += 1
        self._let_go(wait)
        for other in wait.instances:
            self.sim.cloud.end(other, self.sim.now)
        wait.instances = []
        self.waiting[wait.rid] = wait
        self._try(wait)
        self._soon()

    def queue_depth(self) -> int:
        return len(self.waiting)


def _place(c: Candidate) -> Placement:
    return Placement(c.cloud, c.region, c.zone, c.instance_type, c.market)


class StaticPolicy(_PlainPolicy):
    """Fixed machines per instance type, shared by Determined's scheduler (see the module
    docstring); sized from the workload when it names no ``static_pools``."""

    name = "static"

    def start(self, sim: Sim) -> None:
        super().start(sim)
        self.tasks: dict[str, dict[str, DetTask]] = {}
        self.agents: dict[str, list[SimInstance]] = {}
        self.owner_of: dict[str, str] = {}  # task -> pool
        self.pass_due = False
        self.sizes = self.workload.static_pools or size_static(self.workload, sim)
        for spec in self.sizes:
            self.tasks.setdefault(spec.instance_type, {})
            self.agents.setdefault(spec.instance_type, [])
        sim.at(0.0, self._grow)

    def _grow(self) -> None:
        """Launch the machines still missing (a refused launch is tried again later)."""
        short = False
        for spec in self.sizes:
            have = self.agents[spec.instance_type]
            for place in _static_places(self.sim, spec):
                while sum(1 for i in have if i.ended_at is None) < spec.count:
                    key = f"static/{spec.instance_type}/{len(have)}"
                    try:
                        inst = self.sim.cloud.launch(place, self.sim.now, key, self._gpus(spec))
                    except ProviderError:
                        break
                    have.append(inst)
                    self.sim.launched(inst)
                    self.sim.at(inst.up_at, self._dirty)
            short |= sum(1 for i in have if i.ended_at is None) < spec.count
        if short:
            self.sim.after(300.0, self._grow)

    def _gpus(self, spec: StaticPoolSpec) -> int:
        found = self.sim.catalog.instance_type(spec.cloud, spec.instance_type)
        return found[0].accelerator_count if found else 0

    def arrive(self, arrival: Arrival) -> None:
        need = self._need(arrival)
        if need is None:
            return
        pool = self._pool_for(need.task)
        if pool is None:
            self.sim.failed(arrival.id, "no static pool has its instance type")
            return
        spec = next(s for s in self.sizes if s.instance_type == pool)
        per_node = max(1, self._gpus(spec))
        task = DetTask(
            task_id=arrival.id,
            group_id=arrival.id,
            slots=need.task.num_nodes * per_node,
            submitted_at=self.sim.now,
        )
        self.tasks[pool][arrival.id] = task
        self.owner_of[arrival.id] = pool
        self._dirty()

    def _pool_for(self, task: Task) -> str | None:
        chain = plan(task, self.sim.catalog, clouds=tuple(self.sim.scenario.clouds))
        wanted = [c.instance_type for c in chain.candidates]
        return next((s.instance_type for s in self.sizes if s.instance_type in wanted), None)

    def _dirty(self) -> None:
        if not self.pass_due:
            self.pass_due = True
            self.sim.after(self.sim.timers.pass_coalesce_s, self._pass)

    def _pass(self) -> None:
        self.pass_due = False
        for pool, tasks in self.tasks.items():
            up = [i for i in self.agents[pool] if i.ended_at is None and i.up_at <= self.sim.now]
            spec = next(s for s in self.sizes if s.instance_type == pool)
            slots = max(1, self._gpus(spec))
            snapshot = DetPoolSnapshot(
                pool=pool,
                scheduler=DetScheduler(),
                agents=tuple(Agent(agent_id=i.iid, slots=slots) for i in up),
                tasks=tuple(tasks.values()),
            )
            plan_ = schedule_pool(snapshot, self.sim.now)
            for start in plan_.starts:
                task = tasks[start.task_id]
                tasks[start.task_id] = task.model_copy(
                    update={"allocations": start.allocations, "started_at": self.sim.now}
                )
                self._hand(start.allocations, start.task_id)
                self.sim.work_start(start.task_id, task.slots)
            for pending in plan_.pending:
                if pending.code == "can_never_fit" and up and len(up) == spec.count:
                    del tasks[pending.task_id]
                    self.sim.failed(pending.task_id, pending.reason)
            for rel in plan_.releases:
                self.sim.work_stop(rel.task_id)
                self.sim.recorder.scheduler_preemptions += 1
                self._hand(tasks[rel.task_id].allocations, None)
                tasks[rel.task_id] = tasks[rel.task_id].model_copy(update={"allocations": ()})

    def _hand(self, allocations: Iterable[Any], owner: str | None) -> None:
        """Bill the agents a task holds to it (or to no one once it lets them go)."""
        live = {i.iid: i for pool in self.agents.values() for i in pool}
        for allocation in allocations:
            inst = live.get(allocation.agent_id)
            if inst is not None:
                self.sim.cloud.hand_to(inst, owner, self.sim.now)

    def done(self, request_id: str) -> None:
        pool = self.owner_of.pop(request_id, None)
        if pool is not None:
            task = self.tasks[pool].pop(request_id, None)
            self._hand(task.allocations if task else (), None)
            self._dirty()

    def lost(self, inst: SimInstance) -> None:
        for tasks in self.tasks.values():
            for tid, task in list(tasks.items()):
                if any(a.agent_id == inst.iid for a in task.allocations):
                    self.sim.work_stop(tid)
                    tasks[tid] = task.model_copy(update={"allocations": ()})
        self.sim.after(300.0, self._grow)
        self._dirty()

    def queue_depth(self) -> int:
        return sum(1 for tasks in self.tasks.values() for t in tasks.values() if not t.allocations)


def size_static(workload: Workload, sim: Sim) -> list[StaticPoolSpec]:
    """One static pool per instance type the workload's requests would first run on, as many
    machines as its mean concurrent demand over the day (at least one)."""
    machine_s: dict[tuple[str, str], float] = {}
    for arrival in workload.arrivals:
        need = plain_task(arrival, workload, sim)
        if need is None:
            continue
        chain = plan(need.task, sim.catalog, clouds=tuple(sim.scenario.clouds))
        on_demand = [c for c in chain.candidates if c.market == "on_demand"] or chain.candidates
        if not on_demand:
            continue
        first = on_demand[0]
        run_s = min(arrival.duration_s or sim.end_s, max(0.0, sim.end_s - arrival.at_s))
        key = (first.cloud, first.instance_type)
        machine_s[key] = machine_s.get(key, 0.0) + run_s * need.task.num_nodes
    return [
        StaticPoolSpec(cloud=cloud, instance_type=itype, count=max(1, math.ceil(s / sim.end_s)))
        for (cloud, itype), s in sorted(machine_s.items())
    ]


def _static_places(sim: Sim, spec: StaticPoolSpec) -> Iterable[Placement]:
    """Where a static pool's machines go: its reservations first, then on-demand zones,
    cheapest first."""
    for res in sim.cloud.reservations.values():
        if res.cloud == spec.cloud and res.instance_type == spec.instance_type:
            region = sim.cloud.regions[(res.cloud, res.zone)]
            yield Placement(res.cloud, region, res.zone, res.instance_type, "on_demand", res.id)
    offered = sorted(
        sim.catalog.instance_type(spec.cloud, spec.instance_type),
        key=lambda o: o.price_usd_per_hour,
    )
    for o in offered:
        if spec.zone is None or o.zone == spec.zone:
            yield Placement(o.cloud, o.region, o.zone, o.instance_type, "on_demand")
