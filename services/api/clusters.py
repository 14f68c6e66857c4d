"""The API's cluster routes: register a cluster file, list and show clusters, set a cluster's
standing demand, take a cluster down.

Admins only (create_app mounts the router behind
:func:`corral.services.api.auth.require_admin`). The autoscaling worker does the launching:
these routes write the cluster record and dispatch a tick.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, status
from pydantic import BaseModel, Field

from corral.services.api.auth import require_token
from corral.services.api.routes import check_name, get_deps, invalid_file
from corral.services.providers.registry import (
    ProviderUnavailable,
    cluster_files,
    registered_clouds,
    stand_in_clouds,
)
from corral.services.queues import dispatch
from corral.services.runtime import autoscaling
from corral.services.runtime.deps import Deps, new_id
from corral.services.state.clusters import ClusterRecord
from corral.shared.configio import ConfigError, Document, parse_text

router = APIRouter()


class ClusterBody(BaseModel):
    """``POST /v1/clusters``: a cluster file's text, its name (for messages) and options."""

    cluster_yaml: str = Field(description="the cluster file, as written (YAML or JSON)")
    file_name: str = Field("cluster.yaml", description="the file's name, used in issues")
    cloud: str | None = Field(None, description="play the file on this cloud (local)")
    name: str | None = Field(None, description="the cluster's name; default: cluster_name")
    mounts: dict[str, Any] | None = Field(
        None,
        description="file_mounts and cluster_synced_files packed where `cluster up` ran: "
        "{archive_b64, sha256, targets, size_bytes} (a gzip'd tar, members m0, m1, ...)",
    )


class DemandBody(BaseModel):
    """``PUT /v1/clusters/{name}/demand``: the new standing demand (replaces the last one);
    empty or null clears it."""

    demand_yaml: str | None = Field(None, description="a DEMAND file's text")
    demand: dict[str, Any] | None = Field(None, description="the same, as JSON")
    file_name: str = "demand.yaml"


