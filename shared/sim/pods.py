"""A Kubernetes cluster as the simulator plays it: the machines are pods, the capacity is nodes.

The rules are the real provider's (``services/providers/kubernetes/``, docs/kubernetes.md):

- **Offerings are the nodes**: every node shape of a context, once per namespace, priced 0
  (:meth:`corral.shared.sim.scenario.Scenario.catalog`), so the planner puts the cluster before
  any cloud; a shape with no node is not listed.
- **A pod asks its shape** (:func:`corral.shared.pod_shapes.shape_resources`, the provider's own
  numbers): the shape's cpu and memory, its GPUs; a GPU pod is held to nodes of its GPU kind
  (the provider's nodeSelector), a CPU pod to nodes without GPUs (GPU node pools are tainted
  on GKE and EKS; a pod that asks GPUs tolerates the taint).
- **The scheduler binds** a pod to the node with the most room left (the default scheduler's
  LeastAllocated score over cpu and memory; the first such node in file order on a tie). Nodes
  are shared by every namespace of the context.
- **A ResourceQuota admits a pod at creation** (:meth:`SimCluster.admit`): the first of its
  ``hard`` resources the pod would take over its limit refuses it, named, for that namespace
  only (a QuotaError of family ``<namespace>:<resource>``, as the provider raises it); pods
  created and not deleted count, bound or pending.
- **A launch is every pod or none**: a quota refusal or a pod no node can hold deletes the
  launch's pods; the second is a capacity error for the shape in the namespace
  (``FailedScheduling``), known when the scheduler calls it Unschedulable or the provider's
  ``schedule_wait`` ends, whichever is first (``PodCloudSpec.refused_after_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..autoscaler.kube_pods import GPU_RESOURCE
from ..pod_shapes import parse_shape, quota_usage, shape_resources
from .scenario import ContextSpec

_GIB = 2.0**30


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What one pod of a shape takes: from a node, and against a ResourceQuota."""

    cpus: float
    memory: float  # bytes
    gpus: float
    accelerator: str | None  # the GPU kind its nodeSelector names (None: a CPU pod)
    usage: dict[str, float]  # per ResourceQuota resource

    @classmethod
    def of(cls, instance_type: str, gpus: int) -> PodAsk:
        """The pod the provider writes for ``instance_type`` asking ``gpus`` (0: the shape's)."""
        accelerator = parse_shape(instance_type)[2]
        asked = {accelerator: gpus} if accelerator and gpus else None
        usage = quota_usage(shape_resources(instance_type, asked))
        count = usage[f"requests.{GPU_RESOURCE}"]
        return cls(
            usage["requests.cpu"],
            usage["requests.memory"],
            count,
            accelerator if count else None,
            usage,
        )


@dataclass(eq=False, slots=True)
class SimNode:
    """One node: its allocatable cpu, memory (bytes) and GPUs, and what its pods took."""

    cpus: float
    memory: float
    gpus: int
    accelerator: str | None
    used_cpus: float = 0.0
    used_memory: float = 0.0
    used_gpus: float = 0.0

    def selects(self, ask: PodAsk) -> bool:
        """Whether the pod may land here at all: GPU pods on their kind's nodes only (the
        nodeSelector), CPU pods off GPU nodes (their taint)."""
        if ask.accelerator is None:
            return self.gpus == 0
        return self.gpus > 0 and ask.accelerator.upper() == (self.accelerator or "").upper()

    def holds(self, ask: PodAsk) -> bool:
        return (
            self.selects(ask)
            and self.used_cpus + ask.cpus <= self.cpus
            and self.used_memory + ask.memory <= self.memory
            and self.used_gpus + ask.gpus <= self.gpus
        )

    def room(self) -> float:
        """The default scheduler's LeastAllocated score: the share of cpu and memory free."""
        cpu = (self.cpus - self.used_cpus) / self.cpus
        return (cpu + (self.memory - self.used_memory) / self.memory) / 2

    def take(self, ask: PodAsk, sign: float = 1.0) -> None:
        self.used_cpus += sign * ask.cpus
        self.used_memory += sign * ask.memory
        self.used_gpus += sign * ask.gpus


