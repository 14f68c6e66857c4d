"""What each running node of a request uses, as its agent's last heartbeat says (CPU and
memory, and GPUs where the machine has ``nvidia-smi``: services/agent/usage.py). The API
serves it (``GET /v1/requests/{id}/usage``), the console draws it per node, and a cluster's
node rows and a pool's machines carry it."""

from __future__ import annotations

import logging
from typing import Any

from corral.services.providers.base import node_work_of
from corral.services.runtime.deps import Deps
from corral.shared.lifecycle import InstanceState
from corral.shared.records import Instance

log = logging.getLogger(__name__)
FIELDS = ("cpu_percent", "mem_percent", "gpu_percent", "gpu_mem_percent", "gpu_count")


def of_instance(deps: Deps, inst: Instance) -> dict[str, Any]:
    """The node's numbers (the fields it reported, and when: ``at``); empty while it is not
    running or its agent is silent."""
    if inst.state is not InstanceState.RUNNING or not inst.provider_id:
        return {}
    return of_machine(deps, inst.cloud, inst.provider_id)


def beat_of(deps: Deps, cloud: str, provider_id: str) -> dict[str, Any] | None:
    """A machine's agent's last heartbeat (None: silent, or no agent), in any process: the
    API boots no agents, so a cloud machine's beats are read from the node book there."""
    try:
        work = node_work_of(deps.provider(cloud))
        if work is not None:
            return work.report(provider_id)
        node = deps.nodes.node_of(cloud, provider_id)
        return None if node is None else deps.nodes.view(node).beat
    except Exception as exc:  # a cloud not configured here any more: no beat, not an error
        log.warning("no heartbeat for %s machine %s: %s", cloud, provider_id, exc)
        return None


def of_machine(deps: Deps, cloud: str, provider_id: str) -> dict[str, Any]:
    """A machine's numbers by its cloud and id (a pool's machines have no instance record)."""
    beat = beat_of(deps, cloud, provider_id)
    if not beat:
        return {}
    found = {k: beat[k] for k in FIELDS if isinstance(beat.get(k), int | float)}
    if found and isinstance(beat.get("ts"), int | float):
        found["at"] = beat["ts"]
    return found


def of_request(deps: Deps, request_id: str) -> list[dict[str, Any]]:
    """Every node of the request that runs, by node index: its instance, then its numbers."""
    rows = []
    for inst in deps.store.list_instances(request_id=request_id):
        if inst.state is InstanceState.RUNNING:
            base = {"instance_id": inst.id, "node_index": inst.node_index}
            rows.append({**base, **of_instance(deps, inst)})
    return sorted(rows, key=lambda r: (r["node_index"], r["instance_id"]))


def on_node_rows(deps: Deps, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cluster's node rows (each ``id`` a node's request) with what each node's machine
    uses."""
    for row in rows:
        used = of_request(deps, str(row.get("id")))
        row.update({k: v for k, v in (used[0] if used else {}).items() if k in FIELDS})
    return rows
