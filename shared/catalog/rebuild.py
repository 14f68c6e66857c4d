"""Rebuild a cloud's catalog rows from what its own APIs answer (pure: no SDK, no network).

``corral catalog update`` (services/providers/<cloud>/catalog_fetch.py) asks the clouds and
hands their answers here as plain values; this module decides the rows:

- AWS: a row per (instance type, zone) that ``describe_instance_type_offerings`` lists, priced
  by the Pricing API's on-demand price for its region and the newest spot price of its zone
  (``describe_spot_price_history``; empty where none is recorded).
- GCP: a row per (machine type, zone) that ``machineTypes`` lists, priced from the Cloud
  Billing catalog's per-vCPU, per-GiB and per-GPU hourly prices of its region; N1 machines are
  also offered with the GPUs the zone's ``acceleratorTypes`` can attach.

A row without an on-demand price is left out (counted in :class:`Rebuilt`): the planner ranks
by price and cannot rank what has none. :func:`merge_regions` keeps the previous rows of the
regions an update did not read.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.shared.catalog.catalog import COLUMNS
from corral.shared.catalog.families import GCP_ACCELERATORS, GCP_SKU_GPUS, family, keep_type
from corral.shared.catalog.offering import Offering

ON_DEMAND = "on_demand"
SPOT = "spot"


class CatalogFetchError(Exception):
    """A cloud could not be read (no credentials, refused, unreachable): said in one line."""


@dataclass(frozen=True, slots=True)
class MachineType:
    """One instance type's size, with the GPUs it always carries (none: ``None, 0``)."""

    name: str
    vcpus: float
    memory_gib: float
    accelerator: str | None = None
    accelerator_count: int = 0


@dataclass
class Rebuilt:
    """The rows decided, and what was left out (for the command's summary)."""

    offerings: list[Offering] = field(default_factory=list)
    left_out_family: int = 0  # types outside the GPU and common CPU families
    left_out_unpriced: int = 0  # (type, zone) pairs with no on-demand price

    def summary(self, cloud: str) -> str:
        regions = len({o.region for o in self.offerings})
        types = len({o.instance_type for o in self.offerings})
        return (
            f"{cloud}: {len(self.offerings)} rows, {types} instance types, {regions} regions "
            f"({self.left_out_unpriced} unpriced offerings and {self.left_out_family} types of "
            "other families left out)"
        )


def sort_rows(offerings: Iterable[Offering]) -> list[Offering]:
    return sorted(
        offerings,
        key=lambda o: (o.instance_type, o.accelerator or "", o.accelerator_count, o.region, o.zone),
    )


# --------------------------------------------------------------------------------------- AWS
@dataclass
class AwsFacts:
    """What the EC2 and Pricing APIs answered."""

    types: dict[str, MachineType] = field(default_factory=dict)  # describe_instance_types
    zones: list[tuple[str, str, str]] = field(default_factory=list)  # (type, region, zone)
    on_demand: dict[tuple[str, str], float] = field(default_factory=dict)  # (type, region)
    spot: dict[tuple[str, str], float] = field(default_factory=dict)  # (type, zone): newest


def aws_rows(facts: AwsFacts) -> Rebuilt:
    """The AWS rows: every offered (type, zone) of a kept family that has a list price."""
    out = Rebuilt()
    left_family: set[str] = set()
    for name, region, zone in facts.zones:
        spec = facts.types.get(name)
        if spec is None or not keep_type("aws", name, spec.accelerator):
            left_family.add(name)
            continue
        price = facts.on_demand.get((name, region))
        if price is None:
            out.left_out_unpriced += 1
            continue
        out.offerings.append(
            make_row("aws", spec, price, facts.spot.get((name, zone)), region, zone)
        )
    out.left_out_family = len(left_family)
    out.offerings = sort_rows(out.offerings)
    return out


