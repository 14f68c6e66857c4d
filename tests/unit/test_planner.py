"""The planner: failover order for the seed's examples, pins, spot, blocks, ties, and
properties that hold for random requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.shared.blocking import Block, is_blocked
from corral.shared.catalog import Catalog, load_catalog
from corral.shared.catalog.offering import Offering
from corral.shared.config.task import Resources, Task
from corral.shared.errors import Scope
from corral.shared.images import ImageChoice, image_for_region
from corral.shared.placement import Placement
from corral.shared.planner import (
    DEFAULT_MIN_CPUS,
    DEFAULT_MIN_MEMORY_GIB,
    Candidate,
    Plan,
    plan,
    request_specs,
)

# The planner's logic on the frozen catalog of tests/fixtures/catalog (the shipped rows before
# the data of issue #45 item 6): refreshing the shipped prices does not change these cases.
FROZEN_CATALOG = Path(__file__).resolve().parents[1] / "fixtures" / "catalog"
CATALOG = load_catalog(FROZEN_CATALOG)


def task(text: str) -> Task:
    return Task.model_validate(yaml.safe_load(text))


def plan_of(text: str, catalog: Catalog = CATALOG, **kwargs: Any) -> Plan:
    return plan(task(text), catalog, **kwargs)


def accel(c: Candidate) -> str:
    return ",".join(f"{k}:{v}" for k, v in c.accelerators.items())


def groups(result: Plan) -> list[tuple[str, str, str]]:
    """(cloud, accelerators, market) in chain order, consecutive repeats collapsed."""
    out: list[tuple[str, str, str]] = []
    for c in result.candidates:
        key = (c.cloud, accel(c), c.market)
        if not out or out[-1] != key:
            out.append(key)
    return out


# --------------------------------------------------------------------------- the seed's examples
def test_a100_8_cheapest_cloud_first_then_all_its_regions() -> None:
    result = plan_of("resources: {accelerators: A100:8}")
    first = result.candidates[0]
    assert (first.cloud, first.instance_type, first.zone) == (
        "gcp",
        "a2-highgpu-8g",
        "us-central1-a",
    )
    assert round(first.cost_usd_per_hour, 2) == 29.39
    assert groups(result) == [("gcp", "A100:8", "on_demand"), ("aws", "A100:8", "on_demand")]
    first_aws = next(c for c in result.candidates if c.cloud == "aws")
    assert (first_aws.instance_type, first_aws.region) == ("p4d.24xlarge", "us-east-1")
    assert round(first_aws.price_usd_per_hour, 2) == 32.77
    gcp_regions = [c.region for c in result.candidates if c.cloud == "gcp"]
    assert list(dict.fromkeys(gcp_regions)) == [
        "us-central1",
        "us-east1",
        "us-west1",
        "europe-west4",
        "asia-northeast1",
    ]  # price order; equal prices (the three US regions) in catalog order
    assert gcp_regions[:4] == ["us-central1"] * 4  # the region's zones together
    assert result.notices == [] and result.reasons == []


def test_accelerator_set_cheapest_across_names_gcp_l4_before_aws_a10g() -> None:
    result = plan_of("resources: {accelerators: {A10: 1, L4: 1, A10g: 1}}")
    first = result.candidates[0]
    assert (first.cloud, first.instance_type, accel(first)) == ("gcp", "g2-standard-4", "L4:1")
    assert round(first.price_usd_per_hour, 2) == 0.70
    assert groups(result) == [
        ("gcp", "L4:1", "on_demand"),  # 0.70
        ("aws", "L4:1", "on_demand"),  # g6.xlarge 0.80
        ("aws", "A10G:1", "on_demand"),  # g5.xlarge 1.01
    ]
    assert {accel(c) for c in result.candidates} == {"L4:1", "A10G:1"}  # no A10 anywhere


def test_accelerator_list_is_the_users_order_not_price() -> None:
    result = plan_of("resources: {accelerators: [A10:1, A10g:1, L4:1]}")
    names = [accel(c) for c in result.candidates]
    last_a10g = max(i for i, n in enumerate(names) if n == "A10G:1")
    first_l4 = min(i for i, n in enumerate(names) if n == "L4:1")
    assert names[0] == "A10G:1" and last_a10g < first_l4
    # inside the L4 tier, the cheaper cloud still comes first
    assert groups(result)[1:] == [("gcp", "L4:1", "on_demand"), ("aws", "L4:1", "on_demand")]


ORDERED = """
resources:
  {kind}:
    - cloud: gcp
      accelerators: A100-80GB
    - instance_type: g5.xlarge
    - cloud: azure
      region: eastus
      accelerators: A100
