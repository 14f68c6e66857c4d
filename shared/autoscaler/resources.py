"""From a cluster file to what the autoscaler packs against and what a node is launched with.

- :func:`resolve_cluster`: every node type's resources, filled in from the catalog where the
  file leaves them out (CPU = vCPUs, GPU = accelerator count, ``memory`` in bytes,
  ``accelerator_type:<NAME>: 1``), its bounds and launch hash, as a :class:`ClusterSpec`.
  Keys the file sets win over the catalog's. How a node config reads is the file's provider
  type's (:mod:`.node_configs`). With a stand-in (the local cloud's instance types), an AWS or
  GCP file is played there: each type takes the local instance type its instance type is
  aliased to, else the smallest local type with at least its resources.
- :func:`launch_config`: a node type's launch settings, merged as Ray's cluster launcher
  merges them (see :func:`setup_commands`, :func:`docker_settings`), with the launch hash.

Files written the older way (``head_node`` / ``worker_nodes`` blobs) become two node types,
``ray.head.default`` and ``ray.worker.default``. Pure: the catalog and local cloud come in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ..catalog.catalog import Catalog
from ..catalog.offering import Offering
from ..clouds import CATALOG_CLOUDS
from ..config.cluster import Cluster, NodeType
from ..config.localcloud import InstanceType, LocalCloud
from ..configio import PathKey
from .kube_pods import pod_of, pod_resources
from .model import GIB, ClusterSpec, NodeTypeSpec, format_resources
from .node_configs import NodeConfigs, asks_spot, node_configs

# Ray schedules ``memory`` against what the object store leaves: 30% of a node's memory goes to
# the object store by default, so a worker offers 70% of its memory as the ``memory`` resource.
OBJECT_STORE_SHARE = 0.3
DEFAULT_MAX_WORKERS = 2  # Ray's default for a file that sets no max_workers
DEFAULT_UPSCALING_SPEED = 1.0
DEFAULT_IDLE_TIMEOUT_MINUTES = 5.0
LEGACY_HEAD = "ray.head.default"
LEGACY_WORKER = "ray.worker.default"

Problem = tuple[PathKey, str]


@dataclass
class Resolved:
    """A cluster file resolved for the autoscaler: the spec, what is wrong, what to tell."""

    spec: ClusterSpec
    problems: list[Problem] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def node_type_entries(cluster: Cluster) -> list[tuple[str, NodeType, PathKey]]:
    """``(name, node type, path in the file)`` for every node type, legacy files included."""
    if cluster.available_node_types:
        return [
            (name, nt, ("available_node_types", name))
            for name, nt in cluster.available_node_types.items()
        ]
    out: list[tuple[str, NodeType, PathKey]] = []
    if cluster.head_node is not None:
        out.append((LEGACY_HEAD, NodeType(node_config=cluster.head_node, max_workers=0), ()))
    if cluster.worker_nodes is not None:
        worker = NodeType(
            node_config=cluster.worker_nodes,
            min_workers=cluster.min_workers or 0,
            max_workers=_global_max(cluster),
        )
        out.append((LEGACY_WORKER, worker, ()))
    return out


def head_node_type(cluster: Cluster) -> str | None:
    if cluster.available_node_types:
        return cluster.head_node_type
    return LEGACY_HEAD if cluster.head_node is not None else None


def _global_max(cluster: Cluster) -> int:
    return cluster.max_workers if cluster.max_workers is not None else DEFAULT_MAX_WORKERS


def offering_resources(
    vcpus: float, memory_gib: float, gpus: int, accelerator: str | None
) -> dict[str, float]:
    """A node's resources as Ray writes them."""
    out: dict[str, float] = {
        "CPU": vcpus,
        "memory": float(int(memory_gib * GIB * (1 - OBJECT_STORE_SHARE))),
    }
    if gpus and accelerator:
        out["GPU"] = float(gpus)
        out[f"accelerator_type:{accelerator}"] = 1.0
    return out


def _catalog_resources(
    reading: NodeConfigs, offering: Offering, node_config: Mapping[str, Any]
) -> dict[str, float]:
    gpus, accelerator = offering.accelerator_count, offering.accelerator
    if not gpus:
        gpus, accelerator = reading.attached_gpus(node_config)
    return offering_resources(offering.vcpus, offering.memory_gib, gpus, accelerator)


