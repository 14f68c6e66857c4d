"""Read a Ray cluster's demand from its GCS, the way Ray's autoscaler v2 reads it, and write it
where the node agent reports it from.

    RAY_PYTHON ray_demand.py --gcs HOST:PORT --out FILE [--interval-s 1]

Run by the agent on a Ray head, with the Python that has Ray installed (Corral's control plane
never imports Ray; neither does the agent: this file is a standalone script, run as a child).
Every ``--interval-s`` it asks the GCS for the cluster resource state
(``ray.autoscaler.v2.sdk.get_cluster_resource_state``: the nodes with their resources, status
and idle time; pending resource requests; pending gang requests, i.e. placement groups; and the
cluster resource constraints set by ``ray.autoscaler.sdk.request_resources``) and writes it as
JSON ``{"ray": {...}}`` to ``--out`` (written whole, then renamed, so a reader never sees half).
The agent sends that file with its heartbeat; ``corral.shared.autoscaler.ray_report`` reads it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

STRATEGIES = ("STRICT_SPREAD", "STRICT_PACK", "SPREAD", "PACK")  # longest names first


def _resources(mapping: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in mapping.items()}


def _strategy(gang: Any) -> str:
    """A gang request's strategy: Ray writes it in the details ("<pg id>:STRICT_SPREAD|PENDING");
    failing that, from the bundles' placement constraints."""
    details = str(gang.details).upper()
    for name in STRATEGIES:
        if name in details:
            return name
    constraints = [c for r in gang.requests for c in r.placement_constraints]
    if any(c.HasField("anti_affinity") for c in constraints):
        return "STRICT_SPREAD"
    return "STRICT_PACK" if any(c.HasField("affinity") for c in constraints) else "PACK"


def read(gcs: Any, sdk: Any, gcs_address: str) -> dict[str, Any]:
    """One look at the GCS, as plain JSON."""
    state = sdk.get_cluster_resource_state(gcs)
    status_names = {1: "RUNNING", 2: "DEAD", 3: "IDLE", 4: "DRAINING"}
    nodes = []
    head_ip = ""
    for n in state.node_states:
        total = _resources(n.total_resources)
        if "node:__internal_head__" in total:
            head_ip = n.node_ip_address
        nodes.append(
            {
                "ray_node_id": n.node_id.hex(),
                "instance_id": n.instance_id,
                "node_type": n.ray_node_type_name,
                "status": status_names.get(int(n.status), str(n.status)),
                "idle_s": n.idle_duration_ms / 1000.0,
                "ip": n.node_ip_address,
                "total": total,
                "available": _resources(n.available_resources),
            }
        )
    pending = [
        {"resources": _resources(r.request.resources_bundle), "count": r.count}
        for r in state.pending_resource_requests
    ]
    gangs = [
        {
            "strategy": _strategy(g),
            "bundles": [_resources(r.resources_bundle) for r in g.requests],
            "details": g.details,
        }
        for g in state.pending_gang_resource_requests
    ]
    constraints = [
        {"resources": _resources(r.request.resources_bundle), "count": r.count}
        for c in state.cluster_resource_constraints
        for r in c.resource_requests
    ]
    dashboard = gcs.internal_kv_get(b"dashboard", namespace=b"dashboard")
    return {
        "at": time.time(),
        "version": state.cluster_resource_state_version,
        "gcs_address": gcs_address,
        "dashboard": dashboard.decode() if dashboard else "",
        "head_ip": head_ip,
        "nodes": nodes,
        "pending": pending,
        "gangs": gangs,
        "constraints": constraints,
    }


def write(path: str, report: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"ray": report}, fh)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ray_demand", description=__doc__.split("\n")[0])
    parser.add_argument("--gcs", required=True, help="the GCS address, host:port")
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args(argv)
    raylet = importlib.import_module("ray._raylet")
    sdk = importlib.import_module("ray.autoscaler.v2.sdk")
    gcs = None
    said = ""
    while True:
        try:
            if gcs is None:
                gcs = raylet.GcsClient(address=args.gcs)
            write(args.out, read(gcs, sdk, args.gcs))
            said = ""
        except Exception as exc:  # the GCS restarting, or not up yet: try again next time
            if str(exc) != said:
                sys.stderr.write(f"[corral-ray-demand] cannot read the GCS at {args.gcs}: {exc}\n")
                sys.stderr.flush()
            said = str(exc)
        if args.once:
            return 0
        time.sleep(args.interval_s)


if __name__ == "__main__":
    sys.exit(main())
