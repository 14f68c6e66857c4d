"""Ray's side of the autoscaler benchmark: run inside a virtualenv that has the ``ray`` package.

Usage: ``python ray_baseline.py SCENARIO.json`` (the scenario test_bench_autoscaler.py writes).
It feeds the scenario to Ray's own ``ResourceDemandScheduler.get_nodes_to_launch`` twice, with
the whole queue and with the queue clipped as Ray's monitor clips it
(``AUTOSCALER_MAX_RESOURCE_DEMAND_VECTOR_SIZE`` bundles), times each call and prints one JSON
document on stdout:
``{"ray_version", "clip", "full": {"launch", "unfulfilled", "seconds"}, "clipped": {...}}``.

Everything Ray needs that is not in the scenario is a stand-in: a node provider that answers
tags and IPs from the scenario's nodes, and an empty availability summary.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import ray
from ray.autoscaler._private.constants import AUTOSCALER_MAX_RESOURCE_DEMAND_VECTOR_SIZE
from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary
from ray.autoscaler._private.resource_demand_scheduler import ResourceDemandScheduler
from ray.autoscaler.tags import (
    NODE_KIND_HEAD,
    NODE_KIND_WORKER,
    TAG_RAY_NODE_KIND,
    TAG_RAY_USER_NODE_TYPE,
)


class ScenarioProvider:
    """The two things the scheduler asks a node provider: a node's tags and its IP."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = {n["id"]: n for n in nodes}

    def node_tags(self, node_id: str) -> dict[str, str]:
        node = self.nodes[node_id]
        kind = NODE_KIND_HEAD if node.get("head") else NODE_KIND_WORKER
        return {TAG_RAY_NODE_KIND: kind, TAG_RAY_USER_NODE_TYPE: node["node_type"]}

    def internal_ip(self, node_id: str) -> str:
        return str(self.nodes[node_id]["ip"])


def run(scenario: dict[str, Any], demands: list[dict[str, float]]) -> dict[str, Any]:
    nodes = scenario["nodes"]
    node_types = {
        name: {
            "resources": dict(t["resources"]),
            "min_workers": t["min_workers"],
            "max_workers": t["max_workers"],
            "node_config": {},
        }
        for name, t in scenario["node_types"].items()
    }
    scheduler = ResourceDemandScheduler(
        ScenarioProvider(nodes),
        node_types,
        scenario["max_workers"],
        scenario["head_node_type"],
        scenario["upscaling_speed"],
    )
    unused = {n["ip"]: dict(n["available"]) for n in nodes}
    totals = {n["ip"]: dict(scenario["node_types"][n["node_type"]]["resources"]) for n in nodes}
    start = time.perf_counter()
    launch, unfulfilled = scheduler.get_nodes_to_launch(
        [n["id"] for n in nodes],
        {},
        [dict(d) for d in demands],
        unused,
        [],
        totals,
        [],
        NodeAvailabilitySummary(node_availabilities={}),
    )
    seconds = time.perf_counter() - start
    return {"launch": dict(launch), "unfulfilled": len(unfulfilled), "seconds": seconds}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        scenario = json.load(f)
    demands = scenario["demands"]
    clip = AUTOSCALER_MAX_RESOURCE_DEMAND_VECTOR_SIZE
    result = {
        "ray_version": ray.__version__,
        "clip": clip,
        "clipped": run(scenario, demands[:clip]),
        "full": run(scenario, demands),
    }
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
