"""The placement value: one place and market for every record, step, run and view, with
failover's scopes and blocks as its methods; a pattern (a request's pins, a block) is a
partial one."""

from __future__ import annotations

import pytest

from corral.services.api.schemas import InstanceView
from corral.shared.config.task import Resources
from corral.shared.errors import Scope
from corral.shared.placement import Block, Pattern, Placement
from corral.shared.planner import Candidate, request_specs
from corral.shared.records import Attempt, ChainStep, Instance

HERE = Placement("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot")
OTHER_ZONE = Placement("aws", "us-east-1", "us-east-1b", "p4d.24xlarge", "spot")
OTHER_REGION = Placement("aws", "us-west-2", "us-west-2a", "p4d.24xlarge", "spot")
OTHER_CLOUD = Placement("gcp", "us-east1", "us-east1-b", "a2-ultragpu-8g", "spot")


@pytest.mark.parametrize(
    ("scope", "inside"),
    [
        ("region", {OTHER_ZONE}),
        ("cloud", {OTHER_ZONE, OTHER_REGION}),
        ("any", {OTHER_ZONE, OTHER_REGION, OTHER_CLOUD}),
    ],
)
def test_a_scope_holds_the_places_failover_may_try_next(scope: str, inside: set[Placement]) -> None:
    # The zone -> region -> cloud -> anywhere escalation of SkyPilot's failover.
    for place in (OTHER_ZONE, OTHER_REGION, OTHER_CLOUD):
        assert place.within(scope, HERE) is (place in inside), (scope, place)


def test_a_failure_blocks_what_its_scope_rules_out_and_no_more() -> None:
    zone = HERE.block_for(Scope.ZONE)
    assert zone == Block("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot")
    assert HERE.in_block(zone) and not OTHER_ZONE.in_block(zone)
    region = HERE.block_for("region")
    assert region is not None and OTHER_ZONE.in_block(region)
    assert not OTHER_REGION.in_block(region)
    quota = HERE.block_for(Scope.INSTANCE_TYPE)  # the type everywhere on its cloud
    assert quota is not None and OTHER_REGION.in_block(quota) and not OTHER_CLOUD.in_block(quota)
    assert HERE.block_for(Scope.NONE) is None and HERE.block_for(Scope.REQUEST) is None


def test_a_pattern_is_a_partial_placement_and_a_block_is_one_with_its_cloud() -> None:
    assert Pattern().matches(HERE) and Pattern().matches(OTHER_CLOUD)  # pins nothing
    spot_in_region = Pattern(region="us-east-1", market="spot")
    assert spot_in_region.matches(OTHER_ZONE) and not spot_in_region.matches(OTHER_REGION)
    assert not Pattern(market="on_demand").matches(HERE)
    block = HERE.block_for(Scope.REGION)
    assert isinstance(block, Pattern) and block == Block("aws", region="us-east-1")
    assert block != Pattern("aws", region="us-east-1")  # a block is not any pattern
    # A request's alternatives pin what their resources name, the market always.
    specs = request_specs(Resources.model_validate({"cloud": "aws", "use_spot": True}))
    assert [s.where for s in specs] == [Pattern(cloud="aws", market="spot")]
    assert specs[0].where.matches(HERE) and not specs[0].where.matches(OTHER_CLOUD)


def test_every_holder_gives_back_the_same_value_and_keeps_its_json_flat() -> None:
    # Where a pool's machine is up is its row of the machine table (its ledger entry has none).
    row = Instance.new("m-1", "", 0, 0.0, provider_id="i-1", owner_kind="pool", owner_id="p",
                       **HERE.fields())  # fmt: skip
    candidate = Candidate(HERE, {"A100": 8}, 96, 1152, 9.8)
    step = ChainStep.of(candidate)
    attempt = Attempt(attempt_id="a-1", started_at=0.0, **HERE.fields())
    view = InstanceView(id="i-1", state="RUNNING", **HERE.fields())
    for holder in (candidate, step, attempt, view, row):
        assert holder.place == HERE and Placement.of(holder) == HERE
    docs = (candidate.to_dict(), step.model_dump(), attempt.to_public(), view.model_dump())
    for doc in (*docs, row.model_dump(mode="json")):
        assert {k: doc[k] for k in HERE.fields()} == HERE.fields()
        assert "place" not in doc
    assert Placement.of(candidate.to_dict()) == HERE  # a stored chain step's JSON too
    assert step.where() == HERE.where() == "aws us-east-1/us-east-1a"
