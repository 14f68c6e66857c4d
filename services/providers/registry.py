"""The one registry of clouds and their providers: how each cloud's provider is built from the
settings, whether its credentials look present before its SDK loads, its name as people write
it, where its instance types are listed, and what it does with a Ray cluster file. The shipped
clouds are :data:`corral.shared.clouds.PROVIDER_CLOUDS` and Kubernetes; each maps to its
package, imported on first use (cloud SDKs load lazily). A new cloud is one package and one
line: ``register_cloud(name, Cloud(build))`` (its settings beside it), as
``tests/fakes/lambda_cloud`` shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.services.providers.base import Provider
from corral.services.providers.cluster_files import ClusterFiles
from corral.services.settings import (
    Settings,
    aws_credentials_hint,
    gcp_credentials_hint,
    kubernetes_credentials_hint,
)
from corral.shared.clouds import PROVIDER_CLOUDS
from corral.shared.liveness import outage_gap_s


class ProviderUnavailable(LookupError):
    """Corral has no provider for this cloud in this installation."""


# builder(settings, a loader of the local cloud's file): the cloud's provider
Builder = Callable[[Settings, Callable[[], Any]], Provider]


def _present() -> bool:
    return True


def _plain_files() -> ClusterFiles:
    return ClusterFiles()


def _local_files() -> ClusterFiles:
    from corral.services.providers.local.cluster_files import LocalClusterFiles

    return LocalClusterFiles()


def _pod_files() -> ClusterFiles:
    from corral.services.providers.kubernetes.cluster_files import PodClusterFiles

    return PodClusterFiles()


@dataclass(frozen=True)
class Cloud:
    """One cloud Corral launches on: how its provider is built, a quick look (no SDK
    loaded) at whether its usual credentials are there (``corral plan`` marks the clouds a
    launch would leave out), its name as people write it, and what it does with a Ray
    cluster file (:mod:`.cluster_files`; loaded when asked)."""

    build: Builder
    credentials_hint: Callable[[], bool] = _present
    display_name: str = ""  # "" : the cloud's name
    types_from: str = ""  # where its instance types are listed; "": "the <name> catalog"
    cluster_files: Callable[[], ClusterFiles] = _plain_files


def _local(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    from corral.services.providers.local.provider import LocalProvider

    return LocalProvider(
        local_cloud(),
        settings.redis_url or "",
        prefix=settings.prefix,
        log_dir=settings.logs,
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


def _node_book(settings: Settings) -> Any:
    """What cloud machines' agents report (their output among it), when there is a Redis."""
    if not settings.redis_url:
        return None
    from corral.services.queues.redis_conn import connect
    from corral.services.state.nodes import NodeBook

    client = connect(settings.redis_url, patience_s=settings.timers.redis_patience_s)
    return NodeBook.for_settings(client, settings)


def _node_agents(settings: Settings, cloud: str, notice: str | None = None) -> Any:
    """The node agents cloud machines boot, when the settings say where they report
    (``notice``: the metadata service the cloud posts its warnings on; see NodeAgents)."""
    book = _node_book(settings)
    if not settings.node_api_url or book is None:
        return None
    from corral.services.providers.nodes import NodeAgents

    return NodeAgents(
        cloud,
        book,
        settings.node_api_url,
        source=settings.node_agent_source,
        source_sha256=settings.node_agent_sha256,
        notice=notice,
        notice_poll_s=settings.timers.node_notice_poll_s,
    )


