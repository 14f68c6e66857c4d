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

A cloud played as pods (``kubernetes``, :data:`corral.shared.clouds.SIMULATED_CLOUDS`) is
written as its clusters, not as priced zones: kubeconfig contexts (its regions), each with its
namespaces (its zones, a ResourceQuota each may have) and its nodes; its instance types are
the node shapes (``8CPU--32GB--T4:1``), priced 0 (see :mod:`corral.shared.sim.pods`)::

    clouds:
      kubernetes:
        boot: 20s                 # a pod bound to a node is up after this (image, agent)
        call: 1s                  # creating a pod, answered or refused
        schedule_wait: 10s        # the provider's schedule_wait_s
        scheduler: 1s             # the scheduler binds a pod, or calls it Unschedulable
        contexts:
          lab:
            namespaces:
              default: {}
              team-a: {quota: {requests.nvidia.com/gpu: 2, requests.cpu: 64}}
            nodes:
              - {count: 4, cpus: 8, memory_gib: 32, accelerator: T4, gpus: 1}
              - {count: 6, cpus: 16, memory_gib: 64}

Times are seconds (a number) or durations (``90s``, ``12h``, ``1d``) from the start of the
simulated day. Every model forbids unknown keys; :func:`load_scenario` reports each mistake as
``FILE:LINE: field: what was expected``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator

from ..autoscaler.kube_pods import quantity
from ..catalog.catalog import Catalog
from ..catalog.offering import Offering
from ..clouds import SIMULATED_CLOUDS
from ..config import parse_duration_s
from ..config.base import StrictModel
from ..configio import ConfigError, Document, PathKey, load_file, validate_doc
from ..pod_shapes import QUOTA_RESOURCES, shape_name, shape_offerings


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


class NodeGroup(StrictModel):
    """``count`` nodes of one shape: their allocatable cpu, memory and GPUs (of one kind)."""

    count: int = Field(ge=0)
    cpus: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    accelerator: str | None = None  # the kind a node label names (T4, A100, ...)
    gpus: int = Field(0, ge=0)  # allocatable nvidia.com/gpu

    @property
    def shape(self) -> str:
        """The instance type the provider lists these nodes as (``8CPU--32GB--T4:1``)."""
        accelerator = (self.accelerator or "GPU") if self.gpus else None
        return shape_name(self.cpus, self.memory_gib, accelerator, self.gpus)


