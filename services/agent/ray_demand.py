"""Read a Ray cluster's demand from its GCS, the way Ray's autoscaler v2 reads it, and write it
where the node agent reports it from.

    RAY_PYTHON ray_demand.py --gcs HOST:PORT --out FILE [--interval-s 1]

Run by the agent on a Ray head, with the Python that has Ray installed (Corral's control plane
never imports Ray; neither does the agent: this file is a standalone script, run as a child).
Every ``--interval-s`` it asks the GCS for the cluster resource state
(``ray.autoscaler.v2.sdk.get_cluster_resource_state``: the nodes with their resources, status
and idle time; pending resource requests; pending gang requests, i.e. placement groups; and the
cluster resource constraints set by ``ray.autoscaler.sdk.request_resources``: through v2's
GCS call, or on a head without autoscaler v2 the internal-KV key Ray's v1 monitor reads,
:func:`v1_requests`) and writes it as
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
    ] or v1_requests(gcs)
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


# Ray's AUTOSCALER_RESOURCE_REQUEST_CHANNEL (ray/_private/ray_constants.py), in the GCS's
# internal KV without a namespace: where ``request_resources`` writes on a head that does not
# run autoscaler v2 (ray/autoscaler/_private/commands.py), for Ray's v1 monitor to read.
V1_REQUEST_KEY = b"autoscaler_resource_request"


def v1_requests(gcs: Any) -> list[dict[str, Any]]:
    """``request_resources`` as a head without autoscaler v2 receives it (Corral's heads: Ray's
    launcher would turn v2 on; Corral starts Ray's monitor without a config): a JSON list of
    bundles, one resource dict each, the last call's (``[]`` once cleared). The same shape as
    v2's constraints: each distinct bundle with its count."""
    raw = gcs.internal_kv_get(V1_REQUEST_KEY, namespace=None)
    try:
        bundles = json.loads(raw) if raw else []
    except ValueError:
        return []
    counted: dict[str, dict[str, Any]] = {}
    for bundle in bundles if isinstance(bundles, list) else []:
        if not isinstance(bundle, dict):
            continue
        resources = _resources(bundle)
        key = json.dumps(resources, sort_keys=True)
        counted.setdefault(key, {"resources": resources, "count": 0})["count"] += 1
    return list(counted.values())


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
