"""The aws cloud's builder (its provider from the settings) and its registry entry
(``CLOUD``: the registry takes it for each cloud of ``shared/clouds.SHIPPED_CLOUDS``). The
provider, and boto3, load when the builder is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.services.providers.cloud import Cloud
from corral.services.settings import aws_credentials_hint

if TYPE_CHECKING:
    from corral.services.providers.base import CloudCheck, Provider
    from corral.services.settings import Settings


def build(settings: Settings, local_cloud: Callable[[], Any]) -> Provider:
    """EC2 through boto3; its machines boot the node agent when the settings name the API
    they report to (spot notices read from the instance metadata service)."""
    from corral.services.providers.aws.provider import AwsProvider
    from corral.services.providers.nodes import node_agents_for, node_book_for

    return AwsProvider(
        endpoint_url=settings.aws_endpoint_url,
        default_image_id=settings.aws_default_image_id,
        default_gpu_image_id=settings.aws_default_gpu_image_id,
        nodes=node_agents_for(settings, "aws", notice="ec2-imds"),
        log_book=node_book_for(settings),
        poll_interval_s=settings.timers.cloud_poll_interval_s,
    )


def _check(settings: Settings, local_cloud: Callable[[], Any]) -> CloudCheck:
    """``corral check`` of the aws cloud (its SDK loaded when asked)."""
    from corral.services.providers.aws.check import check

    return check(build(settings, local_cloud))  # type: ignore[arg-type]


CLOUD = Cloud(build, aws_credentials_hint, display_name="AWS", check=_check)
