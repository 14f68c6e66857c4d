"""An Anyscale compute config: head node, worker groups, and how to rank and replace them.

::

    head_node: {instance_type: m5.2xlarge}
    worker_nodes:
      - instance_type: reserved-a100        # a machine pool's machine_type ...
        flags: {cloud_deployment: {machine_pool: demo-machine-pool}}   # ... in this pool
    flags:
      replacement_threshold: 1m
      instance_ranking_strategy:
        - ranker_type: custom_group_order
          ranker_config: {enable_replacement: true, group_order: [reserved-a100, spot-a100]}

Durations are read into seconds (``replacement_threshold: 1m`` -> ``replacement_threshold_s``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from ..configio import PathKey
from . import DurationS, one_of
from .base import StrictModel

WorkerMarket = Literal["ON_DEMAND", "SPOT", "PREFER_SPOT"]
RankerType = Literal["custom_group_order"]


class CloudDeployment(StrictModel):
    """Where a node group's machines come from: here, a machine pool by name."""

    machine_pool: str | None = None


class NodeFlags(StrictModel):
    """Per-node-group flags."""

    cloud_deployment: CloudDeployment | None = None


class _Node(StrictModel):
    """What head and worker groups share."""

    instance_type: str
    resources: dict[str, float] | None = None
    labels: dict[str, str] | None = None
    advanced_instance_config: dict[str, Any] | None = None  # the cloud's own, passed through
    flags: NodeFlags | None = None
    cloud_deployment: CloudDeployment | None = None  # the SDK's spelling, beside flags

    def machine_pool(self) -> str | None:
        """The machine pool this group draws from, if any."""
        flagged = self.flags.cloud_deployment if self.flags is not None else None
        for deployment in (self.cloud_deployment, flagged):
            if deployment is not None and deployment.machine_pool:
                return deployment.machine_pool
        return None


class HeadNode(_Node):
    """The head node: one machine, on demand."""


class WorkerNodes(_Node):
    """A worker group: ``min_nodes`` to ``max_nodes`` machines of one instance (or machine) type."""

    name: str | None = None
    min_nodes: int = Field(0, ge=0)
    max_nodes: int | None = Field(None, ge=0)
    market_type: Annotated[WorkerMarket | None, BeforeValidator(one_of(WorkerMarket))] = None

    @model_validator(mode="after")
    def _bounds(self) -> WorkerNodes:
        if self.max_nodes is not None and self.max_nodes < self.min_nodes:
            raise ValueError(f"max_nodes ({self.max_nodes}) is below min_nodes ({self.min_nodes})")
        return self

    def group_name(self) -> str:
        """The name ranking strategies refer to: ``name``, else the instance type."""
        return self.name or self.instance_type


class RankerConfig(StrictModel):
    """A custom group order (most preferred first), and whether to move back up it."""

    enable_replacement: bool = False
    group_order: list[str] = Field(default_factory=list)


class InstanceRanker(StrictModel):
    """One ranking strategy for worker groups."""

    ranker_type: Annotated[RankerType, BeforeValidator(one_of(RankerType))]
    ranker_config: RankerConfig = Field(default_factory=RankerConfig)


class ComputeFlags(StrictModel):
    """Cluster-wide flags: when to replace lower-ranked nodes, and how to rank groups."""

    replacement_threshold_s: DurationS | None = Field(None, alias="replacement_threshold", ge=0)
    instance_ranking_strategy: list[InstanceRanker] = Field(default_factory=list)


class ComputeConfig(StrictModel):
    """An Anyscale compute config file."""

    cloud: str | None = None  # an Anyscale cloud's name, not a provider
    cloud_resource: str | None = None
    region: str | None = None
    zones: list[str] | None = None
    enable_cross_zone_scaling: bool | None = None
    head_node: HeadNode | None = None
    worker_nodes: list[WorkerNodes] = Field(default_factory=list)
    auto_select_worker_config: bool | None = None
    min_resources: dict[str, float] | None = None
    max_resources: dict[str, float] | None = None
    advanced_instance_config: dict[str, Any] | None = None
    flags: ComputeFlags | None = None
    idle_termination_minutes: int | None = Field(None, ge=0)
    maximum_uptime_minutes: int | None = Field(None, ge=0)

    def group_order(self) -> list[str]:
        """The custom group order, most preferred first (empty when none is given)."""
        for ranker in self.flags.instance_ranking_strategy if self.flags else ():
            if ranker.ranker_type == "custom_group_order":
                return list(ranker.ranker_config.group_order)
        return []

    def problems(self) -> list[tuple[PathKey, str]]:
        """Cross-field mistakes, each with the path of the value at fault."""
        out: list[tuple[PathKey, str]] = []
        groups = [w.group_name() for w in self.worker_nodes]
        for i, name in enumerate(groups):
            if name in groups[:i]:
                out.append((("worker_nodes", i), f"two worker groups are both named {name!r}"))
        strategies = self.flags.instance_ranking_strategy if self.flags else []
        for i, ranker in enumerate(strategies):
            for j, name in enumerate(ranker.ranker_config.group_order):
                if name not in groups:
                    path = (
                        "flags",
                        "instance_ranking_strategy",
                        i,
                        "ranker_config",
                        "group_order",
                        j,
                    )
                    known = ", ".join(groups) or "none defined"
                    out.append((path, f"names no worker group; expected one of {known}"))
        return out
