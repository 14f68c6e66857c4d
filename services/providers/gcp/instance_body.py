"""One Compute Engine instance as Corral asks for it: its name, labels and insert body.

Pure functions of a :class:`LaunchSpec`: nothing here calls the API. GCP's rules: instance
names match ``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``; label keys and values hold lowercase letters,
digits, ``-`` and ``_``, at most 63 characters (a key starts with a letter).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import TYPE_CHECKING

from google.protobuf.json_format import ParseError

from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    LaunchSpec,
    blind_boot_lines,
)
from corral.shared.errors import InvalidRequestError

if TYPE_CHECKING:
    from google.cloud import compute_v1
else:  # the SDK loads when first used (see compute_sdk)
    from corral.services.providers.gcp import compute_sdk as compute_v1

# The images a launch boots when neither the task (resources.image_id) nor the seed's boot disk
# names one: Debian's public family, and for GPU machines a family of Google's Deep Learning VM
# images (NVIDIA driver, CUDA, Docker with the NVIDIA toolkit; the driver installs at first
# boot when the metadata asks for it).
DEFAULT_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
DEFAULT_GPU_IMAGE = (
    "projects/deeplearning-platform-release/global/images/family/"
    "common-cu128-ubuntu-2204-nvidia-570"
)
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
REQUEST_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "gcp.providers.corral")
# N1 types get their GPUs attached (the catalog names the offering by the N1 type); A2, A3
# and G2 types come with theirs built in.
N1_ACCELERATORS: dict[str, str] = {
    "T4": "nvidia-tesla-t4",
    "V100": "nvidia-tesla-v100",
    "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4",
}
BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")
_LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}")
_LABEL_KEY_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")


# --- names and labels (GCP's character rules) ----------------------------------------------
def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def label_value(text: str) -> str:
    """``text`` as a GCP label value (lowercase letters, digits, ``-``, ``_``; at most 63):
    kept when valid, else cleaned and suffixed with a hash so distinct texts stay distinct."""
    if _LABEL_VALUE_RE.fullmatch(text):
        return text
    return f"{re.sub(r'[^a-z0-9_-]', '_', text.lower())[:54]}-{_digest(text)}"


def label_key(text: str) -> str:
    """``text`` as a GCP label key: as :func:`label_value`, starting with a letter."""
    if _LABEL_KEY_RE.fullmatch(text):
        return text
    cleaned = re.sub(r"[^a-z0-9_-]", "_", text.lower())
    return f"k{cleaned[:53]}-{_digest(text)}"


def instance_name(attempt_id: str, node: str) -> str:
    """The instance name of node ``node`` of an attempt, the same on every redelivery. It
    matches ``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``; the hash keeps cleaned ids apart."""
    slug = re.sub(r"[^a-z0-9]+", "-", attempt_id.lower()).strip("-")[:36]
    node_part = re.sub(r"[^a-z0-9]+", "-", node.lower()).strip("-")[:8] or "0"
    return "-".join(p for p in ("corral", slug, _digest(attempt_id), node_part) if p)


def insert_request_id(attempt_id: str, node: str) -> str:
    """The insert's ``requestId``: a UUID fixed by the attempt and node."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, f"{attempt_id}/{node}"))


def node_labels(spec: LaunchSpec, node: str) -> dict[str, str]:
    """Corral's labels on one node, over the spec's own tags."""
    tags = {
        **spec.tags,
        TAG_MANAGED: "true",
        TAG_REQUEST: spec.request_id,
        TAG_ATTEMPT: spec.attempt_id,
        TAG_NODE: node,
    }
    return {label_key(k): label_value(v) for k, v in tags.items()}


def nodes_of(spec: LaunchSpec) -> list[str]:
    """The node indexes an attempt launches. A one-node launch may replace a given node of a
    request: its ``corral-node`` tag says which."""
    if spec.count == 1:
        return [spec.tags.get(TAG_NODE, "0")]
    return [str(i) for i in range(spec.count)]


def _zonal(ref: str, zone: str, kind: str) -> str:
    """A bare name (``pd-ssd``, as instance templates write it) as a zonal partial URL."""
    return ref if "/" in ref else f"zones/{zone}/{kind}/{ref}"


def instance_body(
    spec: LaunchSpec, node: str, name: str, image: str, boot: str | None = None
) -> compute_v1.Instance:
    """The insert body: the seed's ``instanceProperties`` with Corral's fields over it.
    ``boot``: the startup-script to use (the node agent's) instead of the blind one."""
    inst = _seed(spec)
    inst.name = name
    inst.machine_type = f"zones/{spec.zone}/machineTypes/{spec.instance_type}"
    inst.labels = {**dict(inst.labels), **node_labels(spec, node)}
    _set_market(inst, spec)
    _set_accelerators(inst, spec)
    if spec.image_id:
        image = spec.image_id  # as the task wrote it: an image, a family, or their URLs
        for disk in inst.disks:
            if disk.boot:
                disk.initialize_params.source_image = image
    if not inst.disks:
        inst.disks = [
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=image),
            )
        ]
    for disk in inst.disks:
        if disk.initialize_params.disk_type:
            params = disk.initialize_params
            params.disk_type = _zonal(params.disk_type, spec.zone, "diskTypes")
    if not inst.network_interfaces:
        nat = compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")
        inst.network_interfaces = [
            compute_v1.NetworkInterface(network="global/networks/default", access_configs=[nat])
        ]
    script = boot if boot is not None else startup_script(spec, node, name)
    if script is not None:
        items = [i for i in inst.metadata.items if i.key != "startup-script"]
        items.append(compute_v1.Items(key="startup-script", value=script))
        inst.metadata.items = items
    if "deeplearning-platform-release" in image and not any(
        i.key == "install-nvidia-driver" for i in inst.metadata.items
    ):
        inst.metadata.items = [
            *inst.metadata.items,
            compute_v1.Items(key="install-nvidia-driver", value="True"),
        ]
    return inst


