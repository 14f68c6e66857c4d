"""A cluster node's launcher steps and what a Ray head says about its cluster.

* :func:`launch_script`: the node's setup is Ray's launcher steps in Ray's order
  (:mod:`corral.shared.autoscaler.launcher`), with the file mounts the cluster was registered
  with; a Ray head also gets ``CORRAL_RAY_GCS``, so its agent reports what Ray's GCS says.
* :func:`head_report`: the head's last report (its agent's heartbeat carries it), the
  autoscaler's source of demand and of each Ray node's idle time.
* :func:`failure_of`: why a node's launch failed: the command and its exit code, from its log.
"""

from __future__ import annotations

import re
from typing import Any

from corral.services.runtime import requests
from corral.services.runtime.deps import Deps
from corral.services.state.clusters import ClusterNode, ClusterRecord
from corral.shared.autoscaler.launcher import (
    Mounts,
    failed_step,
    launcher_script,
    node_launch,
    runs_ray,
)
from corral.shared.autoscaler.ray_report import RayReport
from corral.shared.config.cluster import Cluster
from corral.shared.lifecycle import InstanceState, RequestState

DEFAULT_GCS_PORT = 6379  # `ray start --head` without --port
_PORT = re.compile(r"--port(?:=|\s+)(\d+)")
REPORT_STALE_S = 30.0  # a head report older than this is not acted on


def gcs_port(cluster: Cluster) -> int:
    """The GCS port the head's start commands give Ray (``--port``), else Ray's default."""
    for command in cluster.head_start_ray_commands or []:
        found = _PORT.search(command)
        if found:
            return int(found.group(1))
    return DEFAULT_GCS_PORT


def launch_script(
    rec: ClusterRecord, node: ClusterNode, head_ip: str | None
) -> tuple[str | None, dict[str, str]]:
    """The node's setup script and the variables its agent needs."""
    cluster = Cluster.model_validate(rec.cluster)
    head = node.kind == "head"
    plan = node_launch(cluster, node.node_type, head=head, node_id=node.request_id, head_ip=head_ip)
    mounts = Mounts.model_validate(rec.mounts) if rec.mounts else None
    envs: dict[str, str] = {}
    if head and runs_ray(cluster) and not plan.docker:
        # Ray's GCS listens on the head itself; the agent's reporter asks it there.
        envs["CORRAL_RAY_GCS"] = f"127.0.0.1:{gcs_port(cluster)}"
    return launcher_script(plan, mounts), envs


def _head(rec: ClusterRecord) -> ClusterNode | None:
    heads = [n for n in rec.live_nodes() if n.kind == "head" and n.terminate_sent_at is None]
    return heads[0] if heads else None


def head_report(deps: Deps, rec: ClusterRecord) -> RayReport | None:
    """What the head's Ray last reported (None: no head, not up, or nothing fresh)."""
    from corral.services.providers.base import node_work_of

    head = _head(rec)
    if head is None:
        return None
    req = deps.store.get_request(head.request_id)
    if req is None or req.state != RequestState.RUNNING:
        return None
    for inst in deps.store.list_instances(request_id=req.id):
        if inst.state is not InstanceState.RUNNING or not inst.provider_id:
            continue
        agents = node_work_of(deps.provider(inst.cloud))
        beat = agents.report(inst.provider_id) if agents is not None else None
        queued = beat.get("queued") if beat else None
        raw = queued.get("ray") if isinstance(queued, dict) else None
        if not isinstance(raw, dict):
            continue
        try:
            report = RayReport.model_validate(raw)
        except ValueError:
            continue
        if deps.now() - report.at <= REPORT_STALE_S:
            return report
    return None


def failure_of(deps: Deps, request_id: str) -> str | None:
    """The failed launcher step of a node (``setup command 2 exited 3: false``), from its log."""
    try:
        text = requests.read_logs(deps, request_id, tail_bytes=16_000)
    except requests.RequestNotFound:
        return None
    return failed_step(text)


def summary(report: RayReport | None) -> dict[str, Any] | None:
    """The head's Ray as ``cluster status`` shows it: addresses and Ray's nodes."""
    if report is None:
        return None
    dashboard = report.dashboard
    # Bound to every interface: reachable at the head's address. Bound to loopback (Ray's
    # default) it answers on the head only, so it is shown as it is.
    if dashboard.startswith(("0.0.0.0:", "[::]:")) and report.head_ip:
        dashboard = f"{report.head_ip}:{dashboard.rsplit(':', 1)[1]}"
    return {
        "gcs_address": f"{report.head_ip}:{report.gcs_address.rsplit(':', 1)[-1]}"
        if report.head_ip
        else report.gcs_address,
        "dashboard": f"http://{dashboard}" if dashboard else None,
        "nodes": [
            {
                "ray_node_id": n.ray_node_id,
                "node": n.instance_id,
                "node_type": n.node_type,
                "status": n.status,
                "idle_s": round(n.idle_s, 1),
            }
            for n in report.nodes
        ],
        "at": report.at,
    }
