"""The local cloud file: instance types, regions and zones whose machines are local processes.

The local cloud is Corral's embedded provider: every "instance" is a node agent process on this
machine. Its file says what the cloud sells (instance types with prices), where (zones, each
with a capacity per type), and which faults to play (``errors``), so failover can be shown and
tested without a real cloud::

    instance_types:
      - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.10}
    regions:
      - name: lab-east
        zones:
          - name: lab-east-a
            capacity: {cpu-2: 8}          # a type missing here is not offered in the zone
            errors: {cpu-2: {kind: throttle, times: 2}}   # market: spot: that market only
            # a quota error blocks its quota family in the region (by default the type's
            # own: on_demand:T4 for a T4 type); {kind: quota, family: on_demand:cpu} names one
    reservations:
      - {id: r-1, zone: lab-east-a, instance_type: cpu-2, count: 2}

:func:`load_local_cloud` reads and checks a file; every mistake is a ``ConfigError`` naming
file, line and field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationInfo, model_validator

# Relative imports: `mypy shared` cannot follow `corral.*` through the editable install's finder.
from ..catalog.offering import Offering
from ..configio import (
    ConfigError,
    Document,
    PathKey,
    format_loc,
    load_file,
    parse_text,
    validate_doc,
)
from .base import StrictModel

# ``unregistered``: the launch succeeds and the machines start, but their agents never register
# (a boot script that stopped early): a fault of those machines, not of the zone.
ErrorKind = Literal["capacity", "quota", "throttle", "auth", "unregistered"]
ERROR_KINDS: tuple[str, ...] = ("capacity", "quota", "throttle", "auth", "unregistered")

# Validation context key: the loader checks references itself, with line numbers.
_DEFER_REFERENCES = "defer_references"


class InjectedError(StrictModel):
    """A fault the zone plays for one instance type: every launch, or only the first ``times``;
    in one market only when ``market`` names it (spot sold out, on-demand still sold)."""

    kind: ErrorKind
    times: int | None = Field(default=None, ge=1)  # None: every launch fails
    market: Literal["on_demand", "spot"] | None = None  # None: every market
    # A quota error's family (corral.shared.quota_families): None is the type's own,
    # ``on_demand:T4`` for a T4 type; name another to play a quota shared with other types.
    family: str | None = Field(default=None, min_length=1)

    def meets(self, market: str) -> bool:
        """Whether a launch in ``market`` meets this fault at all."""
        return self.market is None or self.market == market

    @model_validator(mode="after")
    def _family_only_for_quota(self) -> InjectedError:
        if self.family is not None and self.kind != "quota":
            raise ValueError("family: only a quota error names a quota family")
        return self

    def fails_launch(self, launch_number: int) -> bool:
        """Whether the ``launch_number``-th launch (1-based) of this type in the zone fails."""
        return self.times is None or launch_number <= self.times


def _error_from_word(value: Any) -> Any:
    """``quota`` is short for ``{kind: quota}``; a wrong word gets one clear message."""
    if isinstance(value, str):
        if value not in ERROR_KINDS:
            raise ValueError(
                f"unknown error kind {value!r}: expected one of {', '.join(ERROR_KINDS)}, "
                "or {kind: ..., times: N}"
            )
        return {"kind": value}
    return value


ErrorSpec = Annotated[InjectedError, BeforeValidator(_error_from_word)]


class InstanceType(StrictModel):
    """One machine shape the local cloud sells."""

    name: str = Field(min_length=1)
    vcpus: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    accelerators: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    price_usd_per_hour: float = Field(ge=0)
    spot_price_usd_per_hour: float | None = Field(default=None, ge=0)  # None: no spot market

    @model_validator(mode="after")
    def _one_accelerator_kind(self) -> InstanceType:
        if len(self.accelerators) > 1:
            raise ValueError("accelerators: an instance type carries one accelerator kind")
        return self

    @property
    def accelerator(self) -> str | None:
        """The accelerator's canonical (upper-case) name; None for CPU types."""
        return next((name.upper() for name in self.accelerators), None)

    @property
    def accelerator_count(self) -> int:
        return next(iter(self.accelerators.values()), 0)


