"""A simulation scenario: the clouds as the simulator plays them, read from a user's file.

::

    name: seeded-day
    seed: 7
    duration: 1d
    clouds:
      aws:
        boot: 90s                 # a launch taken is up after this
        call: 2s                  # one launch call, answered or refused
        api: {throttle_rate: 0.01, error_rate: 0.002}
        instance_types:
          p4d.24xlarge: {accelerators: {A100: 8}, vcpus: 96, memory_gib: 1152,
                         price_usd_per_hour: 32.77, spot_price_usd_per_hour: 13.1}
        capacity:                 # every zone's, unless its region or itself says otherwise
          p4d.24xlarge: {on_demand: 2, spot: 4, spot_preemptions_per_hour: 0.05}
        regions:
          us-east-1:
            price_factor: 1.0
            zones:
              us-east-1a:
                capacity: {p4d.24xlarge: {spot: [{at: 0s, count: 6}, {at: 12h, count: 1}]}}
    reservations:
      - {id: cr-a100, cloud: aws, zone: us-east-1a, instance_type: p4d.24xlarge, count: 4,
         price_usd_per_hour: 21.0}
    outages:
      - {cloud: aws, zone: us-east-1b, from: 9h, to: 13h, error: capacity}
    quotas:                       # a quota family used up in a region (see quota_families)
      - {cloud: aws, region: us-west-2, family: "on_demand:p", from: 2h, to: 8h}

Times are seconds (a number) or durations (``90s``, ``12h``, ``1d``) from the start of the
simulated day. Every model forbids unknown keys; :func:`load_scenario` reports each mistake as
``FILE:LINE: field: what was expected``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from ..catalog.catalog import Catalog
from ..catalog.offering import Offering
from ..clouds import PROVIDER_CLOUDS
from ..config import parse_duration_s
from ..config.base import StrictModel
from ..configio import ConfigError, Document, PathKey, load_file, validate_doc


def _time_s(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"expected seconds or a duration like 90s or 12h, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a time >= 0, got {value!r}")
        return float(value)
    if isinstance(value, str):
        return parse_duration_s(value)
    raise ValueError(f"expected seconds or a duration like 90s or 12h, got {value!r}")


TimeS = Annotated[float, BeforeValidator(_time_s)]


class Step(StrictModel):
    """From ``at`` on, the capacity is ``count`` instances."""

    at: TimeS
    count: int = Field(ge=0)


Capacity = int | list[Step]


class Slot(StrictModel):
    """One instance type in one zone: instances the cloud has for Corral, per market."""

    on_demand: Capacity = 0
    spot: Capacity = 0
    spot_preemptions_per_hour: float = Field(0.0, ge=0)  # per running spot instance
    spot_price_usd_per_hour: float | None = Field(None, gt=0)  # the type's, unless set


class TypeSpec(StrictModel):
    """An instance type and its list prices."""

    accelerators: dict[str, int] = Field(default_factory=dict)
    vcpus: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    price_usd_per_hour: float = Field(gt=0)
    spot_price_usd_per_hour: float | None = Field(None, gt=0)


class ZoneSpec(StrictModel):
    capacity: dict[str, Slot] = Field(default_factory=dict)


class RegionSpec(StrictModel):
    price_factor: float = Field(1.0, gt=0)  # the region's prices are the list prices times this
    capacity: dict[str, Slot] = Field(default_factory=dict)
    zones: dict[str, ZoneSpec] = Field(min_length=1)


class ApiSpec(StrictModel):
    """The share of launch calls the cloud's API throttles or fails for no reason of capacity."""

    throttle_rate: float = Field(0.0, ge=0, le=1)
    error_rate: float = Field(0.0, ge=0, le=1)


class CloudSpec(StrictModel):
    boot_s: TimeS = Field(60.0, alias="boot")
    call_s: TimeS = Field(2.0, alias="call")
    api: ApiSpec = Field(default_factory=ApiSpec)
    instance_types: dict[str, TypeSpec] = Field(min_length=1)
    capacity: dict[str, Slot] = Field(default_factory=dict)
    regions: dict[str, RegionSpec] = Field(min_length=1)


class ReservationSpec(StrictModel):
    """Capacity bought ahead: ``count`` instances in one zone, paid for its whole window."""

    id: str
    cloud: str
    zone: str
    instance_type: str
    count: int = Field(ge=1)
    price_usd_per_hour: float = Field(gt=0)  # per instance, used or not
    from_s: TimeS = Field(0.0, alias="from")
    to_s: TimeS | None = Field(None, alias="to")


class OutageSpec(StrictModel):
    """A zone or region that refuses launches for a window (``capacity``: sold out, blocks the
    zone; ``timeout``: hangs, blocks the region), and may take its running machines with it."""

    cloud: str
    region: str | None = None
    zone: str | None = None
    from_s: TimeS = Field(alias="from")
    to_s: TimeS = Field(alias="to")
    error: Literal["capacity", "timeout"] = "capacity"
    lose_running: bool = False


class QuotaSpec(StrictModel):
    """An account quota used up in a region for a window: every launch counting against
    ``family`` there (:mod:`corral.shared.quota_families`: ``on_demand:g-vt`` on AWS,
    ``NVIDIA_T4_GPUS`` on GCP) is refused with a quota error naming it."""

    cloud: str
    region: str
    family: str = Field(min_length=1)
    from_s: TimeS = Field(0.0, alias="from")
    to_s: TimeS | None = Field(None, alias="to")  # None: the whole day