"""


def test_ordered_candidates_in_written_order_azure_noticed() -> None:
    result = plan_of(ORDERED.format(kind="ordered"))
    assert groups(result) == [("gcp", "A100-80GB:1", "on_demand"), ("aws", "A10G:1", "on_demand")]
    assert {c.instance_type for c in result.candidates if c.cloud == "aws"} == {"g5.xlarge"}
    assert result.notices == ["azure: Corral has no provider for this cloud; left out of the plan"]


def test_any_of_candidates_cheapest_first() -> None:
    result = plan_of(ORDERED.format(kind="any_of"))
    assert groups(result) == [("aws", "A10G:1", "on_demand"), ("gcp", "A100-80GB:1", "on_demand")]
    assert len(result.notices) == 1 and "azure" in result.notices[0]


SEED_REGIONS = """
resources:
  accelerators: {A10g: 8, A10: 8, L4: 8, A100: 8}
  any_of:
    - region: us-east-1
    - region: us-east-2
    - region: us-west-1
    - region: us-west-2
    - region: us-central1
    - region: us-east1
    - region: us-east4
    - region: us-west1
    - region: us-west2
    - region: us-west3
    - region: us-west4
"""


def test_seed_set_plus_any_of_regions() -> None:
    result = plan_of(SEED_REGIONS)
    allowed = {
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "us-central1",
        "us-east1",
        "us-east4",
        "us-west1",
    }
    assert {c.region for c in result.candidates} <= allowed
    assert groups(result) == [
        ("gcp", "L4:8", "on_demand"),  # g2-standard-96 7.98
        ("aws", "L4:8", "on_demand"),  # g6.48xlarge 13.35
        ("aws", "A10G:8", "on_demand"),  # g5.48xlarge 16.29
        ("gcp", "A100:8", "on_demand"),  # a2-highgpu-8g 29.39
        ("aws", "A100:8", "on_demand"),  # p4d.24xlarge 32.77
    ]
    heads = {
        g: next(c for c in result.candidates if (c.cloud, accel(c)) == g[:2])
        for g in groups(result)
    }
    assert [round(c.price_usd_per_hour, 2) for c in heads.values()] == [
        7.98,
        13.35,
        16.29,
        29.39,
        32.77,
    ]
    # A100:8 exists on GCP only in us-central1, us-east1, us-west1 of the listed regions:
    # the others are skipped, not errors.
    assert {c.region for c in result.candidates if accel(c) == "A100:8" and c.cloud == "gcp"} == {
        "us-central1",
        "us-east1",
        "us-west1",
    }
    assert result.reasons == [] and result.notices == []


def test_outer_fields_are_defaults_that_items_override() -> None:
    result = plan_of("""
resources:
  cloud: aws
  use_spot: true
  any_of:
    - accelerators: A100:8
    - accelerators: L4:1
      cloud: gcp
      use_spot: false
