"""The pod a Determined pool under ``resource_manager: type: kubernetes`` runs as an agent:
the smallest node shape of its namespace that holds the pool's ``max_slots_per_pod``, the
pool's pod template (``gpu_pod_spec`` or ``cpu_pod_spec``) with Determined's container name
read as Corral's, and the slots as the container's requests on top (GPUs as
``nvidia.com/gpu``, a CPU slot as ``slot_resource_requests.cpu`` CPUs)."""

from __future__ import annotations

from typing import Any

from corral.services.providers.kubernetes.pods import CONTAINER, GPU
from corral.services.runtime.deps import Deps
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.merge import merge_advanced_instance_config

DETERMINED_CONTAINER = "determined-container"  # the container Determined's pod specs name


def kube_template(deps: Deps, provider: dict[str, Any]) -> LaunchTemplate | str:
    """The launch template of one pod of this pool, or why there is none."""
    namespace = str(provider.get("namespace") or "default")
    slots = int(provider.get("instance_slots") or 0)
    gpu = provider.get("slot_type") == "gpu" and slots > 0
    cpus_needed = slots * float(provider.get("cpu_per_slot") or 1.0) if not gpu else 0.0
    shapes = [
        o
        for o in deps.provider("kubernetes").offerings()
        if o.zone == namespace
        and (o.accelerator_count >= slots if gpu else (o.vcpus >= cpus_needed))
    ]
    if not shapes:
        what = f"{slots} GPU(s)" if gpu else f"{cpus_needed:g} CPU(s)"
        return f"no node of the cluster holds a pod of {what} in namespace {namespace!r}"
    shape = min(shapes, key=lambda o: (o.accelerator_count, o.vcpus, o.memory_gib))
    # A GPU pod asks for its slots' share of the node's CPUs and memory; a CPU pod for its
    # slots' CPUs (one for a pod of zero-slot tasks) and the memory that goes with them.
    cpu = shape.vcpus * slots / shape.accelerator_count if gpu else max(cpus_needed, 1.0)
    memory_mib = int(shape.memory_gib * 1024 * cpu / shape.vcpus)
    resources: dict[str, Any] = {
        "requests": {"cpu": f"{int(cpu * 1000)}m", "memory": f"{memory_mib}Mi"},
        "limits": {"memory": f"{memory_mib}Mi"},
    }
    if gpu:
        resources["limits"][GPU] = str(slots)
    if not gpu and shape.accelerator_count:
        resources["limits"][GPU] = "0"  # a CPU pod on a GPU node takes none of its GPUs
    ours = {"spec": {"containers": [{"name": CONTAINER, "resources": resources}]}}
    config = merge_advanced_instance_config(
        "kubernetes", _as_corral(dict(provider.get("pod_spec") or {})), ours
    )
    return LaunchTemplate(
        instance_type=shape.instance_type, advanced_instance_config=config, zones=[namespace]
    )


def _as_corral(pod: dict[str, Any]) -> dict[str, Any]:
    """Determined's pod spec with its task container (``determined-container``) named as
    Corral's, so that the template's settings for it merge into the container Corral runs."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    containers = [
        {**c, "name": CONTAINER}
        if isinstance(c, dict) and c.get("name") == DETERMINED_CONTAINER
        else c
        for c in spec.get("containers") or []
    ]
    return {**pod, "spec": {**spec, "containers": containers}} if containers else pod
