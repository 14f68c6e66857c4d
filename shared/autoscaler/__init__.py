"""The cluster autoscaler's decision core: from nodes, pending demand, node types and limits to
a plan of launches and terminations, with the reasons. Pure (stdlib and pydantic): ``now``,
cool-downs and the catalog come in as arguments; nothing here launches or stores anything.

- :mod:`.model`: node types, nodes, demand and the plan, as JSON-ready models;
- :mod:`.packing`: bin packing of demand aggregated by shape;
- :mod:`.decide`: the whole decision, step by step;
- :mod:`.resources`: node type resources from the catalog, launch settings, launch hash.
"""

from .decide import Decision, decide, decide_detailed
from .model import (
    BundleDemand,
    ClusterSpec,
    Demand,
    Node,
    NodeTypeSpec,
    PlacementGroupDemand,
    Plan,
    head_ids,
    node_problems,
)
from .resources import LaunchConfig, Resolved, launch_config, launch_hash, resolve_cluster

__all__ = [
    "BundleDemand",
    "ClusterSpec",
    "Decision",
    "Demand",
    "LaunchConfig",
    "Node",
    "NodeTypeSpec",
    "PlacementGroupDemand",
    "Plan",
    "Resolved",
    "decide",
    "decide_detailed",
    "head_ids",
    "launch_config",
    "launch_hash",
    "node_problems",
    "resolve_cluster",
]
