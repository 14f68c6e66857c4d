"""Blocked scopes: from a provider error's scope to a block, and matching candidates."""

from __future__ import annotations

import random

import pytest

from corral.shared.blocking import Block, BlockIndex, blocks_by_cloud, is_blocked
from corral.shared.errors import CapacityError, QuotaError, Scope, ThrottledError
from corral.shared.placement import Placement
from corral.shared.planner import Candidate
from corral.shared.waiting import blocking_expiries


def cand(
    cloud: str = "aws",
    region: str = "us-east-1",
    zone: str = "us-east-1a",
    instance_type: str = "p4d.24xlarge",
    market: str = "on_demand",
) -> Candidate:
    place = Placement(cloud, region, zone, instance_type, market)
    return Candidate(place, {"A100": 8}, 96, 1152, 32.77, 1)


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
    # Issue #46: a quota error blocks its quota family (P instances, on-demand) in the region.
    assert Block.from_scope(QuotaError("quota").scope, HERE) == Block(
        "aws", "us-east-1", quota_family="on_demand:p"
    )
    assert Block.from_scope(Scope.REGION, HERE) == Block("aws", "us-east-1")  # a hung region
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


def _random_blocks(rng: random.Random, n: int) -> list[Block]:
    def pick(values: tuple[str, ...]) -> str | None:
        return None if rng.random() < 0.25 else rng.choice(values)

    out = []
    for _ in range(n):
        if rng.random() < 0.7:  # most blocks name a whole place (a sold-out zone, a loss)
            c = _random_cand(rng)
            out.append(Block(c.cloud, c.region, c.zone, c.instance_type, c.market))
        else:
            out.append(Block(rng.choice(CLOUDS), pick(REGIONS), pick(ZONES), pick(TYPES),
                             pick(MARKETS)))  # fmt: skip
    return out


CLOUDS, REGIONS, ZONES = ("aws", "gcp"), ("r1", "r2"), ("z1", "z2", "z3")
TYPES, MARKETS = ("t1", "t2"), ("spot", "on_demand", "reserved")


def _random_cand(rng: random.Random) -> Candidate:
    return cand(rng.choice(CLOUDS), rng.choice(REGIONS), rng.choice(ZONES), rng.choice(TYPES),
                rng.choice(MARKETS))  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_the_block_index_answers_as_a_scan_of_every_block(seed: int) -> None:
    """Seeded: the first covering block through :class:`BlockIndex` (the one failover and the
    wait's expiries use) is the one a scan of every block finds, and so is each candidate's
    last expiry."""
    rng = random.Random(seed)
    blocks = _random_blocks(rng, rng.randint(0, 40))
    index = BlockIndex(blocks)
    chain = [_random_cand(rng) for _ in range(30)]
    for c in chain:
        assert is_blocked(c, index.near(c)) is is_blocked(c, blocks)
    timed = [(b, rng.uniform(0.0, 100.0)) for b in blocks]
    scanned = []
    for c in chain:
        hits = [t for b, t in timed if b.matches(c)]
        if hits:
            scanned.append(max(hits))
    assert blocking_expiries(chain, timed) == scanned
