"""The AWS cloud: EC2 through boto3 (:class:`~.provider.AwsProvider`), its SDK errors mapped
to Corral's typed errors by a table (:mod:`.errors`).

The provider is imported lazily, so only the workers that launch on AWS load boto3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.providers.aws.provider import AwsProvider

__all__ = ["AwsProvider"]


def __getattr__(name: str) -> Any:
    if name == "AwsProvider":
        from corral.services.providers.aws.provider import AwsProvider

        return AwsProvider
    raise AttributeError(name)