def _aws(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    from corral.services.providers.aws.provider import AwsProvider

    return AwsProvider(
        endpoint_url=settings.aws_endpoint_url,
        default_image_id=settings.aws_default_image_id,
        default_gpu_image_id=settings.aws_default_gpu_image_id,
        nodes=_node_agents(settings, "aws", notice="ec2-imds"),
        log_book=_node_book(settings),
        poll_interval_s=settings.timers.cloud_poll_interval_s,
    )


def _gcp(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    from corral.services.providers.gcp.instance_body import DEFAULT_GPU_IMAGE, DEFAULT_IMAGE
    from corral.services.providers.gcp.provider import GcpProvider

    credentials = None
    if settings.gcp_anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return GcpProvider(
        settings.gcp_project,
        api_endpoint=settings.gcp_api_endpoint,
        credentials=credentials,
        nodes=_node_agents(settings, "gcp", notice="gce-metadata"),
        image=settings.gcp_default_image or DEFAULT_IMAGE,
        gpu_image=settings.gcp_default_gpu_image or DEFAULT_GPU_IMAGE,
        log_book=_node_book(settings),
        poll_interval_s=settings.timers.cloud_poll_interval_s,
    )


CLOUDS: dict[str, Cloud] = {
    "local": Cloud(
        _local,
        display_name="Local",
        types_from="the local cloud file",
        cluster_files=_local_files,
    ),
    "aws": Cloud(_aws, aws_credentials_hint, display_name="AWS"),
    "gcp": Cloud(_gcp, gcp_credentials_hint, display_name="GCP"),
}
assert set(CLOUDS) == set(PROVIDER_CLOUDS), "every shipped provider cloud needs an entry"


def _kubernetes(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    from corral.services.providers.kubernetes.provider import KubernetesProvider

    return KubernetesProvider(
        contexts=settings.kubernetes_contexts or None,
        namespaces=settings.kubernetes_namespaces,
        kubeconfig=settings.kubeconfig,
        schedule_wait_s=settings.kubernetes_schedule_wait_s,
        nodes=_node_agents(settings, "kubernetes"),
        log_book=_node_book(settings),
        poll_interval_s=settings.timers.cloud_poll_interval_s,
    )


def register_cloud(name: str, cloud: Cloud) -> None:
    """Make ``name`` a cloud Corral launches on (a cloud's package calls this once)."""
    CLOUDS[name] = cloud


# Kubernetes ships as a registered cloud (no catalog: its offerings are its nodes, listed live;
# its launches go to the plain provision queue). CORRAL_CLOUDS turns it on.
register_cloud(
    "kubernetes",
    Cloud(
        _kubernetes,
        kubernetes_credentials_hint,
        display_name="Kubernetes",
        cluster_files=_pod_files,
    ),
)


def registered_clouds() -> tuple[str, ...]:
    """Every cloud with a provider here: the shipped ones, then those registered."""
    return tuple(CLOUDS)


def credentials_hint(cloud: str) -> bool:
    """Whether ``cloud``'s credentials look present, without loading its SDK (False for a
    cloud Corral has no provider for)."""
    entry = CLOUDS.get(cloud)
    return entry is not None and entry.credentials_hint()


def _entry(cloud: str) -> Cloud:
    entry = CLOUDS.get(cloud)
    if entry is None:
        raise ProviderUnavailable(f"Corral has no provider for cloud {cloud!r}")
    return entry


def display_name(cloud: str) -> str:
    """``cloud`` as people write it (``AWS``); an unknown cloud's name as given."""
    entry = CLOUDS.get(cloud)
    return (entry.display_name if entry is not None else "") or cloud


def types_from(cloud: str) -> str:
    """Where ``cloud``'s instance types are listed, for messages (``the aws catalog``)."""
    entry = CLOUDS.get(cloud)
    return (entry.types_from if entry is not None else "") or f"the {cloud} catalog"


def cluster_files(cloud: str) -> ClusterFiles:
    """What ``cloud`` does with a Ray cluster file (ProviderUnavailable: no such cloud)."""
    return _entry(cloud).cluster_files()


def stand_in_clouds() -> tuple[str, ...]:
    """The clouds that play a cluster file written for another cloud (``--cloud``)."""
    return tuple(name for name in CLOUDS if cluster_files(name).plays_others)


def build_provider(cloud: str, settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    """The provider for ``cloud``; ``local_cloud`` loads the local cloud's file when needed."""
    return _entry(cloud).build(settings, local_cloud)
