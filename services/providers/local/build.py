"""The local cloud's builder (its provider from the settings) and its registry entry
(``CLOUD``: the registry takes it for each cloud of ``shared/clouds.SHIPPED_CLOUDS``). The
provider, and its Redis records, load when the builder
is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.services.providers.cloud import Cloud
from corral.services.providers.cluster_files import ClusterFiles

if TYPE_CHECKING:
    from corral.services.providers.base import CloudCheck, Provider
    from corral.services.settings import Settings


def build(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    """Processes on this host, from the local cloud's file (``local_cloud`` loads it), its
    records in the settings' Redis."""
    from corral.services.providers.local.provider import LocalProvider
    from corral.shared.liveness import outage_gap_s

    return LocalProvider(
        local_cloud(),
        settings.redis_url or "",
        prefix=settings.prefix,
        log_dir=settings.logs,
        bundle_store=settings.bundle_store_url,
        bundle_store_endpoint=settings.aws_endpoint_url,
        heartbeat_timeout_s=settings.timers.heartbeat_timeout_s,
        redis_patience_s=settings.timers.redis_patience_s,
        outage_gap_s=outage_gap_s(
            settings.timers.outage_gap_s, settings.timers.heartbeat_timeout_s
        ),
        machines_dir=settings.local_machines,
        task_uid=local_task_uid(settings),
    )


def local_task_uid(settings: Settings) -> int | None:
    """The uid local tasks run as: their own when Corral runs as root (unless the settings
    say Corral's), else None (Corral's user; only root may run a process as another)."""
    import os

    from corral.services.providers.local.folders import task_uid_base

    if settings.local_tasks_run_as != "own-user" or os.geteuid() != 0:
        return None
    return task_uid_base(settings.prefix)


def _check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    """``corral check`` of the local cloud: its file read, its processes possible."""
    from corral.services.providers.local.check import check

    return check(local_cloud())


def _local_files() -> ClusterFiles:
    from corral.services.providers.local.cluster_files import LocalClusterFiles

    return LocalClusterFiles()


CLOUD = Cloud(
    build,
    display_name="Local",
    types_from="the local cloud file",
    cluster_files=_local_files,
    check=_check,
)
