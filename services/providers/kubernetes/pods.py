"""Pods as Corral's machines, written from a launch: names, labels, the shape an instance type
names, accelerator labels read from nodes, and what a pod's state means. Pure (no API call).

Where Kubernetes sits in Corral's places:

- a **region** is a kubeconfig context (``in-cluster`` for the cluster Corral runs in);
- a **zone** is a namespace of it (a ResourceQuota is per namespace: its refusal blocks the
  namespace, as a quota blocks a zone's scope);
- an **instance type** is a node shape, SkyPilot's spelling: ``4CPU--16GB`` or
  ``8CPU--32GB--T4:1``, listed live from the nodes (their allocatable cpu, memory and
  ``nvidia.com/gpu``); a node pool is the set of nodes of one shape and accelerator label.
  Its name, and what a pod of it asks for, are the core's (``shared/pod_shapes.py``): the
  simulator plays pods with the same numbers.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    LaunchSpec,
)
from corral.shared.autoscaler.kube_pods import CONTAINER_ANNOTATION
from corral.shared.errors import InvalidRequestError
from corral.shared.merge import MergeError, merge_advanced_instance_config
from corral.shared.pod_shapes import shape_resources

GPU = "nvidia.com/gpu"
CONTAINER = "corral"
TAGS_ANNOTATION = "corral.dev/tags"  # the launch's tags exactly (label values are cleaned)
TYPE_ANNOTATION = "corral.dev/instance-type"
# Images with Python (the node agent needs it): a slim Python for CPU pods, PyTorch's CUDA
# runtime image for GPU pods. resources.image_id (or CORRAL_KUBERNETES_DEFAULT_*) replaces them.
DEFAULT_IMAGE = "python:3.11-slim"
DEFAULT_GPU_IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"

# Node labels that name a GPU's kind: GKE's, NVIDIA's GPU feature discovery, Karpenter's on
# EKS, and Corral's own for any cluster (its value is Corral's accelerator name as written).
ACCELERATOR_LABELS = (
    "corral.dev/accelerator",
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.product",
    "karpenter.k8s.aws/instance-gpu-name",
)
_GPU_MODEL = re.compile(r"(B200|H200|H100|A100|A10G|A10|L40S|L4|T4|V100|P100|P4|K80)", re.I)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def accelerator_name(label_key: str, value: str) -> str | None:
    """Corral's name for the GPU a node label names (``nvidia-tesla-t4`` -> ``T4``,
    ``NVIDIA-A100-SXM4-80GB`` -> ``A100-80GB``); None when it names none Corral knows."""
    if label_key == "corral.dev/accelerator":
        return value or None
    found = _GPU_MODEL.search(value)
    if found is None:
        return None
    name = found.group(1).upper()
    return f"{name}-80GB" if name == "A100" and "80" in value else name


def pod_name(attempt_id: str, rank: int) -> str:
    """A DNS-1123 name from the attempt id and node rank: the same on every delivery, so a
    launch is idempotent (a taken name is this attempt's pod)."""
    clean = re.sub(r"[^a-z0-9-]", "-", attempt_id.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:8]
    return f"corral-{clean}-{digest}-{rank}"


def label_value(value: str) -> str:
    """A label value for ``value``: itself when Kubernetes takes it, else a short hash."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:20]


def pod_labels(tags: dict[str, str]) -> dict[str, str]:
    return {k: label_value(v) for k, v in tags.items()}


def label_selector(tags: dict[str, str]) -> str:
    return ",".join(f"{k}={label_value(v)}" for k, v in sorted(tags.items()))


def pod_manifest(
    spec: LaunchSpec,
    rank: int,
    *,
    namespace: str,
    script: str,
    image: str,
    accelerator_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The pod for node ``rank`` of a launch: the shape's requests, its GPUs and the node
    label of their kind, ``restartPolicy: Never`` (a machine that ends is not restarted: Corral
    relaunches), the launch's ``advanced_instance_config`` (a Pod or a PodSpec) merged in as a
    strategic merge patch, then Corral's own fields on top (name, labels, restart policy)."""
    resources = shape_resources(spec.instance_type, spec.accelerators)
    count = GPU in resources["limits"]
    tags = {**spec.tags, TAG_MANAGED: "true", TAG_NODE: str(rank)}
    tags.setdefault(TAG_REQUEST, spec.request_id)
    tags.setdefault(TAG_ATTEMPT, spec.attempt_id)
    base: dict[str, Any] = {
        "metadata": {"labels": {}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": container_name(spec.advanced_instance_config),
                    "image": image,
                    "command": ["/bin/sh", "-c", script],
                    "resources": resources,
                }
            ],
        },
    }
    if count and accelerator_selector:
        base["spec"]["nodeSelector"] = dict(accelerator_selector)
    patch = dict(spec.advanced_instance_config)
    if patch and "spec" not in patch and "metadata" not in patch:
        patch = {"spec": patch}  # a bare PodSpec
    try:
        pod = merge_advanced_instance_config("kubernetes", base, patch) if patch else base
    except MergeError as exc:
        raise InvalidRequestError(f"advanced_instance_config: {exc}") from None
    meta = pod.setdefault("metadata", {})
    meta.update(name=pod_name(spec.attempt_id, rank), namespace=namespace)
    meta["labels"] = {**(meta.get("labels") or {}), **pod_labels(tags)}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        TAGS_ANNOTATION: json.dumps(tags, sort_keys=True),
        TYPE_ANNOTATION: spec.instance_type,
    }
    pod["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def container_name(patch: Any) -> str:
    """The machine's container: ``corral``, or the name a Pod given whole asks for in its
    ``corral.dev/container`` annotation (a Ray cluster file's pod keeps its container's name;
    the patch's container then merges into Corral's rather than beside it)."""
    notes = ((patch or {}).get("metadata") or {}).get("annotations") or {}
    name = notes.get(CONTAINER_ANNOTATION)
    return str(name) if name else CONTAINER


def pod_state(pod: dict[str, Any]) -> tuple[str, int | None, str | None]:
    """(the port's state, the exit code once ended, why it cannot be scheduled) of a pod
    as the API returns it."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "terminating", None, None
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        code = None
        for cs in status.get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated") or {}
            if ended.get("exitCode") is not None:
                code = int(ended["exitCode"])
        return "terminated", code if code is not None else (0 if phase == "Succeeded" else 1), None
    if phase == "Running":
        return "running", None, None
    if phase == "Unknown":
        return "lost", None, None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return "pending", None, str(cond.get("message") or "Unschedulable")
    return "pending", None, None
