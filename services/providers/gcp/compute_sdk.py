"""``google.cloud.compute_v1``, imported when one of its names is first read.

Loading the Compute Engine SDK costs about a second of CPU. Every worker process builds every
enabled cloud's provider to ask it for credentials (``Deps.launchable_clouds``, at warm-up); a
process that finds no Google Cloud credentials never calls the API and so never pays for the
SDK. The provider's modules import this module under the SDK's name at run time and the SDK
itself for type checking::

    if TYPE_CHECKING:
        from google.cloud import compute_v1
    else:
        from corral.services.providers.gcp import compute_sdk as compute_v1
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from google.cloud import compute_v1

    return getattr(compute_v1, name)
