"""A Ray cluster file (``ray up``'s YAML): node types, autoscaling bounds, commands.

Node types live under ``available_node_types``; each has a provider-specific ``node_config``
(passed through untouched), the ``resources`` it offers, and its own worker bounds. The older
spelling with ``head_node`` / ``worker_nodes`` blobs is read too. Provider plugins define their
own keys, so unknown keys under ``provider`` pass through; everywhere else a typo is an error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from ..configio import PathKey
from . import one_of
from .base import PassThrough, StrictModel
from .compat.ray import ON_PREM_KEYS, ON_PREM_REFUSAL

Commands = list[str]


class ClusterProvider(PassThrough):
    """``provider``: a ``type`` and that provider's own keys (a plugin may add any)."""

    model_config = ConfigDict(extra="allow")

    type: str
    region: str | None = None
    availability_zone: str | None = None
    project_id: str | None = None
    namespace: str | None = None
    location: str | None = None
    resource_group: str | None = None
    module: str | None = None  # an external node provider's import path
    head_ip: str | None = None
    worker_ips: list[str] | None = None
    use_internal_ips: bool | None = None
    cache_stopped_nodes: bool | None = None
    disable_node_updaters: bool | None = None
    disable_launch_config_check: bool | None = None


class Auth(StrictModel):
    """How the cluster launcher logs into its nodes."""

    ssh_user: str | None = None
    ssh_private_key: str | None = None
    ssh_public_key: str | None = None
    ssh_proxy_command: str | None = None


class Docker(StrictModel):
    """Run every node's commands inside this container."""

    image: str | None = None
    container_name: str | None = None
    pull_before_run: bool | None = None
    run_options: list[str] | None = None
    head_image: str | None = None
    head_run_options: list[str] | None = None
    worker_image: str | None = None
    worker_run_options: list[str] | None = None
    disable_automatic_runtime_detection: bool | None = None
    disable_shm_size_detection: bool | None = None
    use_podman: bool | None = None


class NodeTypeDocker(StrictModel):
    """A node type's overrides of the top-level ``docker`` section."""

    worker_image: str | None = None
    pull_before_run: bool | None = None
    worker_run_options: list[str] | None = None


class NodeType(StrictModel):
    """One entry of ``available_node_types``."""

    # Per-type docker keys are kept in the node's launch config (the autoscaler merges them
    # over the top-level docker section), so none is ignored here.

    node_config: dict[str, Any]  # the provider's launch config, passed through
    resources: dict[str, float] | None = None  # the autoscaler fills CPU/GPU when absent
    labels: dict[str, str] | None = None
    min_workers: int | None = Field(None, ge=0)
    max_workers: int | None = Field(None, ge=0)
    idle_timeout_s: float | None = Field(None, ge=0)
    initialization_commands: Commands | None = None
    worker_setup_commands: Commands | None = None  # replaces the top-level lists for this type
    docker: NodeTypeDocker | None = None
    # Older docs put the per-type docker keys on the node type itself.
    worker_image: str | list[str] | None = None
    pull_before_run: bool | None = None
    worker_run_options: list[str] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> NodeType:
        if (
            self.min_workers is not None
            and self.max_workers is not None
            and self.max_workers < self.min_workers
        ):
            raise ValueError(
                f"max_workers ({self.max_workers}) is below min_workers ({self.min_workers})"
            )
        return self


class Cluster(StrictModel):
    """A Ray cluster launcher file."""

    cluster_name: str
    max_workers: int | None = Field(None, ge=0)  # workers (the head excluded), all types
    min_workers: int | None = Field(None, ge=0)  # deprecated: per-type min_workers now
    upscaling_speed: float | None = Field(None, ge=0)
    idle_timeout_minutes: float | None = Field(None, ge=0)
    provider: ClusterProvider
    auth: Auth | None = None
    docker: Docker | None = None
    available_node_types: dict[str, NodeType] | None = None
    head_node_type: str | None = None
    worker_default_node_type: str | None = None  # deprecated
    head_node: dict[str, Any] | None = None  # legacy: the head's node config
    worker_nodes: dict[str, Any] | None = None  # legacy: the workers' node config
    file_mounts: dict[str, str] | None = None
    cluster_synced_files: list[str] | None = None
    file_mounts_sync_continuously: bool | None = None
    rsync_exclude: list[str] | None = None
    rsync_filter: list[str] | None = None
    metadata: dict[str, Any] | None = None
    initialization_commands: Commands | None = None
    setup_commands: Commands | None = None
    head_setup_commands: Commands | None = None
    worker_setup_commands: Commands | None = None
    head_start_ray_commands: Commands | None = None
    worker_start_ray_commands: Commands | None = None
    no_restart: bool | None = None
    # Deprecated autoscaler knobs, still in the schema.
    initial_workers: int | None = Field(None, ge=0)
    autoscaling_mode: Annotated[
        Literal["default", "aggressive"] | None, BeforeValidator(one_of(("default", "aggressive")))
    ] = None
    target_utilization_fraction: float | None = Field(None, ge=0, le=1)

    def done_otherwise(self) -> list[tuple[PathKey, str]]:
        """``provider.cache_stopped_nodes``: Ray's AWS and GCP providers stop a worker they
        scale down and start it again to scale up, and Corral does so on AWS and Google Cloud;
        another provider's file that sets it gets its workers terminated. (An AWS or GCP file
        played on a cloud that cannot stop is told so at ``cluster up``.)"""
        if not self.provider.cache_stopped_nodes:
            return []
        if self.provider.type.lower() in ("aws", "gcp"):
            return []
        return [
            (
                ("provider", "cache_stopped_nodes"),
                f"accepted; the {self.provider.type} provider's machines are not stopped: "
                "Corral terminates the workers it scales down and launches new ones to scale up "
                "(workers are stopped and started again on AWS and Google Cloud)",
            )
        ]

    def problems(self) -> list[tuple[PathKey, str]]:
        """Cross-field mistakes, each with the path of the value at fault."""
        types = self.available_node_types or {}
        known = ", ".join(types) or "none defined"
        out: list[tuple[PathKey, str]] = []
        for key in ("head_node_type", "worker_default_node_type"):
            name = getattr(self, key)
            if name is not None and name not in types:
                out.append(((key,), f"names no node type; expected one of {known}"))
        if types and self.head_node_type is None:
            out.append(((), "head_node_type is required with available_node_types"))
        for key in ON_PREM_KEYS:
            if getattr(self.provider, key) is not None:
                out.append((("provider", key), ON_PREM_REFUSAL))
        return out

    def worker_bounds(self, node_type: str) -> tuple[int, int]:
        """``(min, max)`` workers of a type: a missing max falls back to the global one."""
        spec = (self.available_node_types or {})[node_type]
        global_max = self.max_workers if self.max_workers is not None else 2
        max_workers = spec.max_workers if spec.max_workers is not None else global_max
        return spec.min_workers or 0, max_workers