def _not_found(name: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no cluster named {name!r}")


def _validated(deps: Deps, body: ClusterBody) -> dict[str, Any]:
    """The cluster file as JSON after every check ``autoscale explain`` makes; ConfigError."""
    from corral.services.settings import installed_catalog
    from corral.shared.autoscaler import resolve_cluster
    from corral.shared.config.cluster import Cluster
    from corral.shared.config.detect import check_problems
    from corral.shared.configio import validate_doc

    doc = parse_text(body.cluster_yaml, body.file_name)
    if not isinstance(doc.data, dict):
        raise ConfigError.single(doc.name, "expected a mapping of fields (a cluster file)", "", 1)
    cluster = validate_doc(Cluster, doc)
    check_problems(cluster, doc)
    cloud = (body.cloud or cluster.provider.type).lower()
    written_for = cluster.provider.type.lower()
    players = " or ".join(f"--cloud {c}" for c in stand_in_clouds())
    try:
        rules = cluster_files(cloud)
    except ProviderUnavailable:
        raise doc.error(
            ("provider", "type"),
            f"Corral has no provider for {cloud!r}; expected one of "
            f"{', '.join(registered_clouds())} (or play it on another cloud with {players})",
        ) from None
    stand_in = rules.stand_in(lambda: deps.local_cloud)
    if stand_in is None and cloud != written_for:
        raise doc.error(
            ("provider", "type"),
            f"the file is written for {written_for}; it runs there, or with {players}",
        )
    found = rules.problems(deps.settings, cluster)
    if found:
        raise ConfigError([doc.issue(path, message) for path, message in found])
    resolved = resolve_cluster(cluster, installed_catalog(), stand_in)
    if resolved.problems:
        raise ConfigError([doc.issue(path, message) for path, message in resolved.problems])
    data: dict[str, Any] = cluster.model_dump(mode="json", exclude_none=True, by_alias=True)
    return data


def summary(rec: ClusterRecord) -> dict[str, Any]:
    """A cluster in one row: what ``cluster list`` prints."""
    live = [n for n in rec.running_nodes() if n.terminate_sent_at is None]
    return {
        "name": rec.name,
        "state": rec.state,
        "cloud": rec.cloud or rec.cluster.get("provider", {}).get("type"),
        "file": rec.file_name,
        "nodes": len(live),
        "by_type": dict(Counter(n.node_type for n in live)),
        "stopped": len(rec.stopped_nodes()),
        "demand": rec.demand,
        "created_at": rec.created_at,
    }


def view(deps: Deps, rec: ClusterRecord) -> dict[str, Any]:
    """``cluster status``: the nodes now, the standing demand, the last decision."""
    from corral.services.runtime import cluster_nodes, usage

    failed = [n for n in rec.nodes.values() if n.failure]
    return {
        **summary(rec),
        # Each node's row, with what its machine uses (CPU, memory, GPUs: runtime/usage.py).
        "nodes": usage.on_node_rows(deps, autoscaling.node_rows(deps, rec)),
        # The nodes whose launcher steps failed (newest last): the command and its exit code.
        "failed_nodes": [
            {"id": n.request_id, "node_type": n.node_type, "kind": n.kind, "failure": n.failure}
            for n in sorted(failed, key=lambda n: n.committed_at)[-10:]
        ],
        "ray": cluster_nodes.summary(cluster_nodes.head_report(deps, rec))
        if autoscaling.is_ray(rec)
        else None,
        "cooldowns": rec.cooldowns,
        "last_decision": rec.last_decision,
        "decisions": rec.decisions,
    }


@router.post(
    "/v1/clusters",
    status_code=status.HTTP_201_CREATED,
    dependencies=[Depends(require_token)],
    responses={409: {"description": "a cluster of that name exists"}, 422: {}},
    summary="Register a cluster file; its head and min_workers are launched",
)
def create_cluster(body: ClusterBody, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    clouds = registered_clouds()
    if body.cloud is not None and body.cloud.lower() not in clouds:
        raise HTTPException(
            422, {"error": f"cloud {body.cloud!r}: expected one of {', '.join(clouds)}"}
        )
    try:
        cluster = _validated(deps, body)
    except ConfigError as exc:
        raise invalid_file(exc, "cluster file") from None
    name = body.name or str(cluster["cluster_name"])
    check_name("cluster", name)
    mounts = _mounts(body)
    now = deps.now()
    rec = ClusterRecord(
        name=name,
        uid=new_id("u").removeprefix("u-")[:6],
        file_name=body.file_name,
        cluster=cluster,
        # The cloud it runs on, stored always: without --cloud, the file's provider's.
        cloud=(body.cloud or str(cluster["provider"]["type"])).lower(),
        mounts=mounts,
        created_at=now,
        updated_at=now,
    )
    if not autoscaling.clusters(deps).create(rec):
        raise HTTPException(409, f"a cluster named {rec.name!r} exists; take it down first")
    dispatch.tick_cluster(rec.name, settings=deps.settings)
    return {**summary(rec), "warnings": _warnings(deps, rec)}


def _mounts(body: ClusterBody) -> dict[str, Any] | None:
    """The packed file mounts, checked: their size under the cap and their sha256 right."""
    import base64
    import binascii
    import hashlib

    from pydantic import ValidationError

    from corral.shared.autoscaler.launcher import MAX_MOUNTS_BYTES, Mounts

    if body.mounts is None:
        return None
    try:
        mounts = Mounts.model_validate(body.mounts)
        raw = base64.b64decode(mounts.archive_b64, validate=True)
    except (ValidationError, binascii.Error, ValueError) as exc:
        raise HTTPException(422, {"error": f"mounts: {exc}"}) from None
    if len(raw) > MAX_MOUNTS_BYTES or len(raw) != mounts.size_bytes:
        raise HTTPException(
            422, {"error": f"mounts: {len(raw)} bytes; expected at most {MAX_MOUNTS_BYTES}"}
        )
    if hashlib.sha256(raw).hexdigest() != mounts.sha256:
        raise HTTPException(422, {"error": "mounts: the archive's sha256 does not match"})
    return mounts.model_dump()


def _warnings(deps: Deps, rec: ClusterRecord) -> list[str]:
    """What ``cluster up`` says before any node starts: Ray's autoscaler left out, what the
    file sets that Corral does otherwise (cache_stopped_nodes), and what the cloud warns of (a
    docker section where its machines have no docker)."""
    from corral.shared.autoscaler.launcher import drops_ray_autoscaler
    from corral.shared.config.cluster import Cluster
    from corral.shared.configio import format_loc

    cluster = Cluster.model_validate(rec.cluster)
    notes = []
    if drops_ray_autoscaler(cluster):
        notes.append(
            "head_start_ray_commands: --autoscaling-config is dropped: Corral is this "
            "cluster's autoscaler (the head runs Ray's monitor without a config, reporting only)"
        )
    notes += [f"{format_loc(path)}: {instead}" for path, instead in cluster.done_otherwise()]
    notes += _stop_notes(deps, rec, cluster)
    return notes + cluster_files(autoscaling.record_cloud(rec)).notes(cluster)


def _stop_notes(deps: Deps, rec: ClusterRecord, cluster: Any) -> list[str]:
    """An AWS or Google Cloud file that sets ``cache_stopped_nodes: true`` played on a cloud
    that cannot stop a machine (the local cloud, Kubernetes): its workers are terminated."""
    from corral.services.providers.base import can_stop
    from corral.services.providers.registry import ProviderUnavailable
    from corral.shared.autoscaler.stopped import CACHING_PROVIDERS

    if not cluster.provider.cache_stopped_nodes:
        return []
    if cluster.provider.type.lower() not in CACHING_PROVIDERS:
        return []  # said by done_otherwise already, whatever the cloud
    cloud = autoscaling.record_cloud(rec)
    try:
        stoppable = can_stop(deps.provider(cloud))
    except ProviderUnavailable:
        stoppable = False
    if stoppable:
        return []
    return [
        f"provider.cache_stopped_nodes: accepted; the {cloud} cloud cannot stop a machine: "
        "Corral terminates the workers it scales down and launches new ones to scale up"
    ]


@router.get("/v1/clusters", summary="List clusters")
def list_clusters(deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    return {"clusters": [summary(r) for r in autoscaling.clusters(deps).list()]}


@router.get("/v1/clusters/{name}", summary="One cluster: nodes, demand, last decision")
def get_cluster(name: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    rec = autoscaling.clusters(deps).get(name)
    if rec is None:
        raise _not_found(name)
    return view(deps, rec)


def _demand(body: DemandBody) -> dict[str, Any] | None:
    """The demand as JSON, None for an empty one; ConfigError."""
    from corral.shared.autoscaler.model import demand_from_doc

    if body.demand_yaml is not None:
        doc = parse_text(body.demand_yaml, body.file_name)
    else:
        doc = Document(name=body.file_name, data=body.demand)
    demand = demand_from_doc(doc)
    return None if demand.is_empty() else demand.model_dump(mode="json")


@router.put(
    "/v1/clusters/{name}/demand",
    dependencies=[Depends(require_token)],
    summary="Replace the cluster's standing demand (empty clears it)",
)
def put_demand(name: str, body: DemandBody, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    try:
        demand = _demand(body)
    except ConfigError as exc:
        raise invalid_file(exc, "demand") from None

    def replace(r: ClusterRecord) -> bool:
        r.demand, r.updated_at = demand, deps.now()
        return True

    rec = autoscaling.clusters(deps).update(name, replace)
    if rec is None:
        raise _not_found(name)
    dispatch.tick_cluster(name, settings=deps.settings)
    return summary(rec)


@router.delete(
    "/v1/clusters/{name}",
    dependencies=[Depends(require_token)],
    summary="Take a cluster down: every node is terminated, then the cluster is forgotten",
)
def delete_cluster(name: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    now = deps.now()

    def down(r: ClusterRecord) -> bool:
        if r.state == "down":
            return False
        r.state, r.down_at, r.updated_at = "down", now, now
        return True

    rec = autoscaling.clusters(deps).update(name, down)
    if rec is None:
        raise _not_found(name)
    # The autoscaler never launches for a cluster that is down; what runs is cancelled here,
    # and the tick cancels again what an interrupted tick may still submit, then forgets it.
    for node in rec.live_nodes():
        autoscaling.cancel_node(deps, node.request_id)
    dispatch.tick_cluster(name, settings=deps.settings)
    return {**summary(rec), "terminating": [n.request_id for n in rec.live_nodes()]}