def check_spec(spec: LaunchSpec) -> None:
    if spec.cloud != "gcp":
        raise InvalidRequestError(f"cloud {spec.cloud!r} sent to the GCP provider")
    if spec.count < 1:
        raise InvalidRequestError(f"count must be at least 1, got {spec.count}")
    if spec.zone.rsplit("-", 1)[0] != spec.region:
        raise InvalidRequestError(f"zone {spec.zone} is not in region {spec.region}")
    if spec.market not in ("on_demand", "spot", "reserved"):
        raise InvalidRequestError(f"unknown market {spec.market!r}")


def _seed(spec: LaunchSpec) -> compute_v1.Instance:
    """``advanced_instance_config.instanceProperties`` (either spelling) as an Instance."""
    cfg = spec.advanced_instance_config
    props = cfg.get("instanceProperties", cfg.get("instance_properties", {}))
    if not isinstance(props, dict):
        raise InvalidRequestError("advanced_instance_config.instanceProperties must be a mapping")
    try:
        inst: compute_v1.Instance = compute_v1.Instance.from_json(
            json.dumps(props), ignore_unknown_fields=True
        )
    except (ParseError, ValueError, TypeError) as exc:
        raise InvalidRequestError(
            f"advanced_instance_config.instanceProperties: {exc}", code="BadInstanceProperties"
        ) from None
    return inst


def _set_market(inst: compute_v1.Instance, spec: LaunchSpec) -> None:
    """Spot scheduling, or a specific reservation (from the spec, else from the seed)."""
    sched = inst.scheduling
    if spec.market == "spot":
        sched.provisioning_model = "SPOT"
        # Corral treats a reclaimed spot VM as lost and relaunches: a stopped one would only
        # keep its disk billing.
        sched.instance_termination_action = "DELETE"
        sched.automatic_restart = False
        sched.on_host_maintenance = "TERMINATE"
    else:
        sched.provisioning_model = "STANDARD"
    if spec.reservation_id:
        inst.reservation_affinity = compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key=RESERVATION_KEY,
            values=[spec.reservation_id],
        )
    elif spec.market == "reserved" and not inst.reservation_affinity.values:
        raise InvalidRequestError(
            "market 'reserved' needs a reservation: LaunchSpec.reservation_id or "
            "advanced_instance_config.instanceProperties.reservationAffinity"
        )


def _set_accelerators(inst: compute_v1.Instance, spec: LaunchSpec) -> None:
    """Attach N1 GPUs (from the seed's guestAccelerators, else the spec's accelerators); GPU
    machines cannot live-migrate, so they stop for host maintenance."""
    wanted: dict[str, int] = dict(getattr(spec, "accelerators", None) or {})
    if not inst.guest_accelerators and wanted and spec.instance_type.startswith("n1-"):
        configs = []
        for gpu, count in wanted.items():
            kind = N1_ACCELERATORS.get(gpu.upper())
            if kind is None:
                raise InvalidRequestError(f"{gpu} cannot be attached to {spec.instance_type}")
            configs.append(
                compute_v1.AcceleratorConfig(accelerator_type=kind, accelerator_count=count)
            )
        inst.guest_accelerators = configs
    for acc in inst.guest_accelerators:
        acc.accelerator_type = _zonal(acc.accelerator_type, spec.zone, "acceleratorTypes")
    if inst.guest_accelerators or spec.instance_type.startswith(BUILT_IN_GPU_FAMILIES):
        inst.scheduling.on_host_maintenance = "TERMINATE"


def startup_script(spec: LaunchSpec, node: str, name: str) -> str | None:
    """What the node runs at boot (setup, then run), or None when the spec runs nothing."""
    if not (spec.setup or spec.run):
        return None
    envs = {
        **spec.envs,
        "CORRAL_INSTANCE_ID": name,
        "CORRAL_NODE_RANK": node,
        "CORRAL_NUM_NODES": str(spec.count),
    }
    return "\n".join(["#!/bin/bash", "set -e", *blind_boot_lines(spec, envs, node)]) + "\n"


def label_filter(labels: dict[str, str]) -> str:
    """``(labels.k = "v") (labels.k2 = "v2")``: the API ANDs the parenthesised terms."""
    terms = [f'(labels.{label_key(k)} = "{label_value(v)}")' for k, v in sorted(labels.items())]
    return " ".join(terms)


def has_labels(inst: compute_v1.Instance, labels: dict[str, str]) -> bool:
    have = inst.labels
    return all(have.get(label_key(k)) == label_value(v) for k, v in labels.items())
