"""A cloud Corral does not ship, added from the tests alone: this package and one line,
``register_cloud("lambda", Cloud(build))`` (see ``tests/unit/runtime/test_new_cloud.py``).

Its provider lists its offerings live (no catalog CSV): a GPU type in two regions, a CPU type in
one. Launches, errors and boots are the fake provider's (records calls, plays queued errors,
idempotent by attempt id). ``lambda`` is among the cloud names a task may write, and Corral
ships no provider for it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from corral.services.providers.base import zones_from
from corral.services.settings import Settings
from corral.shared.catalog.offering import Offering

from fakes.provider import FakeProvider

NAME = "lambda"


def _offering(itype: str, gpu: str | None, count: int, price: float, region: str, zone: str):
    return Offering(
        cloud=NAME,
        instance_type=itype,
        accelerator=gpu,
        accelerator_count=count,
        vcpus=30.0 if gpu else 8.0,
        memory_gib=200.0 if gpu else 32.0,
        price_usd_per_hour=price,
        spot_price_usd_per_hour=None,
        region=region,
        zone=zone,
    )


# What the cloud's API would answer when asked for its instance types, cheapest region first.
LISTED: tuple[Offering, ...] = (
    _offering("gpu_1x_a10", "A10", 1, 0.75, "us-west-1", "us-west-1a"),
    _offering("gpu_1x_a10", "A10", 1, 0.75, "us-west-1", "us-west-1b"),
    _offering("gpu_1x_a10", "A10", 1, 0.80, "us-east-1", "us-east-1a"),
    _offering("cpu_8x", None, 0, 0.20, "us-east-1", "us-east-1a"),
)


@dataclass
class LambdaProvider(FakeProvider):
    """The fake provider, speaking for the ``lambda`` cloud with its own offerings."""

    name: str = NAME
    lists: int = 0  # how often its offerings were listed

    def offerings(self) -> Sequence[Offering]:
        self.lists += 1
        return LISTED

    def zones_of(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        return zones_from(LISTED, instance_type)


def build(settings: Settings, local_cloud: Callable[[], Any]) -> LambdaProvider:
    """The registry's builder: the cloud has no settings of its own."""
    return LambdaProvider()
