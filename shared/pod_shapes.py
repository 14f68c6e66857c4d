"""Kubernetes node shapes as Corral's instance types, and what a pod of a shape asks for.

An instance type on Kubernetes is a node shape, SkyPilot's spelling: ``4CPU--16GB`` or
``8CPU--32GB--T4:1`` (its nodes' allocatable cpu, memory and ``nvidia.com/gpu``, the GPU's
kind from a node label). A pod of a shape requests the shape's cpu and memory and limits its
GPUs (:func:`shape_resources`); a namespace's ResourceQuota counts those per resource
(:func:`quota_usage`, Kubernetes' "Resource Quotas" rules: ``cpu`` is ``requests.cpu``, an
extended resource such as ``nvidia.com/gpu`` is requested as much as it is limited).

The provider (``services/providers/kubernetes/``) writes its pods with these; the simulator
(:mod:`corral.shared.sim.pods`) schedules and admits its pods with the same numbers, so the two
cannot disagree about what a pod takes. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .autoscaler.kube_pods import GPU_RESOURCE, quantity
from .catalog.offering import Offering
from .errors import InvalidRequestError

_SHAPE = re.compile(r"^(\d+(?:\.\d+)?)CPU--(\d+(?:\.\d+)?)GB(?:--([A-Za-z0-9-]+):(\d+))?$")

# The ResourceQuota resources a pod of Corral's counts against (what quota_usage fills in).
QUOTA_RESOURCES: tuple[str, ...] = (
    "cpu",
    "requests.cpu",
    "memory",
    "requests.memory",
    "limits.memory",
    f"requests.{GPU_RESOURCE}",
    "pods",
    "count/pods",
)


def shape_name(cpus: float, memory_gib: float, accelerator: str | None, count: int) -> str:
    """The instance type of a node shape: ``4CPU--16GB`` or ``8CPU--32GB--T4:1``."""
    base = f"{cpus:g}CPU--{memory_gib:g}GB"
    return f"{base}--{accelerator}:{count}" if accelerator and count else base


def shape_offerings(
    cloud: str,
    context: str,
    namespaces: Iterable[str],
    instance_type: str,
    *,
    cpus: float,
    memory_gib: float,
    accelerator: str | None,
    accelerator_count: int,
) -> list[Offering]:
    """A context's node shape as the planner's offerings: one per namespace (Corral's zones),
    priced 0 (the cluster is paid for already, so the planner tries it before any cloud), on
    demand only. The provider lists its contexts' shapes with it and the simulator its
    scenario's, so the two cannot offer a shape apart."""
    return [
        Offering(
            cloud=cloud,
            instance_type=instance_type,
            accelerator=accelerator,
            accelerator_count=accelerator_count,
            vcpus=cpus,
            memory_gib=memory_gib,
            price_usd_per_hour=0.0,
            spot_price_usd_per_hour=None,
            region=context,
            zone=namespace,
        )
        for namespace in namespaces
    ]


def parse_shape(instance_type: str) -> tuple[float, float, str | None, int]:
    """(cpus, memory GiB, accelerator, count) of an instance type; InvalidRequestError for
    anything else."""
    m = _SHAPE.match(instance_type)
    if m is None:
        raise InvalidRequestError(
            f"instance type {instance_type!r} is not a Kubernetes shape "
            "(expected 4CPU--16GB or 8CPU--32GB--T4:1)"
        )
    return float(m[1]), float(m[2]), m[3], int(m[4] or 0)


def shape_resources(
    instance_type: str, accelerators: Mapping[str, int] | None = None
) -> dict[str, dict[str, str]]:
    """The container ``resources`` of a pod of this shape: the shape's cpu and memory
    requested (memory limited too), its GPUs limited (the launch's own count of the shape's
    accelerator when it asks one, else the shape's)."""
    cpus, memory_gib, accelerator, count = parse_shape(instance_type)
    count = (accelerators or {}).get(accelerator, count) if accelerator else 0
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": f"{cpus:g}", "memory": f"{memory_gib:g}Gi"},
        "limits": {"memory": f"{memory_gib:g}Gi"},
    }
    if count:
        resources["limits"][GPU_RESOURCE] = str(count)
    return resources


def quota_usage(resources: Mapping[str, Mapping[str, str]]) -> dict[str, float]:
    """What one pod with these container ``resources`` counts against a ResourceQuota, per
    resource name (cpu in cores, memory in bytes, GPUs and pods in units)."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    cpu = quantity(requests.get("cpu", limits.get("cpu", 0)))
    memory = quantity(requests.get("memory", limits.get("memory", 0)))
    gpus = quantity(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, 0)))
    return {
        "cpu": cpu,
        "requests.cpu": cpu,
        "memory": memory,
        "requests.memory": memory,
        "limits.memory": quantity(limits.get("memory", 0)),
        f"requests.{GPU_RESOURCE}": gpus,
        "pods": 1.0,
        "count/pods": 1.0,
    }
