"""The one registry of clouds and their providers: how each cloud's provider is built from the
settings. Which clouds exist is :data:`corral.shared.clouds.PROVIDER_CLOUDS`; this maps each
to its package, imported on first use (cloud SDKs load lazily)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.services.providers.base import Provider
from corral.services.settings import Settings
from corral.shared.clouds import PROVIDER_CLOUDS
from corral.shared.liveness import outage_gap_s


class ProviderUnavailable(LookupError):
    """Corral has no provider for this cloud in this installation."""


def _local(settings: Settings, local_cloud: Any) -> Provider:
    from corral.services.providers.local.provider import LocalProvider

    return LocalProvider(
        local_cloud,
        settings.redis_url or "",
        prefix=settings.prefix,
        log_dir=settings.logs,
        heartbeat_timeout_s=settings.timers.heartbeat_timeout_s,
        redis_patience_s=settings.timers.redis_patience_s,
        outage_gap_s=outage_gap_s(
            settings.timers.outage_gap_s, settings.timers.heartbeat_timeout_s
        ),
    )


def _node_agents(settings: Settings, cloud: str) -> Any:
    """The node agents cloud machines boot, when the settings say where they report."""
    if not settings.node_api_url or not settings.redis_url:
        return None
    from corral.services.providers.nodes import NodeAgents
    from corral.services.state.nodes import NodeBook
    from corral.services.queues.redis_conn import connect

    client = connect(settings.redis_url, patience_s=settings.timers.redis_patience_s)
    book = NodeBook.for_settings(client, settings)
    return NodeAgents(cloud, book, settings.node_api_url, source=settings.node_agent_source)


def _aws(settings: Settings, local_cloud: Any) -> Provider:
    from corral.services.providers.aws.provider import AwsProvider

    return AwsProvider(
        endpoint_url=settings.aws_endpoint_url,
        default_image_id=settings.aws_default_image_id,
        nodes=_node_agents(settings, "aws"),
    )


def _gcp(settings: Settings, local_cloud: Any) -> Provider:
    from corral.services.providers.gcp.provider import GcpProvider

    credentials = None
    if settings.gcp_anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return GcpProvider(
        settings.gcp_project,
        api_endpoint=settings.gcp_api_endpoint,
        credentials=credentials,
        nodes=_node_agents(settings, "gcp"),
    )


# cloud -> builder(settings, the local cloud's file as loaded)
BUILDERS: dict[str, Callable[[Settings, Any], Provider]] = {
    "local": _local,
    "aws": _aws,
    "gcp": _gcp,
}
assert set(BUILDERS) == set(PROVIDER_CLOUDS), "every provider cloud needs a builder"


def build_provider(cloud: str, settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    """The provider for ``cloud``; ``local_cloud`` loads the local cloud's file when needed."""
    builder = BUILDERS.get(cloud)
    if builder is None:
        raise ProviderUnavailable(f"Corral has no provider for cloud {cloud!r}")
    return builder(settings, local_cloud() if cloud == "local" else None)