class Scenario(StrictModel):
    """The whole scenario file."""

    name: str = "scenario"
    seed: int = 0
    duration_s: TimeS = Field(86400.0, alias="duration")
    sample_every_s: TimeS = Field(300.0, alias="sample_every")
    clouds: dict[str, CloudSpec] = Field(min_length=1)
    reservations: list[ReservationSpec] = Field(default_factory=list)
    outages: list[OutageSpec] = Field(default_factory=list)
    quotas: list[QuotaSpec] = Field(default_factory=list)

    def problems(self) -> list[tuple[PathKey, str]]:
        """Names that point nowhere, each with its path in the file."""
        out: list[tuple[PathKey, str]] = []
        for name, cloud in self.clouds.items():
            if name not in PROVIDER_CLOUDS:
                out.append((("clouds", name), f"expected one of {', '.join(PROVIDER_CLOUDS)}"))
            types = cloud.instance_types
            for where, table in _capacity_tables(name, cloud):
                out.extend(
                    ((*where, t), f"no instance type {t!r} in clouds.{name}.instance_types")
                    for t in table
                    if t not in types
                )
        zones = {(c, z): r for c, z, r in self.places()}
        for i, res in enumerate(self.reservations):
            path: PathKey = ("reservations", i)
            if (res.cloud, res.zone) not in zones:
                out.append(((*path, "zone"), f"no zone {res.zone!r} in cloud {res.cloud!r}"))
            elif res.instance_type not in self.clouds[res.cloud].instance_types:
                out.append(((*path, "instance_type"), f"no instance type {res.instance_type!r}"))
        for i, outage in enumerate(self.outages):
            path = ("outages", i)
            if outage.zone is None and outage.region is None:
                out.append((path, "an outage needs a zone or a region"))
            elif outage.zone is not None and (outage.cloud, outage.zone) not in zones:
                out.append(((*path, "zone"), f"no zone {outage.zone!r} in cloud {outage.cloud!r}"))
            elif outage.region is not None and outage.region not in self._regions(outage.cloud):
                out.append(((*path, "region"), f"no region {outage.region!r}"))
            if outage.to_s <= outage.from_s:
                out.append(((*path, "to"), "expected a time after from"))
        for i, quota in enumerate(self.quotas):
            path = ("quotas", i)
            if quota.region not in self._regions(quota.cloud):
                out.append(((*path, "region"), f"no region {quota.region!r} in {quota.cloud!r}"))
            if quota.to_s is not None and quota.to_s <= quota.from_s:
                out.append(((*path, "to"), "expected a time after from"))
        return out

    def _regions(self, cloud: str) -> dict[str, RegionSpec]:
        spec = self.clouds.get(cloud)
        return spec.regions if spec else {}

    def places(self) -> Iterator[tuple[str, str, str]]:
        """``(cloud, zone, region)`` of every zone, in file order."""
        for cname, cloud in self.clouds.items():
            for rname, region in cloud.regions.items():
                for zname in region.zones:
                    yield cname, zname, rname

    def slot(self, cloud: str, region: str, zone: str, instance_type: str) -> Slot | None:
        """The zone's capacity of a type: its own, else its region's, else its cloud's."""
        c = self.clouds[cloud]
        r = c.regions[region]
        for table in (r.zones[zone].capacity, r.capacity, c.capacity):
            if instance_type in table:
                return table[instance_type]
        return None

    def catalog(self) -> Catalog:
        """The offerings the planner sees: every type a zone has capacity or a reservation
        for, at the region's prices (the list price; a spot slot's own price when it sets one)."""
        reserved = {(r.cloud, r.zone, r.instance_type) for r in self.reservations}
        offerings = []
        for cname, cloud in self.clouds.items():
            for rname, region in cloud.regions.items():
                for zname in region.zones:
                    for tname, t in cloud.instance_types.items():
                        slot = self.slot(cname, rname, zname, tname)
                        if slot is None and (cname, zname, tname) not in reserved:
                            continue
                        offerings.append(_offering(cname, rname, zname, tname, t, slot, region))
        return Catalog(offerings)


def _offering(
    cloud: str, region: str, zone: str, name: str, t: TypeSpec, slot: Slot | None, r: RegionSpec
) -> Offering:
    first = next(iter(t.accelerators.items()), None)
    accelerator, count = first if first else (None, 0)
    spot = slot.spot_price_usd_per_hour if slot and slot.spot_price_usd_per_hour else None
    spot = spot or t.spot_price_usd_per_hour
    return Offering(
        cloud=cloud,
        instance_type=name,
        accelerator=accelerator.upper() if accelerator else None,
        accelerator_count=count,
        vcpus=t.vcpus,
        memory_gib=t.memory_gib,
        price_usd_per_hour=round(t.price_usd_per_hour * r.price_factor, 6),
        spot_price_usd_per_hour=round(spot * r.price_factor, 6) if spot else None,
        region=region,
        zone=zone,
    )


def _capacity_tables(name: str, cloud: CloudSpec) -> Iterator[tuple[PathKey, dict[str, Slot]]]:
    yield ("clouds", name, "capacity"), cloud.capacity
    for rname, region in cloud.regions.items():
        yield ("clouds", name, "regions", rname, "capacity"), region.capacity
        for zname, zone in region.zones.items():
            yield ("clouds", name, "regions", rname, "zones", zname, "capacity"), zone.capacity


def scenario_from_doc(doc: Document) -> Scenario:
    """Validate a parsed scenario file; every mistake at once, with its line."""
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping with clouds (and reservations, outages, ...)")
    scenario = validate_doc(Scenario, doc)
    problems = scenario.problems()
    if problems:
        raise ConfigError([doc.issue(path, message) for path, message in problems])
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file (:class:`ConfigError` naming file, line and field when wrong)."""
    return scenario_from_doc(load_file(path))