class NamespaceSpec(StrictModel):
    """A namespace Corral launches in; ``quota``: its ResourceQuota's ``hard`` limits, as
    Kubernetes writes them (``requests.nvidia.com/gpu: 2``, ``requests.memory: 256Gi``)."""

    quota: dict[str, float] = Field(default_factory=dict)

    @field_validator("quota", mode="before")
    @classmethod
    def _quantities(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out: dict[object, float] = {}
        for resource, amount in value.items():
            if resource not in QUOTA_RESOURCES:
                raise ValueError(
                    f"{resource!r}: expected a resource Corral's pods count against "
                    f"({', '.join(QUOTA_RESOURCES)})"
                )
            out[resource] = quantity(amount)
        return out


class ContextSpec(StrictModel):
    """A kubeconfig context (the cloud's region): its namespaces (its zones) and its nodes."""

    namespaces: dict[str, NamespaceSpec] = Field(min_length=1)
    nodes: list[NodeGroup] = Field(min_length=1)

    def shapes(self) -> dict[str, NodeGroup]:
        """Each node shape of the context, as the provider lists them: fewest GPUs, then CPUs,
        then memory first (one group per shape: the first written)."""
        groups = sorted(
            (g for g in self.nodes if g.count), key=lambda g: (g.gpus, g.cpus, g.memory_gib)
        )
        out: dict[str, NodeGroup] = {}
        for group in groups:
            out.setdefault(group.shape, group)
        return out


class PodCloudSpec(StrictModel):
    """A cloud played as pods (a Kubernetes cluster per context): see the module docstring."""

    boot_s: TimeS = Field(20.0, alias="boot")
    call_s: TimeS = Field(1.0, alias="call")
    schedule_wait_s: TimeS = Field(10.0, alias="schedule_wait")
    scheduler_s: TimeS = Field(1.0, alias="scheduler")
    api: ApiSpec = Field(default_factory=ApiSpec)
    contexts: dict[str, ContextSpec] = Field(min_length=1)

    def refused_after_s(self) -> float:
        """When a launch learns its pods cannot be scheduled: the scheduler's verdict, or the
        provider's wait for one, whichever comes first, after the pods were created."""
        return self.call_s + min(self.scheduler_s, self.schedule_wait_s)


def _played_as(value: object) -> str:
    """How a cloud of the file is written: as clusters (``contexts``: ``pods``), else as
    priced zones (``machines``)."""
    if isinstance(value, PodCloudSpec) or (isinstance(value, dict) and "contexts" in value):
        return "pods"
    return "machines"


AnyCloudSpec = Annotated[
    Annotated[CloudSpec, Tag("CloudSpec")] | Annotated[PodCloudSpec, Tag("PodCloudSpec")],
    Discriminator(lambda value: "PodCloudSpec" if _played_as(value) == "pods" else "CloudSpec"),
]


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
    clouds: dict[str, AnyCloudSpec] = Field(min_length=1)
    reservations: list[ReservationSpec] = Field(default_factory=list)
    outages: list[OutageSpec] = Field(default_factory=list)
    quotas: list[QuotaSpec] = Field(default_factory=list)

    def problems(self) -> list[tuple[PathKey, str]]:
        """Names that point nowhere, each with its path in the file."""
        out: list[tuple[PathKey, str]] = []
        for name, cloud in self.clouds.items():
            if name not in SIMULATED_CLOUDS:
                out.append((("clouds", name), f"expected one of {', '.join(SIMULATED_CLOUDS)}"))
                continue
            played = SIMULATED_CLOUDS[name]
            if played != _played_as(cloud):
                written = (
                    "contexts (its clusters)" if played == "pods" else "instance_types and regions"
                )
                out.append((("clouds", name), f"{name} is played as {played}: expected {written}"))
                continue
            if isinstance(cloud, PodCloudSpec):
                out.extend(_pod_problems(name, cloud))
                continue
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
            if isinstance(self.clouds.get(res.cloud), PodCloudSpec):
                out.append(
                    (
                        (*path, "cloud"),
                        f"{res.cloud} has no reservations (its nodes are its capacity)",
                    )
                )
            elif (res.cloud, res.zone) not in zones:
                out.append(((*path, "zone"), f"no zone {res.zone!r} in cloud {res.cloud!r}"))
            elif res.instance_type not in self.instance_types(res.cloud):
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

    def _regions(self, cloud: str) -> dict[str, object]:
        spec = self.clouds.get(cloud)
        if isinstance(spec, PodCloudSpec):
            return dict(spec.contexts)
        return dict(spec.regions) if spec else {}

    def instance_types(self, cloud: str) -> dict[str, tuple[str | None, int]]:
        """A cloud's instance types, each with its accelerator and how many (a pod cloud's:
        its node shapes)."""
        spec = self.clouds.get(cloud)
        if isinstance(spec, PodCloudSpec):
            return {
                name: (group.accelerator if group.gpus else None, group.gpus)
                for context in spec.contexts.values()
                for name, group in context.shapes().items()
            }
        if spec is None:
            return {}
        return {
            name: next(iter(t.accelerators.items()), (None, 0))
            for name, t in spec.instance_types.items()
        }

    def places(self) -> Iterator[tuple[str, str, str]]:
        """``(cloud, zone, region)`` of every zone, in file order (a pod cloud's: each
        context's namespaces)."""
        for cname, cloud in self.clouds.items():
            if isinstance(cloud, PodCloudSpec):
                for context, spec in cloud.contexts.items():
                    for namespace in spec.namespaces:
                        yield cname, namespace, context
                continue
            for rname, region in cloud.regions.items():
                for zname in region.zones:
                    yield cname, zname, rname

    def slot(self, cloud: str, region: str, zone: str, instance_type: str) -> Slot | None:
        """The zone's capacity of a type: its own, else its region's, else its cloud's (a pod
        cloud has none: its nodes are scheduled, :mod:`corral.shared.sim.pods`)."""
        c = self.clouds[cloud]
        if isinstance(c, PodCloudSpec):
            return None
        r = c.regions[region]
        for table in (r.zones[zone].capacity, r.capacity, c.capacity):
            if instance_type in table:
                return table[instance_type]
        return None

    def catalog(self) -> Catalog:
        """The offerings the planner sees: every type a zone has capacity or a reservation
        for, at the region's prices (the list price; a spot slot's own price when it sets one)."""
        reserved = {(r.cloud, r.zone, r.instance_type) for r in self.reservations}
        offerings: list[Offering] = []
        for cname, cloud in self.clouds.items():
            if isinstance(cloud, PodCloudSpec):
                offerings.extend(_pod_offerings(cname, cloud))
                continue
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


def _pod_offerings(cloud: str, spec: PodCloudSpec) -> Iterator[Offering]:
    """A pod cloud's offerings as its provider lists them live from the nodes."""
    for context, cspec in spec.contexts.items():
        for name, group in cspec.shapes().items():
            accelerator = (group.accelerator or "GPU").upper() if group.gpus else None
            yield from shape_offerings(
                cloud,
                context,
                cspec.namespaces,
                name,
                cpus=group.cpus,
                memory_gib=group.memory_gib,
                accelerator=accelerator,
                accelerator_count=group.gpus,
            )


def _pod_problems(name: str, spec: PodCloudSpec) -> Iterator[tuple[PathKey, str]]:
    for context, cspec in spec.contexts.items():
        for i, group in enumerate(cspec.nodes):
            where: PathKey = ("clouds", name, "contexts", context, "nodes", i)
            if group.gpus and not group.accelerator:
                yield (*where, "accelerator"), "nodes with gpus need the accelerator they hold"
            if group.accelerator and not group.gpus:
                yield (*where, "gpus"), f"expected the number of {group.accelerator} per node"


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
