"""The kubernetes cloud's builder (its provider from the settings) and its registry entry
(``CLOUD``: the registry takes it for each cloud of ``shared/clouds.SHIPPED_CLOUDS``). The
provider, and the kubernetes client, load when the builder
is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.services.providers.cloud import Cloud
from corral.services.providers.cluster_files import ClusterFiles
from corral.services.settings import kubernetes_credentials_hint

if TYPE_CHECKING:
    from corral.services.providers.base import CloudCheck, Provider
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


def _check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    """``corral check`` of the kubernetes cloud (its SDK loaded when asked)."""
    from corral.services.providers.kubernetes.check import check

    return check(build(settings, local_cloud))  # type: ignore[arg-type]


def _pod_files() -> ClusterFiles:
    from corral.services.providers.kubernetes.cluster_files import PodClusterFiles

    return PodClusterFiles()


CLOUD = Cloud(
    build,
    kubernetes_credentials_hint,
    display_name="Kubernetes",
    cluster_files=_pod_files,
    check=_check,
)