def _local_resources(t: InstanceType) -> dict[str, float]:
    return offering_resources(t.vcpus, t.memory_gib, t.accelerator_count, t.accelerator)


def local_instance_type(
    name: str | None, needs: Mapping[str, float], local: LocalCloud
) -> tuple[InstanceType, str] | None:
    """The local type that plays ``name``: its alias, the type of that name, else the smallest
    with at least ``needs`` (CPU, memory, GPUs; of the same accelerator when the local cloud
    has it, else of any). Returned with how it was found."""
    if name is not None:
        try:
            how = "alias" if name in local.aliases else "same name"
            return local.instance_type(name), how
        except KeyError:
            pass
    gpus = needs.get("GPU", 0.0)
    accelerator = next(
        (k.split(":", 1)[1].upper() for k in needs if k.startswith("accelerator_type:")), None
    )
    memory_gib = needs.get("memory", 0.0) / (GIB * (1 - OBJECT_STORE_SHARE))
    fits = [
        t
        for t in local.instance_types
        if t.vcpus >= needs.get("CPU", 0.0)
        and t.memory_gib >= memory_gib
        and t.accelerator_count >= gpus
    ]
    same = [t for t in fits if not gpus or accelerator is None or t.accelerator == accelerator]
    pool = same or fits
    if not pool:
        return None
    best = min(
        pool, key=lambda t: (t.accelerator_count, t.vcpus, t.memory_gib, t.price_usd_per_hour)
    )
    how = "smallest with its resources"
    if pool is not same:
        how += f"; no local {accelerator}, {best.accelerator} instead"
    return best, how


def _pick_offering(
    catalog: Catalog | None,
    source: str,
    reading: NodeConfigs,
    name: str | None,
    node_config: Mapping[str, Any],
) -> Offering | None:
    """The catalog row a node config launches. A catalog may list a machine bare and with
    each GPU it can carry (GCP's N1): the one with the GPUs the config attaches, else the
    bare one."""
    if catalog is None or name is None:
        return None
    offerings: tuple[Offering, ...] = catalog.instance_type(source, name)
    if not offerings:
        return None
    gpus, accelerator = reading.attached_gpus(node_config)
    for o in offerings:
        if gpus and (o.accelerator, o.accelerator_count) == (accelerator, gpus):
            return o
    return next((o for o in offerings if o.accelerator is None), offerings[0])


def _resolve_type(
    name: str,
    nt: NodeType,
    path: PathKey,
    source: str,
    catalog: Catalog | None,
    stand_in: LocalCloud | None,
    out: Resolved,
) -> tuple[dict[str, float], str | None, float | None]:
    """One type's resources (catalog, then the file's keys on top), its instance type and its
    on-demand price (the catalog's; None when the catalog does not list it)."""
    reading = node_configs(source)
    declared = dict(nt.resources or {})
    itype = reading.instance_type(nt.node_config)
    # Problems point at the instance type's line when the node config names one.
    where: PathKey = (*path, "node_config")
    key = reading.type_key(nt.node_config)
    if key is not None and path:
        where = (*where, key)
    offering = _pick_offering(catalog, source, reading, itype, nt.node_config)
    detected = _catalog_resources(reading, offering, nt.node_config) if offering else {}
    if reading.pods:
        legacy = {LEGACY_HEAD: ("head_node",), LEGACY_WORKER: ("worker_nodes",)}
        at: PathKey = (*path, "node_config") if path else legacy.get(name, ())
        from_pod = _pod_resources(nt.node_config, at, out)
        if from_pod is None:
            return declared, None, None
        detected = from_pod
    if stand_in is not None:
        found = local_instance_type(itype, {**detected, **declared}, stand_in)
        if found is None:
            what = itype or "its resources"
            out.problems.append((where, f"no local instance type plays {what}; add an alias"))
            return declared, itype, None
        local_type, how = found
        out.notices.append(f"{name}: {itype or 'node'} runs as local {local_type.name} ({how})")
        local_price = local_type.price_usd_per_hour
        return {**_local_resources(local_type), **declared}, local_type.name, local_price
    if reading.pods:
        return {**detected, **declared}, None, 0.0  # the cluster is already paid for
    if offering is None and nt.resources is None:
        catalog_name = f"the {source} catalog" if source in CATALOG_CLOUDS else "any catalog"
        hint = _nearest_type(catalog, source, itype)
        out.problems.append(
            (where, f"instance type {itype!r} is not in {catalog_name}{hint}; write its resources")
        )
    elif offering is None and itype is not None:
        out.notices.append(f"{name}: {itype} is not in the {source} catalog; resources as written")
    price: float | None = None
    if offering is not None:
        price = offering.price_usd_per_hour
        if asks_spot(nt.node_config) and offering.spot_price_usd_per_hour is not None:
            price = offering.spot_price_usd_per_hour
    return {**detected, **declared}, itype, price


