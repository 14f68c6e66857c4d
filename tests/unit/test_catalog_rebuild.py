"""The pure half of `corral catalog update` (shared/catalog/rebuild.py): rows from the clouds'
answers, price list parsing, and the merge of a partial update."""

from __future__ import annotations

import json

from corral.shared.catalog import parse_offerings
from corral.shared.catalog.catalog import COLUMNS
from corral.shared.catalog.families import aws_gpu_name, family, keep_type
from corral.shared.catalog.offering import Offering
from corral.shared.catalog.rebuild import (
    AwsFacts,
    GcpFacts,
    MachineType,
    aws_price_of,
    aws_rows,
    gcp_rows,
    gcp_sku_prices,
    merge_regions,
    to_csv,
)


def _aws_product(**attrs: str) -> str:
    base = {"instanceType": "g6e.xlarge", "regionCode": "ap-south-1", "operatingSystem": "Linux",
            "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}  # fmt: skip
    usd = attrs.pop("usd", "2.0940000000")
    return json.dumps(
        {
            "product": {"attributes": {**base, **attrs}},
            "terms": {
                "OnDemand": {"T": {"priceDimensions": {"D": {"pricePerUnit": {"USD": usd}}}}}
            },
        }
    )


def test_aws_price_list_entries() -> None:
    assert aws_price_of(_aws_product()) == ("g6e.xlarge", "ap-south-1", 2.094)
    assert aws_price_of(_aws_product(operatingSystem="Windows")) is None
    assert aws_price_of(_aws_product(tenancy="Dedicated")) is None
    assert aws_price_of(_aws_product(capacitystatus="UnusedCapacityReservation")) is None
    assert aws_price_of(_aws_product(usd="0.0000000000")) is None


def test_family_and_kept_types() -> None:
    assert family("aws", "g6e.xlarge") == "g6e" and family("aws", "m7i-flex.large") == "m7i-flex"
    assert family("gcp", "n2-highmem-8") == "n2"
    assert keep_type("aws", "m5.large", None) and not keep_type("aws", "i4i.large", None)
    assert keep_type("aws", "g6e.xlarge", "L40S") and keep_type("gcp", "n1-standard-2", None)
    assert aws_gpu_name("A100", 81920) == "A100-80GB" and aws_gpu_name("A100", 40960) == "A100"
    assert aws_gpu_name("V100", 32768) == "V100-32GB" and aws_gpu_name("L40S", 45776) == "L40S"


def test_aws_rows_price_each_zone_and_leave_out_the_unpriced() -> None:
    facts = AwsFacts(
        types={
            "g6e.xlarge": MachineType("g6e.xlarge", 4, 32, "L40S", 1),
            "i4i.large": MachineType("i4i.large", 2, 16),
        },
        zones=[
            ("g6e.xlarge", "ap-south-1", "ap-south-1a"),
            ("g6e.xlarge", "ap-south-1", "ap-south-1b"),
            ("g6e.xlarge", "us-west-1", "us-west-1a"),  # no price there
            ("i4i.large", "ap-south-1", "ap-south-1a"),  # a family left out
        ],
        on_demand={("g6e.xlarge", "ap-south-1"): 2.094},
        spot={("g6e.xlarge", "ap-south-1b"): 0.81},
    )
    rebuilt = aws_rows(facts)
    assert [
        (o.zone, o.price_usd_per_hour, o.spot_price_usd_per_hour) for o in rebuilt.offerings
    ] == [
        ("ap-south-1a", 2.094, None),
        ("ap-south-1b", 2.094, 0.81),
    ]
    assert (rebuilt.left_out_unpriced, rebuilt.left_out_family) == (1, 1)
    assert "aws: 2 rows, 1 instance types, 1 regions" in rebuilt.summary("aws")


def _sku(
    text: str, regions: list[str], units: str, nanos: int, unit: str = "h"
) -> dict[str, object]:
    rate = {"unitPrice": {"units": units, "nanos": nanos}}
    expression = {"usageUnit": unit, "tieredRates": [rate]}
    return {
        "description": text,
        "serviceRegions": regions,
        "pricingInfo": [{"pricingExpression": expression}],
    }


def test_gcp_skus_become_per_part_prices() -> None:
    central = ["us-central1"]
    prices = gcp_sku_prices(
        [
            _sku("N1 Predefined Instance Core running in Americas", [*central, "us-east1"], "0",
                 31611000),
            _sku("Spot Preemptible N1 Predefined Instance Ram running in Americas", central, "0",
                 936000, "GiBy.h"),
            _sku("N2D AMD Instance Core running in Americas", central, "0", 27535000),
            _sku("Nvidia Tesla A100 GPU running in Americas", central, "2", 933908000),
            _sku("Nvidia H100 80GB GPU running in Americas", central, "9", 0),
            _sku("Commitment v1: N1 Cpu in Americas for 1 Year", central, "0", 19915000),
            _sku("Nvidia Tesla T4 GPU attached to Spot Preemptible VMs", central, "0", 1),
        ]
    )  # fmt: skip
    assert prices == {
        ("n1", "core", "us-central1", "on_demand"): 0.031611,
        ("n1", "core", "us-east1", "on_demand"): 0.031611,
        ("n1", "ram", "us-central1", "spot"): 0.000936,
        ("n2d", "core", "us-central1", "on_demand"): 0.027535,
        ("A100", "gpu", "us-central1", "on_demand"): 2.933908,
        ("H100", "gpu", "us-central1", "on_demand"): 9.0,
    }


def test_gcp_rows_price_hosts_gpus_and_n1_attachments() -> None:
    facts = GcpFacts(
        machine_types={
            "us-central1-a": [
                MachineType("n1-standard-4", 4, 15),
                MachineType("a2-highgpu-1g", 12, 85, "A100", 1),
                MachineType("m1-ultramem-40", 40, 961),
            ]
        },
        accelerators={"us-central1-a": {"T4": 4, "A100": 16}},
        prices={
            ("n1", "core", "us-central1", "on_demand"): 0.031611,
            ("n1", "ram", "us-central1", "on_demand"): 0.004237,
            ("a2", "core", "us-central1", "on_demand"): 0.031611,
            ("a2", "ram", "us-central1", "on_demand"): 0.004237,
            ("A100", "gpu", "us-central1", "on_demand"): 2.933908,
            ("T4", "gpu", "us-central1", "on_demand"): 0.35,
        },
    )
    rebuilt = gcp_rows(facts)
    rows = {(o.instance_type, o.accelerator, o.accelerator_count): round(o.price_usd_per_hour, 6)
            for o in rebuilt.offerings}  # fmt: skip
    assert rows == {
        ("a2-highgpu-1g", "A100", 1): round(12 * 0.031611 + 85 * 0.004237 + 2.933908, 6),
        ("n1-standard-4", None, 0): round(4 * 0.031611 + 15 * 0.004237, 6),
        ("n1-standard-4", "T4", 1): round(4 * 0.031611 + 15 * 0.004237 + 0.35, 6),
    }
    assert all(o.spot_price_usd_per_hour is None for o in rebuilt.offerings)  # no spot SKUs
    assert rebuilt.left_out_family == 1


def test_a_partial_update_keeps_the_regions_it_did_not_read() -> None:
    def row(region: str, price: float) -> Offering:
        return Offering("aws", "m5.large", None, 0, 2, 8, price, None, region, f"{region}a")

    merged = merge_regions(
        [row("us-east-1", 0.096), row("eu-west-1", 0.107)], [row("eu-west-1", 0.11)], ["eu-west-1"]
    )
    assert [(o.region, o.price_usd_per_hour) for o in merged] == [
        ("eu-west-1", 0.11),
        ("us-east-1", 0.096),
    ]


def test_csv_round_trips() -> None:
    west, east = ("europe-west1", "europe-west1-b"), ("us-east-1", "us-east-1a")
    rows = [
        Offering("gcp", "n1-standard-2", None, 0, 2, 7.5, 0.104592, 0.02088, *west),
        Offering("aws", "p5.48xlarge", "H100", 8, 192, 2048, 55.04, None, *east),
    ]
    text = to_csv(rows)
    assert text.splitlines()[0] == ",".join(COLUMNS)
    assert (
        text.splitlines()[1] == "n1-standard-2,,,2,7.5,0.104592,0.02088,europe-west1,europe-west1-b"
    )
    back = parse_offerings(text, "gcp")
    assert [(o.instance_type, o.accelerator_count, o.spot_price_usd_per_hour) for o in back] == [
        ("n1-standard-2", 0, 0.02088),
        ("p5.48xlarge", 8, None),
    ]
