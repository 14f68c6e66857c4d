"""``provider.cache_stopped_nodes`` carried out: the autoscaler stops the workers it scales down
and starts them again to scale up (:mod:`corral.shared.autoscaler.stopped` decides which).

A cluster node is a launch request of its own, so a stopped worker is a STOPPED request, as
``corral stop`` leaves one (:mod:`.stopping`): its machine stopped by the cloud, its agent's
node token kept on its disk. Started again (STOPPED -> STARTING), its agent resumes with that
token when the machine boots, runs the node's launcher steps again (Ray's ``ray start``
joins the head anew) and the request is RUNNING once it has reported (beat's
``watch_starting``). In the cluster record the node keeps its id; ``stopped_at`` says it is
stopped, ``restart_at`` when a scale-up started it again.

Everything here is safe to repeat: a stop or start is a compare-and-set on the request, so a
tick that runs again (its worker died between commit and execution) does nothing twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from corral.services.providers.base import can_stop
from corral.services.providers.registry import ProviderUnavailable
from corral.services.runtime import stopping
from corral.services.runtime.deps import Deps
from corral.services.state.clusters import ClusterNode, ClusterRecord
from corral.shared.autoscaler import ClusterSpec
from corral.shared.autoscaler.stopped import (
    StoppedNode,
    caches_stopped_nodes,
    outdated,
    reuse,
    scale_down,
    spot_types,
)
from corral.shared.config.cluster import Cluster
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import RequestState

log = logging.getLogger("corral.autoscaling")

STOPPED_BY = "stopped by the cluster autoscaler (provider.cache_stopped_nodes)"


@dataclass
class Policy:
    """Whether this cluster's scale-downs stop (the file caches stopped nodes and the cloud can
    stop a machine), and its spot node types (terminated, as Ray's AWS provider does)."""

    stops: bool
    spot: frozenset[str] = frozenset()


def policy(deps: Deps, rec: ClusterRecord, cloud: str) -> Policy:
    cluster = Cluster.model_validate(rec.cluster)
    if not caches_stopped_nodes(cluster):
        return Policy(stops=False)
    try:
        stoppable = can_stop(deps.provider(cloud))
    except (ProviderUnavailable, ProviderError):
        stoppable = False
    if not stoppable:
        return Policy(stops=False)
    types = list((cluster.available_node_types or {}).keys())
    return Policy(stops=True, spot=spot_types(cluster, types))


@dataclass
class Changes:
    """What one decision does to stopped nodes, carried out after its commit."""

    stop: list[str] = field(default_factory=list)
    start: list[str] = field(default_factory=list)
    terminate: list[str] = field(default_factory=list)  # stopped nodes no longer wanted
    reasons: list[str] = field(default_factory=list)


def settle(deps: Deps, new: ClusterRecord) -> list[StoppedNode]:
    """Bring the record's stopped nodes in line with their requests; the ones ready to start
    again. A stopped node whose request ended is over; one started by hand (``corral start``)
    is coming back; one whose request is in any other state but STOPPED or RUNNING is
    terminated; one still RUNNING waits for its stop (the catch-up asks again)."""
    ready = []
    for node in new.stopped_nodes():
        req = deps.store.get_request(node.request_id)
        if req is not None and req.is_terminal:
            node.ended = f"request {req.state.value}"
            continue
        if req is not None and req.state == RequestState.STARTING:
            node.stopped_at, node.restart_at = None, deps.now()  # started by hand: coming back
            continue
        if req is None or req.state not in (RequestState.STOPPED, RequestState.RUNNING):
            node.stopped_at, node.terminate_sent_at = None, deps.now()
            continue
        if req.state == RequestState.STOPPED:
            assert node.stopped_at is not None
            ready.append(
                StoppedNode(node.request_id, node.node_type, node.launch_hash, node.stopped_at)
            )
    return ready


def decide(
    new: ClusterRecord,
    spec: ClusterSpec,
    rule: Policy,
    ready: list[StoppedNode],
    launch: dict[str, int],
    remove: list[str],
    up: set[str],
    now: float,
) -> tuple[dict[str, int], Changes]:
    """Split the plan: of its launches, stopped nodes started again and new launches (returned,
    in the plan's order); of its removals, nodes stopped (those ``up``: a launch not yet up
    has no machine to keep) and nodes terminated. Stopped nodes no launch can start again are
    terminated."""
    changes = Changes()
    new_launch = dict(launch)
    if ready:
        started, new_launch = reuse(launch, ready, spec)
        for node_type, ids in started.items():
            for node_id in ids:
                node = new.nodes[node_id]
                node.stopped_at, node.restart_at, node.last_busy_at = None, now, None
                changes.start.append(node_id)
            changes.reasons.append(
                f"start again {len(ids)} stopped {node_type} worker(s) "
                f"({', '.join(ids)}): cache_stopped_nodes"
            )
        for node_id in outdated(ready, spec):
            node = new.nodes[node_id]
            node.stopped_at, node.terminate_sent_at = None, now
            changes.terminate.append(node_id)
            changes.reasons.append(
                f"terminate stopped worker {node_id} ({node.node_type}): its node type's launch "
                "config changed, no launch will start it again"
            )
    for node_id in remove:
        node = new.nodes[node_id]
        type_spec = spec.node_types.get(node.node_type)
        current = type_spec is not None and type_spec.launch_hash == node.launch_hash
        action = scale_down(
            caching=rule.stops and current,  # an outdated node would never start again
            can_stop=node_id in up,
            spot=node.node_type in rule.spot,
            head=node.kind == "head",
        )
        if action == "stop":
            node.stopped_at = now
            changes.stop.append(node_id)
        else:
            node.terminate_sent_at = now
    if changes.stop:
        changes.reasons.append(
            f"stop rather than terminate {', '.join(changes.stop)}: cache_stopped_nodes"
        )
    return {t: n for t, n in new_launch.items() if n > 0}, changes


def stop_node(deps: Deps, node_id: str) -> None:
    """Stop a worker the autoscaler scaled down (its request RUNNING -> STOPPED, the cloud's
    stop). A request not RUNNING is left: the next tick's :func:`settle` looks at it again."""
    try:
        stopping.stop(deps, node_id, STOPPED_BY)
    except ProviderError as exc:
        log.warning("stopping cluster node %s failed (%s); the next tick asks again", node_id, exc)


def start_node(deps: Deps, node_id: str) -> bool:
    """Start a stopped worker again; False when the cloud refused (no capacity): the caller
    terminates it, and a new node is launched in its place on a later tick."""
    try:
        said = stopping.start(deps, node_id)
    except ProviderError as exc:
        log.warning("starting cluster node %s failed: %s", node_id, exc)
        return False
    return said in ("starting", str(RequestState.STARTING), str(RequestState.RUNNING))


def catch_up(deps: Deps, node: ClusterNode, state: RequestState, now: float) -> str | None:
    """What an interrupted tick left undone for a stopped or restarted node: ``"stop"`` (a
    stopped node whose request still runs), ``"start"`` (a node started again whose request is
    still STOPPED, within the start deadline), ``"terminate"`` (its restart did not come back
    within it), else None."""
    if node.stopped_at is not None and state == RequestState.RUNNING:
        return "stop"
    if node.stopped_at is None and node.restart_at is not None and state == RequestState.STOPPED:
        if now - node.restart_at <= stopping.start_deadline_s(deps):
            return "start"
        return "terminate"
    return None
