"""Blocked scopes: from a provider error's scope to a block, and matching candidates."""

from __future__ import annotations

import pytest

from corral.shared.blocking import Block, blocks_by_cloud, is_blocked
from corral.shared.errors import CapacityError, QuotaError, Scope, ThrottledError
from corral.shared.planner import Candidate


def cand(
    cloud: str = "aws",
    region: str = "us-east-1",
    zone: str = "us-east-1a",
    instance_type: str = "p4d.24xlarge",
    market: str = "on_demand",
) -> Candidate:
    return Candidate(cloud, region, zone, instance_type, {"A100": 8}, 96, 1152, market, 32.77, 1)


HERE = cand()


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (Scope.ZONE, Block("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "on_demand")),
        (Scope.REGION, Block("aws", region="us-east-1")),
        (Scope.INSTANCE_TYPE, Block("aws", instance_type="p4d.24xlarge", market="on_demand")),
        (Scope.CLOUD, Block("aws")),
        (Scope.NONE, None),
        (Scope.REQUEST, None),
    ],
)
def test_from_scope(scope: Scope, expected: Block | None) -> None:
    assert Block.from_scope(scope, HERE) == expected
    assert Block.from_scope(scope.value, HERE) == expected  # the stored word works too


def test_from_scope_follows_the_error_classes() -> None:
    assert Block.from_scope(CapacityError("sold out").scope, HERE) == Block(
        "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "on_demand"
    )
    assert Block.from_scope(QuotaError("quota").scope, HERE) == Block("aws", "us-east-1")
    assert Block.from_scope(ThrottledError("slow down").scope, HERE) is None
    gpus_all_regions = QuotaError("GPUS_ALL_REGIONS", scope=Scope.INSTANCE_TYPE)
    assert Block.from_scope(gpus_all_regions.scope, HERE) == Block(
        "aws", instance_type="p4d.24xlarge", market="on_demand"
    )


def test_zone_block_covers_only_that_zone_type_and_market() -> None:
    block = Block.from_scope(Scope.ZONE, HERE)
    assert block is not None
    assert block.matches(HERE)
    assert not block.matches(cand(zone="us-east-1b"))
    assert not block.matches(cand(market="spot"))
    assert not block.matches(cand(instance_type="p4de.24xlarge"))
    assert not block.matches(cand(cloud="gcp"))


def test_region_block_covers_every_type_and_market_of_the_region() -> None:
    block = Block("aws", region="us-east-1")
    assert block.matches(cand(zone="us-east-1f", instance_type="g5.xlarge", market="spot"))
    assert not block.matches(cand(region="us-west-2", zone="us-west-2a"))


def test_instance_type_block_covers_every_region_of_the_cloud_for_its_market() -> None:
    block = Block("aws", instance_type="p4d.24xlarge", market="spot")
    assert block.matches(cand(region="eu-west-1", zone="eu-west-1a", market="spot"))
    assert not block.matches(cand(market="on_demand"))
    assert not block.matches(cand(cloud="gcp", market="spot"))


def test_cloud_block() -> None:
    assert Block("gcp").matches(cand(cloud="gcp", region="us-central1", zone="us-central1-a"))
    assert not Block("gcp").matches(HERE)


def test_is_blocked_returns_the_first_covering_block() -> None:
    blocks = [Block("gcp"), Block("aws", zone="us-east-1b"), Block("aws", region="us-east-1")]
    assert is_blocked(HERE, blocks) == Block("aws", region="us-east-1")
    assert is_blocked(cand(region="us-west-2", zone="us-west-2a"), blocks) is None
    assert is_blocked(HERE, []) is None


def test_dict_round_trip_and_text() -> None:
    block = Block("aws", "us-east-1", None, "p4d.24xlarge", "spot")
    assert Block.from_dict(block.to_dict()) == block
    assert block.to_dict()["zone"] is None
    assert str(block) == "aws us-east-1: p4d.24xlarge (spot)"
    assert str(Block("gcp")) == "gcp every region: every instance type"


def test_blocks_by_cloud() -> None:
    a, b, c = Block("aws"), Block("gcp", region="us-east1"), Block("aws", zone="z")
    assert blocks_by_cloud([a, b, c]) == {"aws": (a, c), "gcp": (b,)}