def make_row(
    cloud: str, spec: MachineType, price: float, spot: float | None, region: str, zone: str
) -> Offering:
    """One row; a spot price above on-demand is capped at on-demand (AWS never charges spot
    above on-demand; a source's higher figure is its rounding, as SkyPilot's 18.8381 against
    18.83806, or a GCP GPU SKU priced above its on-demand one)."""
    if spot is not None and spot > price:
        spot = price
    return Offering(
        cloud=cloud,
        instance_type=spec.name,
        accelerator=spec.accelerator,
        accelerator_count=spec.accelerator_count if spec.accelerator else 0,
        vcpus=spec.vcpus,
        memory_gib=spec.memory_gib,
        price_usd_per_hour=round(price, 6),
        spot_price_usd_per_hour=round(spot, 6) if spot is not None else None,
        region=region,
        zone=zone,
    )


def aws_price_of(product_json: str | Mapping[str, Any]) -> tuple[str, str, float] | None:
    """One Pricing API ``PriceList`` entry -> (instance type, region, USD per hour) for a
    shared-tenancy Linux machine with no pre-installed software; None for any other entry
    (a reservation line, Windows, a dedicated host, a zero "unused reservation" price)."""
    item = json.loads(product_json) if isinstance(product_json, str) else product_json
    attrs = item.get("product", {}).get("attributes", {})
    wanted = {
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    if any(attrs.get(k, v) != v for k, v in wanted.items()):
        return None
    name, region = attrs.get("instanceType"), attrs.get("regionCode")
    if not (name and region):
        return None
    for term in item.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if usd is not None and float(usd) > 0:
                return str(name), str(region), float(usd)
    return None


# --------------------------------------------------------------------------------------- GCP
@dataclass
class GcpFacts:
    """What the Compute API and the Cloud Billing catalog answered."""

    machine_types: dict[str, list[MachineType]] = field(default_factory=dict)  # zone -> types
    accelerators: dict[str, dict[str, int]] = field(default_factory=dict)  # zone -> name: max
    # (family or GPU name, "core" | "ram" | "gpu", region, market) -> USD per unit-hour
    prices: dict[tuple[str, str, str, str], float] = field(default_factory=dict)


# N1 machines carry attachable GPUs: for each count, the N1 hosts offered with it (the
# shapes SkyPilot's catalog pairs with 1, 2, 4 and 8 GPUs).
N1_HOSTS: dict[int, tuple[str, ...]] = {
    1: ("n1-standard-4", "n1-standard-8"),
    2: ("n1-standard-16",),
    4: ("n1-standard-32",),
    8: ("n1-standard-64",),
}
N1_GPUS = ("T4", "V100", "P100", "P4")


def region_of_zone(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]


def _gcp_price(
    facts: GcpFacts, spec: MachineType, region: str, market: str, gpus: tuple[str, int] | None
) -> float | None:
    fam = family("gcp", spec.name)
    core = facts.prices.get((fam, "core", region, market))
    ram = facts.prices.get((fam, "ram", region, market))
    if core is None or ram is None:
        return None
    total = spec.vcpus * core + spec.memory_gib * ram
    if gpus is not None:
        per_gpu = facts.prices.get((gpus[0], "gpu", region, market))
        if per_gpu is None:
            return None
        total += gpus[1] * per_gpu
    return total


def gcp_rows(facts: GcpFacts) -> Rebuilt:
    """The GCP rows: every listed (machine type, zone) of a kept family that has a price,
    and the N1 hosts with each GPU the zone can attach."""
    out = Rebuilt()
    left_family: set[str] = set()
    for zone, specs in sorted(facts.machine_types.items()):
        region = region_of_zone(zone)
        by_name = {s.name: s for s in specs}
        shapes: list[tuple[MachineType, tuple[str, int] | None]] = []
        for spec in specs:
            if not keep_type("gcp", spec.name, spec.accelerator):
                left_family.add(spec.name)
                continue
            built_in = (spec.accelerator, spec.accelerator_count) if spec.accelerator else None
            shapes.append((spec, built_in))
        for gpu, most in sorted(facts.accelerators.get(zone, {}).items()):
            if gpu not in N1_GPUS:
                continue
            for count, hosts in N1_HOSTS.items():
                for host in hosts:
                    if count <= most and host in by_name:
                        base = by_name[host]
                        shapes.append(
                            (
                                MachineType(host, base.vcpus, base.memory_gib, gpu, count),
                                (gpu, count),
                            )
                        )
        for spec, gpus in shapes:
            price = _gcp_price(facts, spec, region, ON_DEMAND, gpus)
            if price is None:
                out.left_out_unpriced += 1
                continue
            spot = _gcp_price(facts, spec, region, SPOT, gpus)
            out.offerings.append(make_row("gcp", spec, price, spot, region, zone))
    out.left_out_family = len(left_family)
    out.offerings = sort_rows(out.offerings)
    return out


_SKU_PART = re.compile(
    r"^(?P<spot>spot preemptible |preemptible )?(?P<family>[a-z0-9]+) (?:predefined |amd )?"
    r"instance (?P<part>core|ram) running in",
)
_SKU_GPU = re.compile(
    r"^(?P<spot>spot preemptible |preemptible )?nvidia (?P<gpu>.+?) gpu running in"
)


def gcp_sku_prices(skus: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str, str], float]:
    """Cloud Billing catalog SKUs (the Compute Engine service's) -> the prices
    :func:`gcp_rows` reads: ``(family or GPU, part, region, market) -> USD per hour`` (per
    vCPU, per GiB or per GPU). SKUs of commitments, sole tenancy and custom shapes are skipped:
    their descriptions do not match."""
    prices: dict[tuple[str, str, str, str], float] = {}
    for sku in skus:
        text = str(sku.get("description", "")).lower()
        part_match = _SKU_PART.match(text)
        gpu_match = _SKU_GPU.match(text) if part_match is None else None
        if part_match is not None:
            key, part, spot = part_match["family"], part_match["part"], part_match["spot"]
        elif gpu_match is not None and gpu_match["gpu"] in GCP_SKU_GPUS:
            key, part, spot = GCP_SKU_GPUS[gpu_match["gpu"]], "gpu", gpu_match["spot"]
        else:
            continue
        price = _unit_price(sku)
        if price is None:
            continue
        market = SPOT if spot else ON_DEMAND
        for region in sku.get("serviceRegions", ()):
            prices[(key, part, str(region), market)] = price
    return prices


