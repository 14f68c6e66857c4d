"""Coverage facts of the shipped catalog data (shared/catalog/data, data/README.md): every
region and zone its sources list, the GPU types, and rows the issue named as missing."""

from __future__ import annotations

import re

import pytest

from corral.shared.catalog import Catalog, load_catalog


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


# The regions of skypilot-catalog v9's aws/vms.csv (commit 2c3d7ea7) rows for r5.24xlarge,
# offered in every one of them, and of the SkyPilot-format gcp/vms.csv of 2026-05-20.
AWS_REGIONS = {
    "af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3",
    "ap-south-1", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
    "ca-central-1", "eu-central-1", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1",
    "eu-west-2", "eu-west-3", "me-central-1", "me-south-1", "us-east-1", "us-east-2",
    "us-west-1", "us-west-2",
}  # fmt: skip
GCP_REGIONS = {
    "africa-south1", "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2",
    "asia-northeast3", "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
    "australia-southeast1", "australia-southeast2", "europe-central2", "europe-north1",
    "europe-north2", "europe-southwest1", "europe-west1", "europe-west10", "europe-west12",
    "europe-west2", "europe-west3", "europe-west4", "europe-west6", "europe-west8",
    "europe-west9", "me-central1", "me-central2", "me-west1", "northamerica-northeast1",
    "northamerica-northeast2", "northamerica-south1", "southamerica-east1",
    "southamerica-west1", "us-central1", "us-east1", "us-east4", "us-east5", "us-south1",
    "us-west1", "us-west2", "us-west3", "us-west4", "us-central2",
}  # fmt: skip


def _regions(catalog: Catalog, cloud: str) -> set[str]:
    return set(catalog.regions(cloud))


def _zones(catalog: Catalog, cloud: str) -> set[str]:
    return {o.zone for o in catalog.offerings if o.cloud == cloud}


def test_every_region_of_the_sources_is_present(catalog: Catalog) -> None:
    assert _regions(catalog, "aws") == AWS_REGIONS
    assert _regions(catalog, "gcp") == GCP_REGIONS


def test_region_and_zone_counts(catalog: Catalog) -> None:
    counts = {c: (len(_regions(catalog, c)), len(_zones(catalog, c))) for c in ("aws", "gcp")}
    assert counts == {"aws": (24, 77), "gcp": (43, 128)}


def test_gpu_types_per_cloud(catalog: Catalog) -> None:
    gpus = {
        cloud: {o.accelerator for o in catalog.offerings if o.cloud == cloud and o.accelerator}
        for cloud in ("aws", "gcp")
    }
    assert gpus == {
        "aws": {"A100", "A100-80GB", "A10G", "B200", "B300", "H100", "H200", "K80", "L4",
                "L40S", "T4", "V100", "V100-32GB"},
        "gcp": {"A100", "A100-80GB", "H100", "H200", "L4", "P100", "P4", "T4", "V100"},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("cloud", "instance_type", "region", "accelerator", "count"),
    [
        ("aws", "p5.48xlarge", "us-east-1", "H100", 8),
        ("aws", "p5en.48xlarge", "us-east-2", "H200", 8),
        ("aws", "p4d.24xlarge", "ap-south-1", "A100", 8),
        ("aws", "p3.2xlarge", "eu-west-1", "V100", 1),
        ("aws", "g4dn.xlarge", "ap-south-1", "T4", 1),
        ("aws", "g6.48xlarge", "eu-south-2", "L4", 8),
        ("aws", "g6e.xlarge", "us-east-1", "L40S", 1),
        ("aws", "r5.2xlarge", "ap-south-1", None, 0),
        ("gcp", "a3-highgpu-8g", "us-central1", "H100", 8),
        ("gcp", "a2-highgpu-8g", "europe-west4", "A100", 8),
        ("gcp", "a2-ultragpu-8g", "us-east5", "A100-80GB", 8),
        ("gcp", "g2-standard-4", "asia-south1", "L4", 1),
        ("gcp", "n1-standard-8", "us-central1", "V100", 1),
        ("gcp", "n1-standard-2", "europe-west1", None, 0),
        ("gcp", "e2-standard-8", "southamerica-east1", None, 0),
        ("gcp", "n2-standard-8", "asia-south1", None, 0),
    ],
)
def test_named_rows_are_present(
    catalog: Catalog,
    cloud: str,
    instance_type: str,
    region: str,
    accelerator: str | None,
    count: int,
) -> None:
    rows = [o for o in catalog.instance_type(cloud, instance_type) if o.region == region]
    assert rows, f"{cloud} {instance_type} missing in {region}"
    assert {(o.accelerator, o.accelerator_count) for o in rows} >= {(accelerator, count)}