""")
    assert set(groups(result)) == {("gcp", "L4:1", "on_demand"), ("aws", "A100:8", "spot")}


# --------------------------------------------------------------------------- pins and filters
@pytest.mark.parametrize(
    ("pin", "field", "value"),
    [
        ("cloud: gcp", "cloud", "gcp"),
        ("region: us-west-2", "region", "us-west-2"),
        ("zone: us-east-1b", "zone", "us-east-1b"),
        ("{cloud: aws, region: eu-west-1}", "region", "eu-west-1"),
    ],
)
def test_pins_keep_the_whole_chain_inside(pin: str, field: str, value: str) -> None:
    text = f"resources: {{accelerators: {{V100: 1, T4: 1}}, {pin.strip('{}')}}}"
    result = plan_of(text)
    assert result.candidates
    assert {getattr(c, field) for c in result.candidates} == {value}


def test_pinned_region_without_the_accelerator_is_empty_with_a_reason() -> None:
    result = plan_of("resources: {accelerators: H100:8, region: eu-west-1}")
    assert result.candidates == []
    assert result.reasons == ["H100:8 in eu-west-1: no offering on aws, gcp"]


def test_a_per_region_image_id_keeps_the_chain_in_its_regions() -> None:
    """SkyPilot's ``image_id: {region: image}``: the task runs only where it has an image."""
    result = plan_of(
        "resources: {accelerators: A100:8, image_id: {us-east-1: ami-1, europe-west4: img}}"
    )
    assert {c.region for c in result.candidates} == {"us-east-1", "europe-west4"}
    assert plan_of("resources: {accelerators: A100:8, image_id: ami-1}").candidates[0].region == (
        "us-central1"
    )  # one image for every region narrows nothing
    nowhere = plan_of("resources: {accelerators: A100:8, image_id: {mars-1: ami-1}}")
    assert nowhere.candidates == []
    assert nowhere.reasons == [
        "A100:8 in mars-1 (the regions of its image_id): no offering on aws, gcp"
    ]


def test_image_for_region_reads_each_spelling() -> None:
    assert image_for_region("ami-1", "us-east-1") == ImageChoice(machine="ami-1")
    by_region = {"us-east-1": "ami-1", "us-west-2": "ami-2"}
    assert image_for_region(by_region, "us-west-2") == ImageChoice(machine="ami-2")
    assert image_for_region(by_region, "eu-west-1") == ImageChoice()
    assert image_for_region("docker:rayproject/ray:2.9", "x") == ImageChoice(
        docker="rayproject/ray:2.9"
    )
    assert image_for_region(None, "x") == ImageChoice()


def test_unknown_region_reason() -> None:
    result = plan_of("resources: {accelerators: A100:8, cloud: gcp, region: mars-1}")
    assert result.reasons == [
        "A100:8 on gcp in mars-1: no offering on gcp (the catalog has no region mars-1 there)"
    ]


def test_cpu_and_memory_narrow_gpu_types() -> None:
    result = plan_of("resources: {accelerators: L4:1, cpus: 16+, memory: 64}")
    types = {(c.cloud, c.instance_type) for c in result.candidates}
    assert types == {
        ("gcp", "g2-standard-16"),
        ("gcp", "g2-standard-32"),
        ("aws", "g6.4xlarge"),
        ("aws", "g6.8xlarge"),
        ("aws", "g6.16xlarge"),
    }


def test_cpu_task_defaults() -> None:
    result = plan_of("resources: {}")
    assert all(c.accelerators == {} for c in result.candidates)
    assert all(
        c.vcpus >= DEFAULT_MIN_CPUS and c.memory_gib >= DEFAULT_MIN_MEMORY_GIB
        for c in result.candidates
    )
    first = result.candidates[0]
    assert (first.cloud, first.instance_type, first.zone) == (
        "gcp",
        "e2-standard-4",
        "us-central1-a",
    )
    assert {c.instance_type for c in result.candidates} >= {"m5.xlarge", "n2-standard-4"}
    assert "m5.large" not in {c.instance_type for c in result.candidates}  # 2 vCPUs


def test_cpu_task_with_only_cpus_has_no_memory_floor() -> None:
    result = plan_of("resources: {cpus: 2}")
    assert ("aws", "c5.large") in {(c.cloud, c.instance_type) for c in result.candidates}


def test_instance_type_sold_bare_and_with_gpus() -> None:
    bare = plan_of("resources: {instance_type: n1-standard-8}")
    assert {accel(c) for c in bare.candidates} == {""}
    t4 = plan_of("resources: {instance_type: n1-standard-8, accelerators: T4:1}")
    assert {accel(c) for c in t4.candidates} == {"T4:1"}
    assert round(t4.candidates[0].price_usd_per_hour, 2) == 0.73
    a2 = plan_of("resources: {instance_type: A2-HIGHGPU-8G}")  # case-insensitive
    assert {accel(c) for c in a2.candidates} == {"A100:8"}