def _unit_price(sku: Mapping[str, Any]) -> float | None:
    """The hourly list price of a SKU (its last tier: past any free allowance), None if it
    has none."""
    for info in sku.get("pricingInfo", ()):
        expr = info.get("pricingExpression", {})
        rates = expr.get("tieredRates", ())
        if not rates:
            continue
        money = rates[-1].get("unitPrice", {})
        nanos = int(money.get("units", 0) or 0) * 10**9 + int(money.get("nanos", 0) or 0)
        value = nanos / 1e9
        unit = str(expr.get("usageUnit", "h"))
        if unit == "GiBy.h" or unit == "h":
            return value
    return None


def gcp_accelerator_name(type_name: str) -> str | None:
    """``nvidia-tesla-t4`` -> ``T4`` (None for an accelerator Corral does not name)."""
    return GCP_ACCELERATORS.get(type_name.rsplit("/", 1)[-1])


# ------------------------------------------------------------------------------ merge, write
def merge_regions(
    previous: Iterable[Offering], fresh: Iterable[Offering], regions_read: Iterable[str]
) -> list[Offering]:
    """The fresh rows for the regions read, and the previous rows of every other region
    (an update limited to some regions keeps the rest as they were)."""
    read = set(regions_read)
    kept = [o for o in previous if o.region not in read]
    return sort_rows([*kept, *fresh])


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def to_csv(offerings: Iterable[Offering]) -> str:
    """The catalog file's text for these rows (the columns of data/README.md)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for o in offerings:
        spot = o.spot_price_usd_per_hour
        writer.writerow(
            [
                o.instance_type,
                o.accelerator or "",
                o.accelerator_count if o.accelerator else "",
                _number(o.vcpus),
                _number(o.memory_gib),
                _number(o.price_usd_per_hour),
                "" if spot is None else _number(spot),
                o.region,
                o.zone,
            ]
        )
    return buf.getvalue()
