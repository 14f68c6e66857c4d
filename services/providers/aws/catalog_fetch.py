"""``corral catalog update`` for AWS: ask EC2 and the Pricing API what is sold where, and at
what price, and hand the answers to the pure rebuild (corral.shared.catalog.rebuild).

Per region: ``describe_instance_types`` (sizes and GPUs), ``describe_instance_type_offerings``
by availability zone (where each type is sold), ``describe_spot_price_history`` from now (the
newest Linux spot price of each type in each zone); and the Pricing API's ``get_products`` for
the region's on-demand Linux, shared-tenancy prices (the Pricing API answers in us-east-1).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from corral.shared.catalog.families import aws_gpu_name, keep_type
from corral.shared.catalog.rebuild import AwsFacts, CatalogFetchError, MachineType, aws_price_of

Progress = Callable[[str], None]
PRICING_REGION = "us-east-1"  # the Pricing API's endpoint (it prices every region)


def _machine_type(info: dict[str, Any]) -> MachineType:
    name = info["InstanceType"]
    vcpus = float(info.get("VCpuInfo", {}).get("DefaultVCpus", 0))
    memory_gib = float(info.get("MemoryInfo", {}).get("SizeInMiB", 0)) / 1024
    gpus = info.get("GpuInfo", {}).get("Gpus") or []
    if not gpus:
        return MachineType(name, vcpus, memory_gib)
    gpu = gpus[0]
    count = int(sum(int(g.get("Count", 0)) for g in gpus))
    per_gpu_mib = float(gpu.get("MemoryInfo", {}).get("SizeInMiB", 0))
    return MachineType(name, vcpus, memory_gib, aws_gpu_name(str(gpu["Name"]), per_gpu_mib), count)


def _pages(client: Any, operation: str, key: str, **params: Any) -> Iterable[Any]:
    for page in client.get_paginator(operation).paginate(**params):
        yield from page.get(key, ())


def _read_region(
    session: Any, region: str, endpoint_url: str | None, facts: AwsFacts, now: dt.datetime
) -> tuple[int, int]:
    ec2 = session.client("ec2", region_name=region, endpoint_url=endpoint_url)
    for info in _pages(ec2, "describe_instance_types", "InstanceTypes"):
        spec = _machine_type(info)
        facts.types.setdefault(spec.name, spec)
    offered = 0
    for item in _pages(
        ec2,
        "describe_instance_type_offerings",
        "InstanceTypeOfferings",
        LocationType="availability-zone",
    ):
        name = item["InstanceType"]
        known = facts.types.get(name)
        if known is not None and keep_type("aws", name, known.accelerator):
            facts.zones.append((name, region, item["Location"]))
            offered += 1
    newest: dict[tuple[str, str], tuple[str, float]] = {}
    for entry in _pages(
        ec2,
        "describe_spot_price_history",
        "SpotPriceHistory",
        StartTime=now,
        ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
    ):
        key = (entry["InstanceType"], entry["AvailabilityZone"])
        stamp = str(entry.get("Timestamp", ""))
        if key not in newest or stamp > newest[key][0]:
            newest[key] = (stamp, float(entry["SpotPrice"]))
    facts.spot.update({key: price for key, (_, price) in newest.items()})
    return offered, len(newest)


def _read_prices(pricing: Any, region: str, facts: AwsFacts) -> int:
    filters = [
        {"Type": "TERM_MATCH", "Field": field, "Value": value}
        for field, value in (
            ("regionCode", region),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
        )
    ]
    found = 0
    for entry in _pages(
        pricing, "get_products", "PriceList", ServiceCode="AmazonEC2", Filters=filters
    ):
        price = aws_price_of(entry)
        if price is not None and price[1] == region:
            facts.on_demand[(price[0], region)] = price[2]
            found += 1
    return found


def fetch(
    session: Any,
    *,
    regions: Iterable[str] | None,
    endpoint_url: str | None,
    pricing_endpoint_url: str | None,
    progress: Progress,
    now: dt.datetime | None = None,
) -> tuple[AwsFacts, list[str]]:
    """Every region's answers (or those named), and the regions read. Raises
    CatalogFetchError with one line naming the cause."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    now = now or dt.datetime.now(dt.UTC)
    facts = AwsFacts()
    try:
        if session.get_credentials() is None:
            raise NoCredentialsError()
        ec2 = session.client("ec2", region_name=PRICING_REGION, endpoint_url=endpoint_url)
        known = sorted(r["RegionName"] for r in ec2.describe_regions()["Regions"])
        # Regions named for another cloud (europe-west1) are not AWS's to read.
        read = known if regions is None else [r for r in known if r in set(regions)]
        pricing = session.client(
            "pricing", region_name=PRICING_REGION, endpoint_url=pricing_endpoint_url
        )
        for region in read:
            offered, spots = _read_region(session, region, endpoint_url, facts, now)
            prices = _read_prices(pricing, region, facts)
            progress(
                f"aws {region}: {offered} offerings, {prices} on-demand prices, {spots} spot prices"
            )
    except NoCredentialsError:
        raise CatalogFetchError(
            "aws: no credentials found (AWS_ACCESS_KEY_ID, AWS_PROFILE or ~/.aws/credentials)"
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "error")
        raise CatalogFetchError(f"aws: {exc.operation_name} refused: {code}") from None
    except BotoCoreError as exc:
        raise CatalogFetchError(f"aws: {type(exc).__name__}: {exc}") from None
    return facts, read
