"""The one registry of clouds and their providers: how each cloud's provider is built from the
settings, whether its credentials look present before its SDK loads, its name as people write
it, where its instance types are listed, and what it does with a Ray cluster file. Every list
of clouds outside shared/ derives from :data:`CLOUDS` (shared/, which cannot import this,
declares the few it needs and a test holds them to it); each cloud maps to its package,
imported on first use (cloud SDKs load lazily). A new cloud is one package and one
line: ``register_cloud(name, Cloud(build))`` (its settings beside it), as
``tests/fakes/lambda_cloud`` shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.services.providers.aws.build import build as build_aws
from corral.services.providers.base import CloudCheck, Provider, credentials_check
from corral.services.providers.cluster_files import ClusterFiles
from corral.services.providers.gcp.build import build as build_gcp
from corral.services.providers.kubernetes.build import build as build_kubernetes
from corral.services.providers.local.build import build as build_local
from corral.services.settings import (
    Settings,
    aws_credentials_hint,
    gcp_credentials_hint,
    kubernetes_credentials_hint,
)
from corral.shared.clouds import PROVIDER_CLOUDS


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


# Each cloud's `corral check`, in its package's check.py, loaded (with its SDK) when asked.
def _aws_check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    from corral.services.providers.aws.check import check

    return check(build_aws(settings, local_cloud))  # type: ignore[arg-type]


def _gcp_check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    from corral.services.providers.gcp.check import check

    return check(build_gcp(settings, local_cloud))  # type: ignore[arg-type]


def _kubernetes_check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    from corral.services.providers.kubernetes.check import check

    return check(build_kubernetes(settings, local_cloud))  # type: ignore[arg-type]


def _local_check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    from corral.services.providers.local.check import check

    return check(local_cloud())


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
    # `corral check` (settings, local cloud loader): ready or not, as whom, what failed;
    # None: its provider's credentials look
    check: Callable[[Settings, Callable[[], Any]], CloudCheck] | None = None


# Every cloud Corral launches on, and the one list of them: the CLI's choices, the workers'
# queues (``provision.<cloud>`` each), the API's and ``corral plan``'s clouds derive from it.
# Kubernetes has no catalog (its offerings are its nodes, listed live); CORRAL_CLOUDS turns
# it on.
CLOUDS: dict[str, Cloud] = {
    "local": Cloud(
        build_local,
        display_name="Local",
        types_from="the local cloud file",
        cluster_files=_local_files,
        check=_local_check,
    ),
    "aws": Cloud(build_aws, aws_credentials_hint, display_name="AWS", check=_aws_check),
    "gcp": Cloud(build_gcp, gcp_credentials_hint, display_name="GCP", check=_gcp_check),
    "kubernetes": Cloud(
        build_kubernetes,
        kubernetes_credentials_hint,
        display_name="Kubernetes",
        cluster_files=_pod_files,
        check=_kubernetes_check,
    ),
}
# The pure core's own declaration (planned when no clouds are given, played by the simulator)
# names registered clouds only; tests/unit/test_cloud_lists.py holds the two together.
assert set(PROVIDER_CLOUDS) <= set(CLOUDS), "every cloud the core declares needs an entry"


def register_cloud(name: str, cloud: Cloud) -> None:
    """Make ``name`` a cloud Corral launches on (a cloud's package calls this once)."""
    CLOUDS[name] = cloud


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


def check_cloud(cloud: str, settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    """``corral check`` of one cloud, asked with ``settings``; a provider that cannot even
    be set up is not ready, with why (never raised)."""
    entry = _entry(cloud)
    try:
        if entry.check is not None:
            return entry.check(settings, local_cloud)
        return credentials_check(entry.build(settings, local_cloud))
    except Exception as exc:  # a bad setting, a file that does not read, an SDK that fails
        return CloudCheck(False, None, f"its provider could not be set up: {exc}")
