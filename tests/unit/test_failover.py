"""The pure failover step: next candidate within a scope, escalation, passed-over blocks."""

from __future__ import annotations

from typing import Any

from corral.shared.blocking import Block
from corral.shared.failover import WIDER, NextStep, Within, next_step


def c(
    cloud: str, region: str, zone: str, itype: str = "t", market: str = "on_demand"
) -> dict[str, Any]:
    return {
        "cloud": cloud,
        "region": region,
        "zone": zone,
        "instance_type": itype,
        "market": market,
    }


CHAIN = [
    c("gcp", "us-central1", "us-central1-a"),
    c("gcp", "us-central1", "us-central1-b"),
    c("gcp", "us-west1", "us-west1-a"),
    c("aws", "us-east-1", "us-east-1a"),
    c("aws", "us-east-1", "us-east-1b"),
]


def test_first_step_takes_the_first_free_candidate() -> None:
    assert next_step(CHAIN, -1, [], Within.ANY) == NextStep("attempt", 0)


def test_region_step_stays_in_its_region_then_escalates() -> None:
    assert next_step(CHAIN, 0, [], Within.REGION) == NextStep("attempt", 1)
    assert next_step(CHAIN, 1, [], Within.REGION).action == "escalate"
    assert next_step(CHAIN, 1, [], Within.CLOUD) == NextStep("attempt", 2)
    assert next_step(CHAIN, 2, [], Within.CLOUD).action == "escalate"
    assert next_step(CHAIN, 2, [], Within.ANY) == NextStep("attempt", 3)
    assert next_step(CHAIN, 4, [], Within.ANY) == NextStep("exhausted")
    assert WIDER == {Within.REGION: Within.CLOUD, Within.CLOUD: Within.ANY}


def test_blocked_candidates_are_passed_over_once_per_block() -> None:
    region = Block("gcp", region="us-central1")
    step = next_step(CHAIN, -1, [region], Within.ANY)
    assert step.action == "attempt" and step.index == 2
    assert step.passed_over == ((0, region),)


def test_a_quota_block_on_the_region_sends_the_region_step_away() -> None:
    region = Block("gcp", region="us-central1")
    step = next_step(CHAIN, 0, [region], Within.REGION)
    assert step.action == "escalate"
    # The blocked zone inside the region is reported by the region step itself.
    assert step.passed_over == ((1, region),)


def test_everything_blocked_is_exhausted_with_the_reasons() -> None:
    blocks = [
        Block("gcp"),
        Block("aws", zone="us-east-1a", instance_type="t", market="on_demand"),
        Block("aws", region="us-east-1", zone="us-east-1b"),
    ]
    step = next_step(CHAIN, -1, blocks, Within.ANY)
    assert step.action == "exhausted"
    assert [i for i, _ in step.passed_over] == [0, 3, 4]


def test_market_scoped_blocks_leave_other_markets_free() -> None:
    chain = [c("aws", "r", "z", market="spot"), c("aws", "r", "z", market="on_demand")]
    spot_gone = Block("aws", "r", "z", "t", "spot")
    assert next_step(chain, -1, [spot_gone], Within.ANY).index == 1
