"""A Ray cluster on the simulated cloud, scaled by the autoscaler's own decision
(:func:`corral.shared.autoscaler.decide`) each tick, its nodes launched as direct requests down
the failover chain (as the runtime's autoscaling worker submits them).

Bundles wait until a running worker node has room for them (first fit, as Ray places tasks);
an arrival's work runs once all its bundles are placed, and gives the room back when done.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any

from ..autoscaler import BundleDemand, Demand, Node, decide, resolve_cluster
from ..config.cluster import Cluster
from ..config.task import Task
from ..lifecycle import InstanceState
from .cloud import SimInstance
from .direct import Launcher
from .engine import Sim
from .workload import RayDemandSpec

_SHAPES = itemgetter(2)  # a waiting arrival's bundle shapes

# Bundles' shapes: each bundle's resources in name order, in the bundles' order.
Shapes = tuple[tuple[tuple[str, float], ...], ...]


@dataclass
class _Node:
    node_type: str
    kind: str
    running: bool = False
    used: dict[str, float] = field(default_factory=dict)
    busy_until_s: float = 0.0  # last time it held a bundle
    up_since: float = 0.0


class RaySim:
    """One cluster: its nodes, the bundles waiting, and the autoscaler's ticks."""

    def __init__(self, sim: Sim, name: str, cluster: Cluster, launcher: Launcher) -> None:
        self.sim, self.name, self.launcher = sim, name, launcher
        self.cloud = cluster.provider.type.lower()
        self.spec = resolve_cluster(cluster, sim.catalog).spec
        region = cluster.provider.model_dump().get("region")
        self.region = region if isinstance(region, str) else None
        self.nodes: dict[str, _Node] = {}
        # Waiting arrivals: each one's bundles, and their shapes (each bundle's resources in
        # name order, as a tick's demand counts them), worked out once, not at every tick.
        self.waiting: list[tuple[str, list[dict[str, float]], Shapes]] = []
        self.held: dict[str, list[tuple[str, dict[str, float]]]] = {}
        self.cooldowns: dict[str, float] = {}
        self.count = 0
        self.tick_due: float | None = None

    def start(self) -> None:
        self.sim.at(0.0, self.tick)

    def add(self, rid: str, demand: RayDemandSpec) -> None:
        bundles = [dict(b.resources) for b in demand.bundles for _ in range(b.count)]
        self.waiting.append((rid, bundles, _shapes(bundles)))
        # Ray places work on free room at once. (Only a node coming up or work ending used to
        # place: an arrival finding idle nodes waited for either, which might never come;
        # that left 60 of the seeded day's 66 Ray requests unserved.)
        self.place()
        self._soon()

    def waiting_count(self) -> int:
        return len(self.waiting)

    # ------------------------------------------------------------------ the tick
    def _soon(self) -> None:
        at = self.sim.now + self.sim.timers.reconcile_interval_s
        if self.tick_due is None or at < self.tick_due:
            self.tick_due = at
            self.sim.at(at, self._due, at)

    def _due(self, at: float) -> None:
        if self.tick_due == at:
            self.tick_due = None
            self.tick()

    def tick(self) -> None:
        """Decide with the autoscaler, launch and terminate what it says."""
        now = self.sim.now
        self.cooldowns = {t: u for t, u in self.cooldowns.items() if u > now}
        nodes = [self._row(nid, n) for nid, n in self.nodes.items()]
        # Each bundle shape asked by the waiting arrivals, counted at C speed (in the order
        # first asked, as a Counter keeps it).
        shapes = Counter(chain.from_iterable(map(_SHAPES, self.waiting)))
        demand = Demand(
            bundles=[BundleDemand(resources=dict(k), count=n) for k, n in shapes.items()]
        )
        plan = decide(self.spec, nodes, demand, now=now, cooldowns=self.cooldowns)
        headless = not any(n.kind == "head" for n in self.nodes.values())
        if headless and self.spec.head_node_type not in self.cooldowns:
            self._launch(self.spec.head_node_type, "head")
        for node_type, count in plan.launch.items():
            for _ in range(count):
                self._launch(node_type, "worker")
        for nid in plan.terminate:
            self._terminate(nid)
        if plan.launch or plan.terminate:
            self._soon()
        wake = self._next_wake(now)
        if wake is not None and (self.tick_due is None or wake < self.tick_due):
            self.tick_due = wake
            self.sim.at(wake, self._due, wake)

    def _next_wake(self, now: float) -> float | None:
        """When the decision could change with nothing else happening: an idle node passing
        its timeout, a cool-down ending. (The runtime ticks every ``reconcile_interval_s``;
        between events a tick decides the same, so the simulator ticks on events and these.)"""
        times = [u for u in self.cooldowns.values() if u > now]
        for node in self.nodes.values():
            if node.running and not node.used and node.kind == "worker":
                spec = self.spec.node_types[node.node_type]
                timeout = (
                    spec.idle_timeout_s
                    if spec.idle_timeout_s is not None
                    else self.spec.idle_timeout_s
                )
                times.append(max(node.busy_until_s, node.up_since) + timeout + 1.0)
        later = [t for t in times if t > now]
        return min(later) if later else None

    def _row(self, nid: str, node: _Node) -> Node:
        idle = node.running and not node.used
        since = max(node.busy_until_s, node.up_since)
        return Node(
            id=nid,
            node_type=node.node_type,
            state=InstanceState.RUNNING if node.running else InstanceState.REQUESTED,
            idle_s=max(0.0, self.sim.now - since) if idle else 0.0,
            used=dict(node.used),
            kind="head" if node.kind == "head" else "worker",
        )

    def _launch(self, node_type: str, kind: str) -> None:
        self.count += 1
        nid = f"ray-{self.name}-{self.count}"
        self.nodes[nid] = _Node(node_type, kind)
        resources: dict[str, Any] = {
            "cloud": self.cloud,
            "instance_type": self.spec.node_types[node_type].instance_type,
        }
        if self.region:
            resources["region"] = self.region
        # As the runtime's node requests: fail fast, the autoscaler cools the type down.
        task = Task.model_validate({"name": nid, "resources": resources, "retry_until_up": False})
        self.launcher.submit(nid, task, self._node_up, self._node_failed, owner=nid)

    def _terminate(self, nid: str) -> None:
        node = self.nodes.pop(nid, None)
        if node is not None:
            self.launcher.release(nid)

    def _node_up(self, nid: str, instances: list[SimInstance]) -> None:
        node = self.nodes.get(nid)
        if node is None:
            self.launcher.release(nid)
            return
        node.running, node.up_since = True, self.sim.now
        self.place()
        self._soon()

    def _node_failed(self, nid: str, why: str) -> None:
        node = self.nodes.pop(nid, None)
        if node is not None:
            self.cooldowns[node.node_type] = self.sim.now + self.sim.timers.autoscale_cooldown_s
        self._soon()

    # ------------------------------------------------------------------ bundles
    def place(self) -> None:
        """Waiting arrivals whose every bundle fits on running workers, in arrival order."""
        still = []
        # Bundles that did not fit: this walk only books room, so no later arrival asking the
        # same fits either (a queue of like arrivals is looked at once, not node by node).
        unfit: set[Shapes] = set()
        for rid, bundles, shapes in self.waiting:
            taken = None if shapes in unfit else self._fit(bundles)
            if taken is None:
                unfit.add(shapes)
                still.append((rid, bundles, shapes))
                continue
            self.held[rid] = taken
            gpus = int(sum(b.get("GPU", 0.0) for b in bundles))
            self.sim.work_start(rid, gpus)
        self.waiting = still

    def _fit(self, bundles: list[dict[str, float]]) -> list[tuple[str, dict[str, float]]] | None:
        taken: list[tuple[str, dict[str, float]]] = []
        for bundle in bundles:
            nid = next(
                (
                    nid
                    for nid, n in self.nodes.items()
                    if n.running and n.kind == "worker" and self._room(n, bundle)
                ),
                None,
            )
            if nid is None:
                for owner, b in taken:
                    _book(self.nodes[owner].used, b, -1)
                return None
            _book(self.nodes[nid].used, bundle, 1)
            taken.append((nid, bundle))
        return taken

    def _room(self, node: _Node, bundle: Mapping[str, float]) -> bool:
        total = self.spec.node_types[node.node_type].resources
        return all(node.used.get(k, 0.0) + v <= total.get(k, 0.0) + 1e-9 for k, v in bundle.items())

    def done(self, rid: str) -> None:
        for nid, bundle in self.held.pop(rid, []):
            node = self.nodes.get(nid)
            if node is not None:
                _book(node.used, bundle, -1)
                node.busy_until_s = self.sim.now
        self.place()
        self._soon()

    def lost(self, inst: SimInstance) -> bool:
        """A node's machine was taken back: work on it waits again; the node relaunches."""
        flow = self.launcher.by_instance.get(inst.iid)
        if flow is None or flow.rid not in self.nodes:
            return False
        nid = flow.rid
        self.launcher.lost(inst)  # may fail the relaunch at once: _node_failed drops the node
        node = self.nodes.get(nid)
        if node is not None:
            node.running, node.used = False, {}
        for rid, taken in list(self.held.items()):
            if any(owner == nid for owner, _ in taken):
                for owner, b in taken:
                    if owner != nid and owner in self.nodes:
                        _book(self.nodes[owner].used, b, -1)
                del self.held[rid]
                self.sim.work_stop(rid)
                bundles = [b for _, b in taken]
                self.waiting.insert(0, (rid, bundles, _shapes(bundles)))
        self._soon()
        return True

    def holds(self, rid: str) -> bool:
        return rid in self.held


def _book(used: dict[str, float], bundle: Mapping[str, float], sign: int) -> None:
    for k, v in bundle.items():
        used[k] = max(0.0, used.get(k, 0.0) + sign * v)


def _shapes(bundles: list[dict[str, float]]) -> Shapes:
    return tuple(tuple(sorted(b.items())) for b in bundles)