# --------------------------------------------------------------------------- markets and cost
def test_spot_plans_the_spot_market_at_each_zones_price() -> None:
    result = plan_of("resources: {accelerators: A100:8, use_spot: true, cloud: aws}")
    assert {c.market for c in result.candidates} == {"spot"}
    by_zone = {o.zone: o for o in CATALOG.instance_type("aws", "p4d.24xlarge")}
    for c in result.candidates:
        assert c.price_usd_per_hour == by_zone[c.zone].spot_price_usd_per_hour
    east = [c for c in result.candidates if c.region == "us-east-1"]
    assert [c.price_usd_per_hour for c in east] == sorted(c.price_usd_per_hour for c in east)


def test_spot_in_one_zone_orders_types_by_that_zones_price() -> None:
    rows = [
        Offering("aws", "type-a", "L4", 1, 4, 16, 1.0, 0.1, "r1", "z1"),
        Offering("aws", "type-a", "L4", 1, 4, 16, 1.0, 0.5, "r1", "z2"),
        Offering("aws", "type-b", "L4", 1, 4, 16, 1.0, 0.3, "r1", "z1"),
        Offering("aws", "type-b", "L4", 1, 4, 16, 1.0, 0.2, "r1", "z2"),
    ]
    spot = "resources: {accelerators: L4:1, use_spot: true%s}"
    everywhere = plan_of(spot % "", Catalog(rows))
    assert [(c.instance_type, c.zone) for c in everywhere.candidates] == [
        ("type-a", "z1"),
        ("type-a", "z2"),
        ("type-b", "z2"),
        ("type-b", "z1"),
    ]
    in_z2 = plan_of(spot % ", zone: z2", Catalog(rows))
    assert [(c.instance_type, c.price_usd_per_hour) for c in in_z2.candidates] == [
        ("type-b", 0.2),
        ("type-a", 0.5),
    ]


def test_spot_leaves_out_types_without_spot() -> None:
    result = plan_of("resources: {accelerators: A100-80GB:8, use_spot: true}")
    assert "p4de.24xlarge" not in {c.instance_type for c in result.candidates}
    assert {c.instance_type for c in result.candidates} == {"a2-ultragpu-8g"}


def test_cost_is_price_times_num_nodes() -> None:
    result = plan_of("num_nodes: 4\nresources: {accelerators: A100:8}")
    first = result.candidates[0]
    assert first.num_nodes == 4
    assert first.cost_usd_per_hour == pytest.approx(4 * 29.38708, abs=1e-3)
    assert first.to_dict()["cost_usd_per_hour"] == pytest.approx(117.5484)
    override = plan(task("num_nodes: 4\nresources: {accelerators: A100:8}"), CATALOG, num_nodes=2)
    assert override.candidates[0].num_nodes == 2


def test_bare_resources_plan_one_node() -> None:
    result = plan(Resources.model_validate({"accelerators": "T4:4"}), CATALOG)
    assert result.candidates[0].num_nodes == 1
    assert result.candidates[0].instance_type == "n1-standard-32"


# --------------------------------------------------------------------------- blocked scopes
def test_zone_block_removes_that_zone_only() -> None:
    base = plan_of("resources: {accelerators: A100:8}")
    block = Block.from_scope(Scope.ZONE, base.candidates[0])
    assert block is not None
    result = plan_of("resources: {accelerators: A100:8}", blocked=[block])
    assert result.candidates == base.candidates[1:]
    assert result.candidates[0].zone == "us-central1-b"


def test_region_and_cloud_blocks() -> None:
    blocks = [Block("gcp", region="us-central1"), Block("gcp", region="us-east1")]
    result = plan_of("resources: {accelerators: A100:8}", blocked=blocks)
    assert result.candidates[0].zone == "us-west1-b"
    only_aws = plan_of("resources: {accelerators: A100:8}", blocked=[Block("gcp")])
    assert {c.cloud for c in only_aws.candidates} == {"aws"}


def test_instance_type_block_keeps_other_markets() -> None:
    text = """
resources:
  accelerators: V100:4
  cloud: aws
  any_of: [{use_spot: true}, {use_spot: false}]
"""
    result = plan_of(text, blocked=[Block("aws", instance_type="p3.8xlarge", market="spot")])
    assert {c.market for c in result.candidates} == {"on_demand"}
    assert len(result.candidates) == len(plan_of(text).candidates) // 2


