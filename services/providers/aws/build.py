"""How the registry builds the aws cloud's provider from the settings: the package's own
builder (``registry.CLOUDS["aws"]`` names it). The provider, and boto3, load when it
is called, not when the registry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.providers.base import Provider
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
