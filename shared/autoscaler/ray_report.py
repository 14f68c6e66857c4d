"""What a Ray head reports about its cluster, read the way Ray's autoscaler v2 reads it.

The head's agent runs a small script with Ray's own Python
(``services/agent/ray_demand.py``) that asks the GCS for the cluster resource state (what
``ray.autoscaler.v2.sdk.get_cluster_resource_state`` returns) and writes it as JSON: every Ray
node (its ``instance_id`` is the ``RAY_CLOUD_INSTANCE_ID`` Corral started it with: Corral's
node id), its resources and idle time; the pending resource requests (tasks and actors that
fit nowhere now), the pending gang requests (placement groups) and the cluster resource
constraints (``ray.autoscaler.sdk.request_resources``). This module turns that report into
the autoscaler's inputs: the queued :class:`Demand`, the requested demand and, per Corral node,
its idle time and the resources in use. Pure: the report is data handed in.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .model import STRATEGIES, BundleDemand, Demand, PlacementGroupDemand

# Resources every Ray node has that no node type declares (and no task asks the autoscaler
# for): left out of demand and of the amounts in use.
IMPLICIT_PREFIXES = ("node:", "accelerator_type:")
IMPLICIT = frozenset({"memory", "object_store_memory", "bundle"})


class RayNode(BaseModel):
    """One Ray node as the head reported it."""

    ray_node_id: str
    instance_id: str = ""  # RAY_CLOUD_INSTANCE_ID: Corral's node id when Corral started it
    node_type: str = ""
    status: str = ""  # RUNNING | IDLE | DRAINING | DEAD
    idle_s: float = 0.0
    ip: str = ""
    total: dict[str, float] = Field(default_factory=dict)
    available: dict[str, float] = Field(default_factory=dict)

    def used(self) -> dict[str, float]:
        """What runs on it now (total minus available), implicit resources left out."""
        out = {}
        for name, amount in _explicit(self.total).items():
            taken = amount - self.available.get(name, 0.0)
            if taken > 1e-9:
                out[name] = taken
        return out

    def is_idle(self) -> bool:
        return self.status == "IDLE"


class RayReport(BaseModel):
    """The head's report, as the script writes it."""

    at: float = 0.0  # when it was read (epoch s)
    version: int = 0  # the GCS's cluster_resource_state_version
    gcs_address: str = ""
    dashboard: str = ""  # host:port of the dashboard (job submission), "" when none
    head_ip: str = ""
    nodes: list[RayNode] = Field(default_factory=list)
    pending: list[dict[str, Any]] = Field(default_factory=list)  # {resources, count}
    gangs: list[dict[str, Any]] = Field(default_factory=list)  # {strategy, bundles, details}
    constraints: list[dict[str, Any]] = Field(default_factory=list)  # {resources, count}

    def by_instance(self) -> dict[str, RayNode]:
        """The live Ray nodes by the instance id they were started with."""
        return {n.instance_id: n for n in self.nodes if n.instance_id and n.status != "DEAD"}

    def queued(self) -> Demand:
        """Pending tasks and actors, and pending placement groups, as Corral's demand."""
        bundles = _bundles(self.pending)
        groups = []
        for gang in self.gangs:
            shapes = [s for s in (_explicit(b) for b in gang.get("bundles", [])) if s]
            strategy = str(gang.get("strategy", "PACK")).upper()
            if shapes:
                groups.append(
                    PlacementGroupDemand(
                        strategy=strategy if strategy in STRATEGIES else "PACK",
                        bundles=shapes,
                        name=str(gang.get("details") or "") or None,
                    )
                )
        return Demand(bundles=bundles, placement_groups=groups)

    def requested(self) -> Demand:
        """``request_resources`` constraints: capacity to hold, as if the cluster were idle."""
        return Demand(bundles=_bundles(self.constraints))


def _explicit(resources: dict[str, Any]) -> dict[str, float]:
    return {
        str(k): float(v)
        for k, v in resources.items()
        if k not in IMPLICIT and not str(k).startswith(IMPLICIT_PREFIXES) and float(v) > 0
    }


def _bundles(rows: list[dict[str, Any]]) -> list[BundleDemand]:
    out = []
    for row in rows:
        shape = _explicit(row.get("resources") or {})
        count = int(row.get("count") or 1)
        if shape and count > 0:
            out.append(BundleDemand(resources=shape, count=count))
    return out
