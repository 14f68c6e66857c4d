"""Google Cloud: Compute Engine instances through google-cloud-compute (REST transport).

:class:`~.provider.GcpProvider` launches, lists and deletes instances; :mod:`.errors` turns the
API's errors into Corral's typed errors. The SDK loads only when the provider is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.providers.gcp.provider import GcpProvider

__all__ = ["GcpProvider"]


def __getattr__(name: str) -> Any:
    if name == "GcpProvider":
        from corral.services.providers.gcp.provider import GcpProvider

        return GcpProvider
    raise AttributeError(name)