def _nearest_type(catalog: Catalog | None, source: str, itype: str | None) -> str:
    """`` (did you mean 'n1-standard-2'?)`` when the cloud's catalog has a close name."""
    from corral.shared.catalog_names import nearest

    if catalog is None or itype is None:
        return ""
    names = {o.instance_type for o in catalog.offerings if o.cloud == source}
    close = nearest(itype, names)
    return f" (did you mean {close!r}?)" if close else ""


def _pod_resources(
    node_config: Mapping[str, Any], where: PathKey, out: Resolved
) -> dict[str, float] | None:
    """A Kubernetes node type's resources, read from its pod as Ray's Kubernetes provider
    reads them (None, with a problem, when the node config is no pod)."""
    pod, problem = pod_of(node_config)
    if problem is not None:
        out.problems.append(((*where, *problem[0]), problem[1]))
        return None
    assert pod is not None
    try:
        cpus, memory_gib, gpus = pod_resources(pod)
    except ValueError as exc:
        out.problems.append((where, str(exc)))
        return None
    if not cpus or not memory_gib:
        out.problems.append(
            (
                (*where, "spec", "containers", 0, "resources"),
                "expected the container's cpu and memory (requests or limits): "
                "they are the node's resources",
            )
        )
        return None
    found = offering_resources(cpus, memory_gib, 0, None)
    if gpus:
        found["GPU"] = float(gpus)
    return found


def resolve_cluster(
    cluster: Cluster, catalog: Catalog | None, stand_in: LocalCloud | None = None
) -> Resolved:
    """The autoscaler's view of a cluster file, on the cloud it is written for; with
    ``stand_in``, played on the cloud whose instance types those are (each node type takes the
    one that plays it)."""
    source = cluster.provider.type.lower()
    entries = node_type_entries(cluster)
    head = head_node_type(cluster)
    out = Resolved(ClusterSpec(head_node_type=head or "", max_workers=0, node_types={}))
    if not entries or head is None:
        out.problems.append(
            ((), "no node types: write available_node_types and head_node_type to autoscale")
        )
        return out
    types: dict[str, NodeTypeSpec] = {}
    global_max = _global_max(cluster)
    for name, nt, path in entries:
        resources, itype, price = _resolve_type(name, nt, path, source, catalog, stand_in, out)
        low = nt.min_workers or 0
        high = nt.max_workers if nt.max_workers is not None else global_max
        types[name] = NodeTypeSpec(
            resources=resources,
            min_workers=low,
            max_workers=high,
            idle_timeout_s=nt.idle_timeout_s,
            launch_hash=launch_hash(nt.node_config, _auth(cluster)),
            instance_type=itype,
            price_usd_per_hour=price,
        )
    minutes = cluster.idle_timeout_minutes
    out.spec = ClusterSpec(
        head_node_type=head,
        max_workers=global_max,
        upscaling_speed=(
            cluster.upscaling_speed
            if cluster.upscaling_speed is not None
            else DEFAULT_UPSCALING_SPEED
        ),
        idle_timeout_s=(minutes if minutes is not None else DEFAULT_IDLE_TIMEOUT_MINUTES) * 60,
        node_types=types,
    )
    return out


def describe_type(name: str, spec: NodeTypeSpec) -> str:
    """``gpu_8_ondemand (p3.8xlarge): {CPU: 32, ...}, 0..2 workers``."""
    itype = f" ({spec.instance_type})" if spec.instance_type else ""
    bounds = f"{spec.min_workers}..{spec.max_workers} workers"
    return f"{name}{itype}: {format_resources(spec.resources)}, {bounds}"


