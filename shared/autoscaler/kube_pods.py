"""Ray cluster files written for ``provider: type: kubernetes``: each node type's ``node_config``
is a pod manifest (Ray's legacy Kubernetes provider: ``apiVersion: v1``, ``kind: Pod``,
``metadata.generateName``, ``spec.containers`` with ``resources``; or the same under a ``pod``
key, as Ray's ingress example writes it).

- :func:`pod_of`: the pod a node config holds, or the problem with it (a path and a message).
- :func:`pod_resources`: a node type's resources as Ray's legacy provider detects them from
  the first container: CPU and GPU the smaller of its request and limit, rounded up (Ray has no
  fractional CPU); ``memory`` from the memory limit (else the request), of which the object
  store takes its share, as on every other cloud here.
- :func:`pod_patch`: the pod as Corral launches it: the node's container keeps its name,
  image, ports, env and resources as written; its ``command``/``args`` (Ray's keep-alive
  ``sleep infinity``, there so Ray could ``kubectl exec`` its steps into the pod) give way to
  Corral's node agent, which runs the same launcher steps as the container's process.

Pure: no API call, no Kubernetes client.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from typing import Any

from ..configio import PathKey

GPU_RESOURCE = "nvidia.com/gpu"
# The annotation that tells the Kubernetes provider which container is the machine's (the one
# its agent runs in): the node config's first container, by the name the file gave it.
CONTAINER_ANNOTATION = "corral.dev/container"
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_FACTORS = {
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (``500m`` = 0.5, ``2Gi`` = 2 * 2**30, ``4`` = 4);
    ValueError for anything else."""
    text = str(value).strip()
    found = _QUANTITY.match(text)
    if found is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (expected 500m, 2, 4Gi, ...)")
    return float(found[1]) * _FACTORS.get(found[2] or "", 1.0)


Problem = tuple[PathKey, str]


def pod_of(node_config: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Problem | None]:
    """The pod manifest a node config holds (itself, or its ``pod``), or why it is none. The
    problem's path is relative to the node config."""
    wrapped = "pod" in node_config and isinstance(node_config.get("pod"), Mapping)
    pod = node_config["pod"] if wrapped else node_config
    base: PathKey = ("pod",) if wrapped else ()
    kind = pod.get("kind", "Pod")
    if kind != "Pod":
        return None, ((*base, "kind"), f"expected Pod (a pod manifest), got {kind!r}")
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None, ((*base,), "expected a pod manifest with a spec (spec.containers)")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], Mapping):
        return None, ((*base, "spec", "containers"), "expected a list of at least one container")
    if not containers[0].get("name"):
        return None, ((*base, "spec", "containers", 0, "name"), "the container needs a name")
    return copy.deepcopy(dict(pod)), None


def _amount(resources: Mapping[str, Any], field: str, key: str) -> float | None:
    value = (resources.get(field) or {}).get(key)
    return None if value is None else quantity(value)


def _smaller(resources: Mapping[str, Any], key: str) -> float | None:
    """Ray's reading: the smaller of request and limit; None when neither is written."""
    found = [
        v for v in (_amount(resources, f, key) for f in ("requests", "limits")) if v is not None
    ]
    return min(found) if found else None


def pod_resources(pod: Mapping[str, Any]) -> tuple[float, float, int]:
    """(CPUs, memory GiB, GPUs) of a pod's first container, as Ray's legacy Kubernetes provider
    reads them. ValueError names the field of a malformed quantity."""
    container = pod["spec"]["containers"][0]
    resources = container.get("resources") or {}
    try:
        cpus = _smaller(resources, "cpu")
        gpus = _smaller(resources, GPU_RESOURCE)
        memory = _amount(resources, "limits", "memory")
        if memory is None:
            memory = _amount(resources, "requests", "memory")
    except ValueError as exc:
        raise ValueError(f"spec.containers[0].resources: {exc}") from None
    return (
        float(math.ceil(cpus)) if cpus else 0.0,
        (memory or 0.0) / 2**30,
        math.ceil(gpus) if gpus else 0,
    )


def pod_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as the launch's ``advanced_instance_config``: the file's pod, less what Corral
    sets itself (its name and namespace: from the node's id and ``provider.namespace``), with
    its first container named as the machine's container and freed of Ray's keep-alive
    command, so Corral's node agent is the container's process."""
    out = copy.deepcopy(dict(pod))
    meta = dict(out.get("metadata") or {})
    for key in ("name", "generateName", "namespace"):
        meta.pop(key, None)
    container = out["spec"]["containers"][0]
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        CONTAINER_ANNOTATION: container["name"],
    }
    out["metadata"] = meta
    for key in ("command", "args"):
        container.pop(key, None)
    return out
