"""The local cloud: Corral's embedded default provider, whose machines are OS processes.

A cloud file (see ``example-cloud.yaml`` next to this module, shipped as package data) says
what it sells and where; :class:`~.provider.LocalProvider` launches one node agent process
(:mod:`.agent`) per instance and keeps the cloud's records in Redis (:mod:`.state`).

The provider is imported lazily, so ``python -m ...local.agent`` loads neither pydantic nor the
decision core just to run a node.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

# The example cloud file, as installed with the package; copy it to make your own.
EXAMPLE_CLOUD_FILE = Path(__file__).with_name("example-cloud.yaml")

if TYPE_CHECKING:
    from corral.services.providers.local.provider import LocalProvider

__all__ = ["EXAMPLE_CLOUD_FILE", "LocalProvider"]


def __getattr__(name: str) -> Any:
    if name == "LocalProvider":
        from corral.services.providers.local.provider import LocalProvider

        return LocalProvider
    raise AttributeError(name)