def test_everything_blocked_says_so() -> None:
    result = plan_of("resources: {accelerators: H100:8}", blocked=[Block("aws"), Block("gcp")])
    assert result.candidates == []
    h100_rows = len(CATALOG.by_accelerator["H100"])
    assert h100_rows == 20
    assert result.reasons == [f"every matching candidate ({h100_rows}) is in a blocked scope"]


# --------------------------------------------------------------------------- clouds
def test_azure_only_is_noticed_and_empty() -> None:
    result = plan_of("resources: {cloud: azure, accelerators: A10:1}")
    assert result.candidates == []
    assert result.notices == ["azure: Corral has no provider for this cloud; left out of the plan"]
    assert result.reasons


def test_a10_alone_has_no_aws_gcp_offering() -> None:
    result = plan_of("resources: {accelerators: A10:1}")
    assert result.candidates == [] and result.reasons == [
        "A10:1: no offering on aws, gcp; no instance type in the catalog carries accelerator "
        "'A10' (did you mean 'A10G'?)"
    ]


def test_a_type_no_cloud_has_is_named_with_the_nearest() -> None:
    result = plan_of("resources: {cloud: aws, instance_type: p4d.24xlarg}")
    assert result.reasons == [
        "p4d.24xlarg on aws: no offering on aws; instance type 'p4d.24xlarg' is not in the aws "
        "catalog (did you mean 'p4d.24xlarge'?)"
    ]


def test_clouds_argument_restricts() -> None:
    result = plan_of("resources: {accelerators: A100:8}", clouds=("aws",))
    assert {c.cloud for c in result.candidates} == {"aws"}
    pinned = plan_of("resources: {accelerators: A100:8, cloud: gcp}", clouds=("aws",))
    assert pinned.reasons == ["A100:8 on gcp: gcp is not among the clouds enabled here"]


def test_local_cloud_needs_configuring_then_is_planned_in_file_order() -> None:
    text = "resources: {accelerators: A100:8, cloud: local}"
    assert "not configured" in plan_of(text).reasons[0]
    local = [
        Offering("local", "gpu-a100-8", "A100", 8, 96, 1152, 32.77, 12.0, "lab-east", "lab-east-b"),
        Offering("local", "gpu-a100-8", "A100", 8, 96, 1152, 32.77, 12.0, "lab-east", "lab-east-a"),
        Offering("local", "gpu-a100-8", "A100", 8, 96, 1152, 32.77, None, "lab-west", "lab-west-a"),
    ]
    result = plan_of(text, CATALOG.with_offerings(local))
    assert [c.zone for c in result.candidates] == ["lab-east-b", "lab-east-a", "lab-west-a"]
    spot = plan_of(
        "resources: {accelerators: A100:8, cloud: local, use_spot: true}",
        CATALOG.with_offerings(local),
    )
    assert [c.zone for c in spot.candidates] == ["lab-east-b", "lab-east-a"]


# --------------------------------------------------------------------------- ties and determinism
def test_equal_prices_keep_catalog_order() -> None:
    rows = [
        Offering("gcp", "g-8", "A100", 8, 96, 680, 10.0, None, "r-b", "r-b-z2"),
        Offering("gcp", "g-8", "A100", 8, 96, 680, 10.0, None, "r-b", "r-b-z1"),
        Offering("aws", "a-8", "A100", 8, 96, 1152, 10.0, None, "r-a", "r-a-z1"),
        Offering("gcp", "g-8", "A100", 8, 96, 680, 10.0, None, "r-a", "r-a-z1"),
        Offering("aws", "a-8", "A100", 8, 96, 1152, 9.0, None, "r-c", "r-c-z1"),
    ]
    result = plan_of("resources: {accelerators: A100:8}", Catalog(rows))
    assert [(c.cloud, c.zone) for c in result.candidates] == [
        ("aws", "r-c-z1"),  # cheapest: aws first, then its other region
        ("aws", "r-a-z1"),
        ("gcp", "r-b-z2"),  # gcp's regions tie: catalog order, zones in file order
        ("gcp", "r-b-z1"),
        ("gcp", "r-a-z1"),
    ]


