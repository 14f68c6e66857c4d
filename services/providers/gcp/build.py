"""The gcp cloud's builder (its provider from the settings) and its registry entry
(``CLOUD``: the registry takes it for each cloud of ``shared/clouds.SHIPPED_CLOUDS``). The
provider, and google-cloud-compute, load when the builder
is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.services.providers.cloud import Cloud
from corral.services.settings import gcp_credentials_hint

if TYPE_CHECKING:
    from corral.services.providers.base import CloudCheck, Provider
    from corral.services.settings import Settings


def build(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    """Compute Engine; anonymous credentials for an emulator; its machines boot the node
    agent when the settings name the API they report to (preemption notices read from the
    metadata server)."""
    from corral.services.providers.gcp.instance_body import DEFAULT_GPU_IMAGE, DEFAULT_IMAGE
    from corral.services.providers.gcp.provider import GcpProvider
    from corral.services.providers.nodes import node_agents_for, node_book_for

    credentials = None
    if settings.gcp_anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return GcpProvider(
        settings.gcp_project,
        api_endpoint=settings.gcp_api_endpoint,
        credentials=credentials,
        nodes=node_agents_for(settings, "gcp", notice="gce-metadata"),
        image=settings.gcp_default_image or DEFAULT_IMAGE,
        gpu_image=settings.gcp_default_gpu_image or DEFAULT_GPU_IMAGE,
        log_book=node_book_for(settings),
        poll_interval_s=settings.timers.cloud_poll_interval_s,
    )


def _check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    """``corral check`` of the gcp cloud (its SDK loaded when asked)."""
    from corral.services.providers.gcp.check import check

    return check(build(settings, local_cloud))  # type: ignore[arg-type]


CLOUD = Cloud(build, gcp_credentials_hint, display_name="GCP", check=_check)