class Zone(StrictModel):
    """A zone: what it offers (``capacity``), the faults it plays, how slow it launches."""

    name: str = Field(min_length=1)
    # instance type -> how many may run at once; a type missing here is not offered; 0 = sold out
    capacity: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    errors: dict[str, ErrorSpec] = Field(default_factory=dict)
    launch_delay_s: float = Field(default=0.0, ge=0)

    def offers(self, instance_type: str) -> bool:
        return instance_type in self.capacity


class Region(StrictModel):
    name: str = Field(min_length=1)
    zones: list[Zone] = Field(min_length=1)


class Reservation(StrictModel):
    """Capacity set aside for us: ``count`` instances of one type in one zone, apart from the
    zone's on-demand capacity (so a sold-out zone can still run reserved instances)."""

    id: str = Field(min_length=1)
    zone: str
    instance_type: str
    count: int = Field(ge=1)


class LocalCloud(StrictModel):
    """The whole local cloud file. Build it with :func:`load_local_cloud` or
    :func:`parse_local_cloud` (references are then checked with line numbers)."""

    instance_types: list[InstanceType] = Field(min_length=1)
    regions: list[Region] = Field(min_length=1)
    reservations: list[Reservation] = Field(default_factory=list)
    # Other clouds' instance type names -> local ones (e.g. p3.8xlarge -> gpu-v100-4).
    aliases: dict[str, str] = Field(default_factory=dict)

    _types: dict[str, InstanceType] = PrivateAttr(default_factory=dict)
    _zones: dict[str, tuple[str, Zone]] = PrivateAttr(default_factory=dict)
    _reservations: dict[str, Reservation] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        self._types = {t.name: t for t in self.instance_types}
        self._zones = {z.name: (r.name, z) for r in self.regions for z in r.zones}
        self._reservations = {r.id: r for r in self.reservations}

    @model_validator(mode="after")
    def _references(self, info: ValidationInfo) -> LocalCloud:
        if isinstance(info.context, dict) and info.context.get(_DEFER_REFERENCES):
            return self
        problems = self.reference_problems()
        if problems:
            raise ValueError("; ".join(f"{format_loc(p)}: {m}" for p, m in problems))
        return self

    def reference_problems(self) -> list[tuple[PathKey, str]]:
        """Names that are repeated or point at nothing, each with its path in the file."""
        return [
            *_duplicates(self),
            *_zone_references(self),
            *_reservation_references(self),
            *_alias_references(self),
        ]

    def zone(self, name: str) -> Zone:
        """The zone called ``name``; KeyError if the cloud has none."""
        return self._zones[name][1]

    def region_of(self, zone: str) -> str:
        """The name of the region holding ``zone``; KeyError if the cloud has no such zone."""
        return self._zones[zone][0]

    def instance_type(self, name: str) -> InstanceType:
        """The instance type called ``name`` (or aliased as ``name``); KeyError if none."""
        return self._types[self.aliases.get(name, name)]

    def reservation(self, reservation_id: str) -> Reservation:
        """The reservation with this id; KeyError if none."""
        return self._reservations[reservation_id]

    def placements(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        """(zone, region) pairs that offer ``instance_type`` (or what it aliases); the
        reservation's zone alone when ``reservation_id`` names one of this cloud's."""
        reservation = self._reservations.get(reservation_id) if reservation_id else None
        if reservation is not None:
            return [(reservation.zone, self.region_of(reservation.zone))]
        itype = self.aliases.get(instance_type, instance_type)
        return [(z.name, r.name) for r in self.regions for z in r.zones if z.offers(itype)]

    def offerings(self) -> list[Offering]:
        """One offering per (zone, type) the zone offers (sold-out ones too), in file order."""
        out: list[Offering] = []
        for region in self.regions:
            for zone in region.zones:
                for type_name in zone.capacity:
                    t = self._types[type_name]
                    out.append(
                        Offering(
                            cloud="local",
                            instance_type=t.name,
                            accelerator=t.accelerator,
                            accelerator_count=t.accelerator_count,
                            vcpus=t.vcpus,
                            memory_gib=t.memory_gib,
                            price_usd_per_hour=t.price_usd_per_hour,
                            spot_price_usd_per_hour=t.spot_price_usd_per_hour,
                            region=region.name,
                            zone=zone.name,
                        )
                    )
        return out


def _repeated(names: Sequence[tuple[PathKey, str]], what: str) -> list[tuple[PathKey, str]]:
    seen: set[str] = set()
    out: list[tuple[PathKey, str]] = []
    for path, name in names:
        if name in seen:
            out.append((path, f"{what} {name!r} is defined more than once"))
        seen.add(name)
    return out


def _duplicates(cloud: LocalCloud) -> list[tuple[PathKey, str]]:
    types = [(("instance_types", i, "name"), t.name) for i, t in enumerate(cloud.instance_types)]
    regions = [(("regions", i, "name"), r.name) for i, r in enumerate(cloud.regions)]
    zones = [
        (("regions", i, "zones", j, "name"), z.name)
        for i, r in enumerate(cloud.regions)
        for j, z in enumerate(r.zones)
    ]
    reservations = [(("reservations", i, "id"), r.id) for i, r in enumerate(cloud.reservations)]
    return [
        *_repeated(types, "instance type"),
        *_repeated(regions, "region"),
        *_repeated(zones, "zone"),
        *_repeated(reservations, "reservation"),
    ]


def _zone_references(cloud: LocalCloud) -> list[tuple[PathKey, str]]:
    known = {t.name for t in cloud.instance_types}
    out: list[tuple[PathKey, str]] = []
    for i, region in enumerate(cloud.regions):
        for j, zone in enumerate(region.zones):
            base: PathKey = ("regions", i, "zones", j)
            for name in zone.capacity:
                if name not in known:
                    out.append(((*base, "capacity", name), f"unknown instance type {name!r}"))
            for name in zone.errors:
                if name not in known:
                    out.append(((*base, "errors", name), f"unknown instance type {name!r}"))
                elif not zone.offers(name):
                    out.append(
                        (
                            (*base, "errors", name),
                            f"zone {zone.name!r} does not offer {name!r} (no capacity entry)",
                        )
                    )
    return out


def _reservation_references(cloud: LocalCloud) -> list[tuple[PathKey, str]]:
    known = {t.name for t in cloud.instance_types}
    zones = {z.name: z for r in cloud.regions for z in r.zones}
    out: list[tuple[PathKey, str]] = []
    for i, res in enumerate(cloud.reservations):
        zone = zones.get(res.zone)
        if zone is None:
            out.append((("reservations", i, "zone"), f"unknown zone {res.zone!r}"))
        if res.instance_type not in known:
            msg = f"unknown instance type {res.instance_type!r}"
            out.append((("reservations", i, "instance_type"), msg))
        elif zone is not None and not zone.offers(res.instance_type):
            msg = f"zone {res.zone!r} does not offer {res.instance_type!r} (no capacity entry)"
            out.append((("reservations", i, "instance_type"), msg))
    return out


def _alias_references(cloud: LocalCloud) -> list[tuple[PathKey, str]]:
    known = {t.name for t in cloud.instance_types}
    out: list[tuple[PathKey, str]] = []
    for alias, target in cloud.aliases.items():
        if alias in known:
            out.append((("aliases", alias), f"{alias!r} is already a local instance type"))
        elif target not in known:
            out.append((("aliases", alias), f"unknown instance type {target!r}"))
    return out


def local_cloud_from_doc(doc: Document) -> LocalCloud:
    """Validate a parsed document as a local cloud file; raises ConfigError."""
    if not isinstance(doc.data, dict):
        raise ConfigError.single(doc.name, "expected a mapping with instance_types and regions")
    cloud = validate_doc(LocalCloud, doc, context={_DEFER_REFERENCES: True})
    problems = cloud.reference_problems()
    if problems:
        raise ConfigError([doc.issue(path, message) for path, message in problems])
    return cloud


def load_local_cloud(path: str | Path) -> LocalCloud:
    """Read a local cloud file (YAML or JSON); raises ConfigError naming file and line."""
    return local_cloud_from_doc(load_file(path))


def parse_local_cloud(text: str, name: str = "<input>") -> LocalCloud:
    """Like :func:`load_local_cloud`, from text."""
    return local_cloud_from_doc(parse_text(text, name))