def test_same_plan_every_time_and_on_a_fresh_catalog() -> None:
    text = SEED_REGIONS
    again = plan_of(text, Catalog(CATALOG.offerings))
    assert plan_of(text).candidates == plan_of(text).candidates == again.candidates


def test_ordered_tiers_do_not_repeat_candidates() -> None:
    result = plan_of("""
resources:
  ordered:
    - {accelerators: A100:8, zone: us-central1-b}
    - {accelerators: A100:8}
""")
    zones = [c.zone for c in result.candidates]
    assert zones[0] == "us-central1-b" and zones.count("us-central1-b") == 1
    assert len(zones) == len(plan_of("resources: {accelerators: A100:8}").candidates)


def test_candidate_dict_round_trip() -> None:
    c = plan_of("resources: {accelerators: L4:1}").candidates[0]
    data = c.to_dict()
    assert set(data) == {
        "cloud",
        "region",
        "zone",
        "instance_type",
        "accelerators",
        "vcpus",
        "memory_gib",
        "market",
        "price_usd_per_hour",
        "num_nodes",
        "cost_usd_per_hour",
    }
    assert Candidate.from_dict({**data, "chosen": True}) == c


# --------------------------------------------------------------------------- properties
ACCELS = sorted({(o.accelerator, o.accelerator_count) for o in CATALOG.offerings if o.accelerator})
ACCEL_TEXT = [f"{n}:{c}" for n, c in ACCELS] + ["A10:1"]
REGIONS = sorted({(o.cloud, o.region) for o in CATALOG.offerings})
ZONES = sorted({(o.cloud, o.region, o.zone) for o in CATALOG.offerings})
OFFERING_BY_KEY = {(o.cloud, o.zone, o.instance_type, o.accelerator): o for o in CATALOG.offerings}


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A task file (as data) with a random accelerator form, pins, filters, spot and nodes."""
    res: dict[str, Any] = {}
    form = draw(st.sampled_from(["none", "one", "set", "list", "ordered"]))
    picks = draw(st.lists(st.sampled_from(ACCEL_TEXT), min_size=1, max_size=3, unique=True))
    if form == "one":
        res["accelerators"] = picks[0]
    elif form == "set":
        res["accelerators"] = {p.split(":")[0]: int(p.split(":")[1]) for p in picks}
    elif form == "list":
        res["accelerators"] = picks
    elif form == "ordered":
        res["ordered"] = [{"accelerators": p} for p in picks]
    where = draw(st.sampled_from(["", "cloud", "region", "zone", "any_of_regions"]))
    if where == "cloud":
        res["cloud"] = draw(st.sampled_from(["aws", "gcp"]))
    elif where == "region":
        res["cloud"], res["region"] = draw(st.sampled_from(REGIONS))
    elif where == "zone":
        _, res["region"], res["zone"] = draw(st.sampled_from(ZONES))
    elif where == "any_of_regions" and form != "ordered":
        regions = draw(st.lists(st.sampled_from(REGIONS), min_size=1, max_size=4, unique=True))
        res["any_of"] = [{"region": r} for _, r in regions]
    if draw(st.booleans()):
        res["use_spot"] = True
    if draw(st.integers(0, 3)) == 0:
        res["cpus"] = f"{draw(st.sampled_from([2, 8, 32]))}+"
    if draw(st.integers(0, 3)) == 0:
        res["memory"] = draw(st.sampled_from([8, 64, 256]))
    return {"name": "p", "num_nodes": draw(st.integers(1, 4)), "resources": res}


@st.composite
def block_sets(draw: st.DrawFn) -> list[Block]:
    picks = draw(st.lists(st.sampled_from(CATALOG.offerings), max_size=4))
    out = []
    for o in picks:
        market = draw(st.sampled_from(["on_demand", "spot"]))
        c = Candidate(
            Placement(o.cloud, o.region, o.zone, o.instance_type, market),
            {},
            o.vcpus,
            o.memory_gib,
            1.0,
            1,
        )
        block = Block.from_scope(draw(st.sampled_from(list(Scope))), c)
        if block is not None:
            out.append(block)
    return out


def _options(res: dict[str, Any]) -> set[str]:
    raw = res.get("accelerators")
    if "ordered" in res:
        raw = [item["accelerators"] for item in res["ordered"]]
    if raw is None:
        return set()
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, dict):
        raw = [f"{k}:{v}" for k, v in raw.items()]
    return {r.upper() for r in raw}


def _accepts(data: dict[str, Any], c: Candidate) -> bool:
    """An oracle written from the request as the user wrote it."""
    res = data["resources"]
    options = _options(res)
    if options and accel(c) not in options:
        return False
    if not options and c.accelerators:
        return False
    for pin in ("cloud", "region", "zone"):
        if pin in res and getattr(c, pin) != res[pin]:
            return False
    if "any_of" in res and c.region not in {item["region"] for item in res["any_of"]}:
        return False
    min_cpus = float(res["cpus"].rstrip("+")) if "cpus" in res else None
    min_mem = float(res["memory"]) if "memory" in res else None
    if not options and min_cpus is None and min_mem is None:
        min_cpus, min_mem = DEFAULT_MIN_CPUS, DEFAULT_MIN_MEMORY_GIB
    if (min_cpus and c.vcpus < min_cpus) or (min_mem and c.memory_gib < min_mem):
        return False
    o = OFFERING_BY_KEY[(c.cloud, c.zone, c.instance_type, next(iter(c.accelerators), None))]
    spot = bool(res.get("use_spot"))
    price = o.spot_price_usd_per_hour if spot else o.price_usd_per_hour
    return (
        c.market == ("spot" if spot else "on_demand")
        and c.price_usd_per_hour == price
        and (c.num_nodes == data["num_nodes"])
    )


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(requests(), block_sets())
def test_every_candidate_matches_and_none_is_blocked(
    data: dict[str, Any], blocks: list[Block]
) -> None:
    t = Task.model_validate(data)
    free = plan(t, CATALOG)
    result = plan(t, CATALOG, blocked=blocks)
    pinned = [spec.where for spec in request_specs(t.resources)]  # each alternative's pattern
    for c in result.candidates:
        assert _accepts(data, c), c
        assert any(where.matches(c) for where in pinned), c
        assert is_blocked(c, blocks) is None
    # blocking only removes: the rest keeps its order
    assert result.candidates == [c for c in free.candidates if is_blocked(c, blocks) is None]
    assert bool(result.candidates) != bool(result.reasons)
    keys = [(c.cloud, c.zone, c.instance_type, accel(c), c.market) for c in result.candidates]
    assert len(keys) == len(set(keys))  # no candidate twice


@PROPERTY
@given(requests())
def test_zones_of_a_region_are_contiguous_and_groups_cheapest_first(data: dict[str, Any]) -> None:
    res = data["resources"]
    result = plan(Task.model_validate(data), CATALOG)
    if "ordered" in res or isinstance(res.get("accelerators"), list):
        order = [_rank(res, c) for c in result.candidates]
        assert order == sorted(order)  # the user's order first
        return
    runs = [(c.cloud, accel(c), c.market, c.instance_type, c.region) for c in result.candidates]
    seen: set[tuple[str, ...]] = set()
    for n, run in enumerate(runs):
        if n and runs[n - 1] == run:
            continue
        assert run not in seen, f"{run} is split"
        seen.add(run)
    # inside each group, runs (and so group heads) go cheapest first
    group_heads: list[float] = []
    run_heads: dict[tuple[str, str, str], list[float]] = {}
    for n, c in enumerate(result.candidates):
        group = (c.cloud, accel(c), c.market)
        if n == 0 or runs[n - 1][:3] != group:
            group_heads.append(c.price_usd_per_hour)
        if n == 0 or runs[n - 1] != runs[n]:
            run_heads.setdefault(group, []).append(c.price_usd_per_hour)
    assert group_heads == sorted(group_heads)
    for prices in run_heads.values():
        assert prices == sorted(prices)


def _rank(res: dict[str, Any], c: Candidate) -> int:
    written = (
        [item["accelerators"] for item in res["ordered"]]
        if "ordered" in res
        else res["accelerators"]
    )
    return [w.upper() for w in written].index(accel(c))
