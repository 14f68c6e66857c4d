"""How the registry builds the kubernetes cloud's provider from the settings: the package's
own builder (``registry.CLOUDS["kubernetes"]`` names it). The provider, and the kubernetes
client, load when it is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.providers.base import Provider
    from corral.services.settings import Settings


def build(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    """Pods as machines in the settings' contexts and namespaces; their agents report to the
    API when the settings name it."""
    from corral.services.providers.kubernetes.provider import KubernetesProvider
    from corral.services.providers.nodes import node_agents_for, node_book_for

    return KubernetesProvider(
        contexts=settings.kubernetes_contexts or None,
        namespaces=settings.kubernetes_namespaces,
        kubeconfig=settings.kubeconfig,
        schedule_wait_s=settings.kubernetes_schedule_wait_s,
        nodes=node_agents_for(settings, "kubernetes"),
        log_book=node_book_for(settings),
        poll_interval_s=settings.timers.cloud_poll_interval_s,
    )
