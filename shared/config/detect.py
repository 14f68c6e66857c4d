"""Tell which kind of user file a document is, and load it as that kind.

Each kind has keys no other kind uses at the top level (``machine_types``, ``resource_pools``,
``available_node_types``, ``run``, ...). :func:`detect_kind` counts them and picks the kind with
the most; a tie or no hit is "unknown", and the caller names the kind itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..configio import (  # check_problems and load_as are read from here too
    ConfigError,
    Document,
    check_problems,
    load_as,
    load_file,
    validate_doc,
)

__all__ = [
    "KINDS",
    "MODELS",
    "Loaded",
    "check_problems",
    "detect_kind",
    "load_as",
    "load_config",
    "unknown_kind",
    "validate_as",
]
from . import words
from .base import ignored_notices
from .cluster import Cluster
from .compute_config import ComputeConfig
from .localcloud import LocalCloud
from .machine_pool import MachinePool
from .master_config import MasterConfig
from .task import Task

KINDS = ("machine_pool", "compute_config", "master_config", "task", "cluster", "local_cloud")

MODELS: dict[str, type[BaseModel]] = {
    "machine_pool": MachinePool,
    "compute_config": ComputeConfig,
    "master_config": MasterConfig,
    "task": Task,
    "cluster": Cluster,
    "local_cloud": LocalCloud,
}


# Top-level keys that point at a kind. A key two kinds share (Ray's and SkyPilot's
# file_mounts) counts for both; the kind with more hits wins.
_MARKERS: dict[str, frozenset[str]] = {
    "machine_pool": frozenset({"kind", "machine_types"}),
    "compute_config": words(
        """flags min_resources max_resources auto_select_worker_config enable_cross_zone_scaling
        cloud_resource idle_termination_minutes maximum_uptime_minutes"""
    ),
    "master_config": words(
        """resource_manager resource_pools additional_resource_managers provisioner scheduler db
        checkpoint_storage task_container_defaults telemetry security tensorboard_timeout
        notebook_timeout retention_policy observability webhooks reserved_ports"""
    ),
    "task": words(
        """run setup resources num_nodes envs workdir secrets service file_mounts workload_type
        compute_config scheduling event_callback volumes config"""
    ),
    "cluster": words(
        """cluster_name available_node_types head_node_type worker_default_node_type
        setup_commands head_setup_commands worker_setup_commands initialization_commands
        head_start_ray_commands worker_start_ray_commands upscaling_speed idle_timeout_minutes
        auth docker max_workers min_workers file_mounts cluster_synced_files rsync_exclude
        rsync_filter file_mounts_sync_continuously no_restart"""
    ),
    "local_cloud": frozenset({"instance_types", "regions", "reservations", "aliases"}),
}


def _node_shape_hits(data: Mapping[str, Any]) -> dict[str, int]:
    """``head_node``/``worker_nodes`` exist in both Anyscale (a list of groups with
    ``instance_type``) and legacy Ray (provider node-config blobs): tell them apart by shape."""
    hits = {"compute_config": 0, "cluster": 0}
    workers = data.get("worker_nodes")
    head = data.get("head_node")
    if isinstance(workers, list):
        hits["compute_config"] += 1
    elif isinstance(workers, Mapping):
        hits["cluster"] += 1
    if isinstance(head, Mapping):
        hits["compute_config" if "instance_type" in head else "cluster"] += 1
    if isinstance(data.get("provider"), Mapping):
        hits["cluster"] += 1  # a top-level provider mapping is Ray's
    return hits


def detect_kind(data: object) -> str | None:
    """The kind of a parsed file, by its distinctive top-level keys; None when unclear."""
    if not isinstance(data, Mapping) or not data:
        return None
    keys = {k for k in data if isinstance(k, str)}
    scores = {kind: len(keys & markers) for kind, markers in _MARKERS.items()}
    for kind, extra in _node_shape_hits(data).items():
        scores[kind] += extra
    if "name" in keys and not any(scores.values()):
        scores["task"] += 1  # a task may be just its name
    best = max(scores.values())
    winners = [kind for kind, score in scores.items() if score == best]
    return winners[0] if best > 0 and len(winners) == 1 else None


@dataclass
class Loaded:
    """A file read and validated as one kind, with its not-acted-on notices."""

    kind: str
    model: BaseModel
    doc: Document
    notices: list[str] = field(default_factory=list)


def unknown_kind(doc: Document) -> ConfigError:
    """The error for a file whose kind cannot be told: it lists the kinds."""
    return ConfigError.single(
        doc.name,
        "cannot tell what kind of file this is; expected one of "
        f"{', '.join(KINDS)} (name it with --kind)",
    )


def validate_as(doc: Document, kind: str) -> Loaded:
    """Validate an already parsed document as ``kind``; raises ConfigError."""
    if kind not in MODELS:
        raise ConfigError.single(
            doc.name, f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}"
        )
    if not isinstance(doc.data, Mapping):
        found = "an empty file" if doc.data is None else f"a {type(doc.data).__name__}"
        raise ConfigError.single(doc.name, f"expected a mapping of fields, found {found}", "", 1)
    model = validate_doc(MODELS[kind], doc)
    check_problems(model, doc)
    return Loaded(kind, model, doc, sorted(ignored_notices(model, doc), key=_line_key(doc)))


def _line_key(doc: Document) -> Callable[[str], int]:
    """Sort notices (``FILE:LINE: ...``) in file order."""
    prefix = f"{doc.name}:"

    def key(notice: str) -> int:
        digits = notice[len(prefix) :].split(":", 1)[0] if notice.startswith(prefix) else ""
        return int(digits) if digits.isdigit() else 0

    return key


def load_config(path: str | Path, kind: str | None = None) -> Loaded:
    """Read a YAML or JSON file, tell its kind (unless given) and validate it."""
    doc = load_file(path)
    chosen = kind if kind is not None else detect_kind(doc.data)
    if chosen is None:
        raise unknown_kind(doc)
    return validate_as(doc, chosen)