@dataclass
class SimCluster:
    """One context: its nodes, the scheduler's fit and each namespace's ResourceQuota."""

    nodes: list[SimNode]
    hard: dict[str, dict[str, float]]  # namespace -> resource -> limit
    used: dict[str, dict[str, float]] = field(default_factory=dict)
    pods: dict[str, tuple[str, PodAsk, SimNode | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, context: ContextSpec) -> SimCluster:
        nodes = [
            SimNode(g.cpus, g.memory_gib * _GIB, g.gpus, g.accelerator if g.gpus else None)
            for g in context.nodes
            for _ in range(g.count)
        ]
        return cls(nodes, {ns: dict(spec.quota) for ns, spec in context.namespaces.items()})

    def admit(self, pod_id: str, namespace: str, ask: PodAsk) -> str | None:
        """Create a pod (pending) in ``namespace``, or name the resource its ResourceQuota
        refuses it for (nothing created then)."""
        used = self.used.setdefault(namespace, {})
        for resource, limit in self.hard.get(namespace, {}).items():
            if used.get(resource, 0.0) + ask.usage.get(resource, 0.0) > limit:
                return resource
        for resource, amount in ask.usage.items():
            used[resource] = used.get(resource, 0.0) + amount
        self.pods[pod_id] = (namespace, ask, None)
        return None

    def bind(self, pod_id: str) -> bool:
        """Schedule a created pod onto the node with the most room that holds it; False: no
        node can (it stays Pending, Unschedulable)."""
        namespace, ask, node = self.pods[pod_id]
        if node is not None:
            return True
        best = None
        for candidate in self.nodes:
            if candidate.holds(ask) and (best is None or candidate.room() > best.room()):
                best = candidate
        if best is None:
            return False
        best.take(ask)
        self.pods[pod_id] = (namespace, ask, best)
        return True

    def delete(self, pod_id: str) -> None:
        """The pod is gone: its node's room and its namespace's quota given back."""
        found = self.pods.pop(pod_id, None)
        if found is None:
            return
        namespace, ask, node = found
        if node is not None:
            node.take(ask, -1.0)
        used = self.used[namespace]
        for resource, amount in ask.usage.items():
            used[resource] -= amount

    def free(self, namespace: str, ask: PodAsk) -> int:
        """How many more such pods the namespace's quota admits and the nodes hold now."""
        nodes = 0
        for node in self.nodes:
            if not node.holds(ask):
                continue
            fits = [
                (node.cpus - node.used_cpus) // ask.cpus if ask.cpus else None,
                (node.memory - node.used_memory) // ask.memory if ask.memory else None,
                (node.gpus - node.used_gpus) // ask.gpus if ask.gpus else None,
            ]
            nodes += int(min(f for f in fits if f is not None))
        used = self.used.get(namespace, {})
        for resource, limit in self.hard.get(namespace, {}).items():
            amount = ask.usage.get(resource, 0.0)
            if amount:
                nodes = min(nodes, int((limit - used.get(resource, 0.0)) // amount))
        return max(0, nodes)

    def why_pending(self, ask: PodAsk) -> str:
        """The scheduler's FailedScheduling message for a pod no node holds."""
        short: dict[str, int] = {}
        for node in self.nodes:
            if not node.selects(ask):
                what = "node(s) didn't match Pod's node affinity/selector"
                short[what] = short.get(what, 0) + 1
                continue
            for what, free, want in (
                ("cpu", node.cpus - node.used_cpus, ask.cpus),
                ("memory", node.memory - node.used_memory, ask.memory),
                (GPU_RESOURCE, node.gpus - node.used_gpus, ask.gpus),
            ):
                if want > free:
                    short[f"Insufficient {what}"] = short.get(f"Insufficient {what}", 0) + 1
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(short.items()))
        return f"0/{len(self.nodes)} nodes are available: {reasons}."
