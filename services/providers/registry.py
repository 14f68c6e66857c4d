"""The registry of clouds and their providers: how each cloud's provider is built from the
settings, whether its credentials look present before its SDK loads, its name as people write
it, where its instance types are listed, and what it does with a Ray cluster file. The clouds
are ``shared/clouds.py``'s, the one list (shared/ cannot import this, so the list lives there
and this derives from it): each cloud Corral ships has its package, whose ``build.CLOUD``
entry (:class:`~.cloud.Cloud`) is taken here, and every other list of clouds (the workers'
queues, the CLI's choices, the API's clouds) derives from :data:`CLOUDS`. A cloud outside the
tree is one package and one line, ``register_cloud(name, Cloud(build))``, as
``tests/fakes/lambda_cloud`` shows. Cloud SDKs load lazily (the builders import them)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from corral.services.providers.base import CloudCheck, Provider, credentials_check
from corral.services.providers.cloud import Builder, Cloud
from corral.services.providers.cluster_files import ClusterFiles
from corral.services.settings import Settings
from corral.shared.clouds import PROVIDER_CLOUDS, SHIPPED_CLOUDS

__all__ = ["Builder", "Cloud", "ProviderUnavailable", "register_cloud", "registered_clouds"]


class ProviderUnavailable(LookupError):
    """Corral has no provider for this cloud in this installation."""


def _shipped(name: str) -> Cloud:
    """The entry a shipped cloud's package declares (``services/providers/<name>/build.py``)."""
    entry = importlib.import_module(f"corral.services.providers.{name}.build").CLOUD
    assert isinstance(entry, Cloud), f"{name}: build.CLOUD is not a registry entry"
    return entry


# Every cloud Corral launches on: those it ships, in the order shared/clouds.py lists them,
# then those registered at run time.
CLOUDS: dict[str, Cloud] = {name: _shipped(name) for name in SHIPPED_CLOUDS}
# The pure core's own declaration (planned when no clouds are given, played by the simulator)
# names shipped clouds only; tests/unit/test_cloud_lists.py holds the two together.
assert set(PROVIDER_CLOUDS) <= set(CLOUDS), "every cloud the core plans needs a provider"


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
