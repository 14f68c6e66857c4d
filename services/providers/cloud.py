"""One cloud's entry in the provider registry (:class:`Cloud`), declared by the cloud's own
package (``services/providers/<cloud>/build.py``: ``CLOUD``) or handed to
``registry.register_cloud`` by a package outside the tree. Light: no provider, no SDK."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.services.providers.cluster_files import ClusterFiles

if TYPE_CHECKING:
    from corral.services.providers.base import CloudCheck, Provider
    from corral.services.settings import Settings

# builder(settings, a loader of the local cloud's file): the cloud's provider
Builder = Callable[["Settings", Callable[[], Any]], "Provider"]


@dataclass(frozen=True)
class Cloud:
    """One cloud Corral launches on: how its provider is built, a quick look (no SDK
    loaded) at whether its usual credentials are there (``corral plan`` marks the clouds a
    launch would leave out), its name as people write it, and what it does with a Ray
    cluster file (:mod:`.cluster_files`; loaded when asked)."""

    build: Builder
    credentials_hint: Callable[[], bool] = lambda: True
    display_name: str = ""  # "" : the cloud's name
    types_from: str = ""  # where its instance types are listed; "": "the <name> catalog"
    cluster_files: Callable[[], ClusterFiles] = ClusterFiles
    # `corral check` (settings, local cloud loader): ready or not, as whom, what failed;
    # None: its provider's credentials look
    check: Callable[[Settings, Callable[[], Any]], CloudCheck] | None = None
