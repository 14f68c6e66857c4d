"""What ``corral show-gpus`` reports: accelerators by name, and each one's instance types with
their cheapest region, computed from a catalog (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.shared.catalog.catalog import Catalog


@dataclass(frozen=True, slots=True)
class AcceleratorSummary:
    """One accelerator across the catalog: the per-machine counts and the clouds offering it."""

    name: str
    counts: tuple[int, ...]  # ascending
    clouds: tuple[str, ...]  # catalog order

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "counts": list(self.counts), "clouds": list(self.clouds)}


@dataclass(frozen=True, slots=True)
class AcceleratorOffer:
    """One instance type carrying an accelerator, at its cheapest region."""

    accelerator: str
    count: int
    cloud: str
    instance_type: str
    vcpus: float
    memory_gib: float
    price_usd_per_hour: float  # cheapest on-demand price over the type's zones
    region: str  # where that price applies (the first such region in catalog order)
    spot_price_usd_per_hour: float | None  # cheapest spot price, None if never offered
    spot_region: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "accelerator": self.accelerator,
            "count": self.count,
            "cloud": self.cloud,
            "instance_type": self.instance_type,
            "vcpus": self.vcpus,
            "memory_gib": self.memory_gib,
            "price_usd_per_hour": self.price_usd_per_hour,
            "region": self.region,
            "spot_price_usd_per_hour": self.spot_price_usd_per_hour,
            "spot_region": self.spot_region,
        }


def summaries(catalog: Catalog, cloud: str | None = None) -> list[AcceleratorSummary]:
    """Every accelerator (of one cloud, or all), sorted by name."""
    out = []
    for name in catalog.accelerators():
        offs = [catalog.offerings[i] for i in catalog.by_accelerator[name]]
        offs = [o for o in offs if cloud is None or o.cloud == cloud]
        if offs:
            counts = tuple(sorted({o.accelerator_count for o in offs}))
            clouds = tuple(dict.fromkeys(o.cloud for o in offs))
            out.append(AcceleratorSummary(name, counts, clouds))
    return out


def offers(
    catalog: Catalog, name: str, *, count: int | None = None, cloud: str | None = None
) -> list[AcceleratorOffer]:
    """The instance types carrying accelerator ``name`` (canonical), each at its cheapest
    region; sorted by count, then on-demand price, then catalog order."""
    best: dict[tuple[str, str, int], AcceleratorOffer] = {}
    order: dict[tuple[str, str, int], int] = {}
    for i in catalog.by_accelerator.get(name, ()):
        o = catalog.offerings[i]
        if (count is not None and o.accelerator_count != count) or (cloud and o.cloud != cloud):
            continue
        key = (o.cloud, o.instance_type, o.accelerator_count)
        order.setdefault(key, i)
        prev = best.get(key)
        price, region = o.price_usd_per_hour, o.region
        spot = o.spot_price_usd_per_hour
        spot_region = o.region if spot is not None else None
        if prev is not None:
            if prev.price_usd_per_hour <= price:
                price, region = prev.price_usd_per_hour, prev.region
            if prev.spot_price_usd_per_hour is not None and (
                spot is None or prev.spot_price_usd_per_hour <= spot
            ):
                spot, spot_region = prev.spot_price_usd_per_hour, prev.spot_region
        best[key] = AcceleratorOffer(
            name,
            o.accelerator_count,
            o.cloud,
            o.instance_type,
            o.vcpus,
            o.memory_gib,
            price,
            region,
            spot,
            spot_region,
        )
    return sorted(
        best.values(),
        key=lambda a: (a.count, a.price_usd_per_hour, order[(a.cloud, a.instance_type, a.count)]),
    )
