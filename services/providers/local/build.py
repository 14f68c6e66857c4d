"""How the registry builds the local cloud's provider from the settings: the package's
own builder (``registry.CLOUDS["local"]`` names it). The provider, and its Redis records,
load when it is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.providers.base import Provider
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