def test_a3_highgpu_8g_is_in_us_central1_zones(
    catalog: Catalog,
) -> None:
    zones = {o.zone for o in catalog.instance_type("gcp", "a3-highgpu-8g")}
    assert {"us-central1-a", "us-central1-b", "us-central1-c"} <= zones


def test_gcp_a100_rows_are_priced_at_googles_list_price(catalog: Catalog) -> None:
    # data/README.md: host 6.51251 + 8 x 2.933908 in europe-west4 (SkyPilot's GPU row says
    # 8 x 1.61365 there), host 5.91582 + 8 x 2.933908 in us-central1.
    def price(region: str) -> float:
        rows = catalog.instance_type("gcp", "a2-highgpu-8g")
        return round(min(o.price_usd_per_hour for o in rows if o.region == region), 2)

    assert (price("us-central1"), price("europe-west4")) == (29.39, 29.98)


def test_left_out_types_and_zones(catalog: Catalog) -> None:
    types = {(o.cloud, o.instance_type) for o in catalog.offerings}
    for left in (("aws", "p5e.48xlarge"), ("gcp", "a3-megagpu-8g"), ("gcp", "a4-highgpu-8g")):
        assert left not in types
    aws_zone = re.compile(r"^[a-z]{2}-[a-z]+-\d[a-z]$")  # no Local Zone (us-west-2-lax-1a)
    assert all(aws_zone.match(z) for z in _zones(catalog, "aws"))


def test_spot_never_above_on_demand(catalog: Catalog) -> None:
    assert all(
        o.spot_price_usd_per_hour is None or o.spot_price_usd_per_hour <= o.price_usd_per_hour
        for o in catalog.offerings
        if o.cloud in ("aws", "gcp")
    )


# The SkyPilot-format AWS catalog of 2026-05-20 lists each common CPU family in these regions
# (me-south-1, opt-in, has none of them; m6i, c6i and r6i are missing where that file has no rows).
CPU_FAMILY_GAPS = {
    "m5": {"me-south-1"},
    "m7i": {"me-south-1"},
    "c5": {"me-south-1"},
    "c7i": {"me-south-1"},
    "r5": {"me-south-1"},
    "m6i": {"me-south-1", "ap-southeast-4", "eu-south-2"},
    "r6i": {"me-south-1", "ap-southeast-3", "ap-southeast-4", "eu-south-2"},
    "c6i": {"me-south-1", "ap-southeast-3", "ap-southeast-4", "eu-south-2", "me-central-1"},
}


@pytest.mark.parametrize("family", sorted(CPU_FAMILY_GAPS))
def test_common_aws_cpu_families_in_every_region_the_source_lists(
    catalog: Catalog, family: str
) -> None:
    aws = [o for o in catalog.offerings if o.cloud == "aws"]
    sizes = ("large", "xlarge", "2xlarge", "4xlarge")
    for size in sizes:
        regions = {o.region for o in aws if o.instance_type == f"{family}.{size}"}
        assert regions >= AWS_REGIONS - CPU_FAMILY_GAPS[family], f"{family}.{size}"
    # Each row of the family priced on demand; spot never above it.
    rows = [o for o in aws if o.instance_type.startswith(f"{family}.")]
    assert rows and all(o.price_usd_per_hour > 0 for o in rows)
    assert all(
        o.spot_price_usd_per_hour is None or o.spot_price_usd_per_hour <= o.price_usd_per_hour
        for o in rows
    )


def test_m6i_large_rows_are_the_sources(catalog: Catalog) -> None:
    """Two rows read back against the source file (anycloud-sh/catalog aws/vms.csv, 5134b89)."""
    rows = {
        (o.region, o.zone): (o.price_usd_per_hour, o.spot_price_usd_per_hour)
        for o in catalog.offerings
        if o.cloud == "aws" and o.instance_type == "m6i.large"
    }
    assert {r for r, _ in rows} >= {"us-east-1", "ap-south-1", "eu-west-1"}
    us_east_1 = {p for (r, _), (p, _s) in rows.items() if r == "us-east-1"}
    assert us_east_1 == {0.096}