# --------------------------------------------------------------------------- launch settings
def _auth(cluster: Cluster) -> dict[str, Any]:
    return cluster.auth.model_dump(exclude_none=True) if cluster.auth else {}


def launch_hash(node_config: Mapping[str, Any], auth: Mapping[str, Any]) -> str:
    """A digest of what a node is launched with (its node config and the login settings).
    A node started under another hash is outdated and gets replaced."""
    text = json.dumps([node_config, auth], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _entry(cluster: Cluster, node_type: str) -> NodeType:
    for name, nt, _path in node_type_entries(cluster):
        if name == node_type:
            return nt
    raise KeyError(node_type)


def setup_commands(cluster: Cluster, node_type: str, *, head: bool = False) -> list[str]:
    """The commands run on a node after it starts.

    The head runs the top-level ``setup_commands`` then ``head_setup_commands``. A worker runs
    its type's own ``worker_setup_commands`` when the type has them, and nothing else: Ray's
    ``ray-schema.json`` says of the per-type list "This node specfic list will override the
    global setup_commands and worker_setup_commands" (its launcher merges ``setup_commands``
    into the global lists first, then a type's own list takes the merged list's place). A
    type without its own runs ``setup_commands`` then the top-level ``worker_setup_commands``.
    """
    common = list(cluster.setup_commands or [])
    if head:
        return common + list(cluster.head_setup_commands or [])
    own = _entry(cluster, node_type).worker_setup_commands
    if own is not None:
        return list(own)
    return common + list(cluster.worker_setup_commands or [])


def initialization_commands(cluster: Cluster, node_type: str) -> list[str]:
    """Commands run before anything else (outside any container): the type's own list
    replaces the top-level one."""
    own = _entry(cluster, node_type).initialization_commands
    return list(own if own is not None else cluster.initialization_commands or [])


def _first_image(value: str | list[str] | None) -> str | None:
    # Some files write a type's worker_image as a one-item list.
    if isinstance(value, list):
        return value[0] if value else None
    return value


def docker_settings(cluster: Cluster, node_type: str, *, head: bool = False) -> dict[str, Any]:
    """The container a node runs in, ``{}`` for none.

    A node type's keys (``worker_image``, ``pull_before_run``, ``worker_run_options``; written
    on the type or under its ``docker``) override the top-level ``docker`` ones. The run
    options are the top-level ``run_options`` followed by the head's or the worker's own.
    """
    if cluster.docker is None:
        return {}
    merged: dict[str, Any] = cluster.docker.model_dump(exclude_none=True)
    if not head:
        nt = _entry(cluster, node_type)
        legacy = {
            "worker_image": _first_image(nt.worker_image),
            "pull_before_run": nt.pull_before_run,
            "worker_run_options": nt.worker_run_options,
        }
        merged.update({k: v for k, v in legacy.items() if v is not None})
        if nt.docker is not None:
            merged.update(nt.docker.model_dump(exclude_none=True))
    role = "head" if head else "worker"
    image = merged.get(f"{role}_image") or merged.get("image")
    if not image:
        return {}
    out: dict[str, Any] = {
        "image": image,
        "container_name": merged.get("container_name"),
        "pull_before_run": merged.get("pull_before_run", True),
        "run_options": list(merged.get("run_options", []))
        + list(merged.get(f"{role}_run_options", [])),
    }
    for flag in ("disable_automatic_runtime_detection", "disable_shm_size_detection", "use_podman"):
        if flag in merged:
            out[flag] = merged[flag]
    return out


class LaunchConfig(BaseModel):
    """Everything a node of one type is started with: what the execution step needs."""

    node_type: str
    head: bool
    node_config: dict[str, Any]
    initialization_commands: list[str]
    setup_commands: list[str]
    docker: dict[str, Any]
    launch_hash: str


def launch_config(cluster: Cluster, node_type: str, *, head: bool = False) -> LaunchConfig:
    """A node type's launch settings (KeyError for a type the file lacks)."""
    nt = _entry(cluster, node_type)
    return LaunchConfig(
        node_type=node_type,
        head=head,
        node_config=dict(nt.node_config),
        initialization_commands=initialization_commands(cluster, node_type),
        setup_commands=setup_commands(cluster, node_type, head=head),
        docker=docker_settings(cluster, node_type, head=head),
        launch_hash=launch_hash(nt.node_config, _auth(cluster)),
    )
