"""Ray's ``provider.cache_stopped_nodes``: a worker scaled down is stopped, not terminated, and
a scale-up starts stopped workers of the type again before it launches new ones.

What Ray does (its AWS node provider, ``python/ray/autoscaler/_private/aws/node_provider.py``;
its GCP provider does the same with instances.stop and instances.start):

- the setting defaults to true when the file leaves it out;
- a node the autoscaler removes is stopped, except a spot node, which is terminated (EC2 does
  not stop a one-time spot instance);
- a launch of ``count`` nodes of a type first starts up to ``count`` stopped nodes of the same
  cluster, node kind, user node type and launch config hash, then creates the rest.

Corral's decision, made here and carried out by the autoscaling worker:

- :func:`caches_stopped_nodes`: the setting, with Ray's default for the file's provider;
- :func:`scale_down`: stop or terminate a node the plan removes (a head is never stopped: the
  plan does not remove it; a cloud that cannot stop terminates, with the notice at ``cluster
  up``);
- :func:`reuse`: which stopped nodes a plan's launches start again (same type, the type's
  current launch hash, the most recently stopped first), and what is left to launch new;
- :func:`outdated`: stopped nodes no launch can ever start again (their type is gone from the
  file or its launch config changed): terminated rather than kept, billing for their disks.
  Ray leaves such nodes stopped until ``ray down``.

Pure: the stopped nodes and the file come in; nothing here calls a cloud.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ..config.cluster import Cluster
from .model import ClusterSpec
from .node_configs import asks_spot
from .resources import launch_config

# Ray's providers that stop instead of terminating when the file does not say (their default).
CACHING_PROVIDERS = frozenset({"aws", "gcp"})

Action = Literal["stop", "terminate"]


@dataclass(frozen=True)
class StoppedNode:
    """A worker of the cluster stopped by an earlier scale-down, kept to start again."""

    id: str
    node_type: str
    launch_hash: str
    stopped_at: float


def caches_stopped_nodes(cluster: Cluster) -> bool:
    """``provider.cache_stopped_nodes``, or Ray's default for the file's provider: true for
    ``aws`` and ``gcp``, false for the others (whose machines Ray does not stop)."""
    value = cluster.provider.cache_stopped_nodes
    if value is not None:
        return value
    return cluster.provider.type.lower() in CACHING_PROVIDERS


def spot_types(cluster: Cluster, node_types: Iterable[str]) -> frozenset[str]:
    """The node types whose node config asks for spot or preemptible capacity."""
    out = set()
    for name in node_types:
        try:
            config = launch_config(cluster, name)
        except KeyError:
            continue
        if asks_spot(config.node_config):
            out.add(name)
    return frozenset(out)


def scale_down(*, caching: bool, can_stop: bool, spot: bool, head: bool = False) -> Action:
    """What becomes of a node the autoscaler removes: stopped when the file caches stopped
    nodes, the cloud can stop a machine and the node is an on-demand worker; else terminated."""
    if caching and can_stop and not spot and not head:
        return "stop"
    return "terminate"


def reuse(
    launch: Mapping[str, int], stopped: Iterable[StoppedNode], spec: ClusterSpec
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """``(started, new)``: for each node type of the plan's ``launch``, the stopped nodes to
    start again (at most the count, of the type's current launch hash, the most recently
    stopped first, then by id) and how many nodes are still to be launched new."""
    by_type: dict[str, list[StoppedNode]] = {}
    for node in stopped:
        type_spec = spec.node_types.get(node.node_type)
        if type_spec is None or node.launch_hash != type_spec.launch_hash:
            continue
        by_type.setdefault(node.node_type, []).append(node)
    started: dict[str, list[str]] = {}
    new: dict[str, int] = {}
    for node_type, count in launch.items():
        if count <= 0:
            continue
        ready = sorted(by_type.get(node_type, []), key=lambda n: (-n.stopped_at, n.id))
        taken = [n.id for n in ready[:count]]
        if taken:
            started[node_type] = taken
        if count - len(taken) > 0:
            new[node_type] = count - len(taken)
    return started, new


def outdated(stopped: Iterable[StoppedNode], spec: ClusterSpec) -> list[str]:
    """The stopped nodes no launch will start again: their type is no longer in the file, or
    its launch config (node config, auth) changed since they were launched."""
    out = []
    for node in stopped:
        type_spec = spec.node_types.get(node.node_type)
        if type_spec is None or node.launch_hash != type_spec.launch_hash:
            out.append(node.id)
    return sorted(out)
