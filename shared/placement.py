"""Where a machine runs and how it is bought, as one value.

:class:`Placement` is the cloud, region, zone, instance type, market and, when the machine is
bought from one, the reservation. Every record, step, run and view that says where something
runs carries it: the plain values hold one (a planner candidate, a run, a pool machine's
work), and the stored records and API views declare its fields once, through
:class:`PlacementFields` (their JSON stays flat: ``{"cloud": ..., "zone": ...}``), and give it
back as ``.place``. The simulator's cloud speaks it too.

Failover's scopes and blocks are its methods: :meth:`Placement.within` (the same region, the
same cloud, anywhere), :meth:`Placement.block_for` (what a failure of a scope there rules out)
and :meth:`Placement.in_block`. A :class:`Pattern` is a partial placement (None: any): what a
request's alternative pins, and, as a :class:`Block`, what a failure rules out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel

from corral.shared.errors import Scope

FIELDS = ("cloud", "region", "zone", "instance_type", "market")
# How a machine is bought, declared once: the scheduler's machine types, the simulated cloud's
# capacity and the placements all speak these words (in capacity order: reserved first).
Market = Literal["reserved", "spot", "on_demand"]
MARKETS: tuple[str, ...] = get_args(Market)


class Placed(Protocol):
    """Anything with a place and a market: a planner candidate, an attempt record, a
    :class:`Placement`."""

    @property
    def cloud(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def market(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Placement:
    """A machine's place and market (``reservation``: the reservation's id, when it is bought
    from one)."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str  # on_demand | spot | reserved
    reservation: str | None = None

    @classmethod
    def of(cls, candidate: Placed | Mapping[str, Any]) -> Placement:
        """The placement of a planner candidate, a stored chain step, or either's JSON."""
        if isinstance(candidate, Placement):
            return candidate
        if isinstance(candidate, Mapping):
            get: Any = candidate.__getitem__
            return cls(*(str(get(f)) for f in FIELDS))
        place = getattr(candidate, "place", None)
        if isinstance(place, Placement):
            return place
        c = candidate  # a placed candidate's fields are text already
        return cls(c.cloud, c.region, c.zone, c.instance_type, c.market)

    def fields(self) -> dict[str, str]:
        """The five fields as the flat JSON of every record and view writes them."""
        return {name: getattr(self, name) for name in FIELDS}

    def where(self) -> str:
        """``aws us-east-1/us-east-1a``, for events and errors."""
        return f"{self.cloud} {self.region}/{self.zone}"

    # ----------------------------------------------------------------- failover's scopes
    def same_region(self, other: Placement) -> bool:
        """In ``other``'s region (of the same cloud)."""
        return self.cloud == other.cloud and self.region == other.region

    def same_cloud(self, other: Placement) -> bool:
        return self.cloud == other.cloud

    def within(self, scope: str, origin: Placement) -> bool:
        """Inside ``scope`` of ``origin``: ``region`` (its other zones), ``cloud`` (its other
        regions) or ``any``."""
        if scope == "region":
            return self.same_region(origin)
        if scope == "cloud":
            return self.same_cloud(origin)
        return True

    # ------------------------------------------------------------------------- blocks
    def block_for(self, scope: Scope | str) -> Block | None:
        """What a failure of ``scope`` here rules out; None when nothing is (retry in place)
        or the request itself is wrong (fail fast)."""
        return Block.from_scope(scope, self)

    def in_block(self, block: Block) -> bool:
        return block.matches(self)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A partial placement: what a request pins (a planner :class:`~corral.shared.planner.Spec`)
    or a failure rules out (a :class:`Block`). A None field matches any value."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    market: str | None = None

    def matches(self, candidate: Placed) -> bool:
        """True when ``candidate`` (any placed value) falls inside the pattern."""
        c = candidate
        return (
            (self.cloud is None or self.cloud == c.cloud)
            and (self.region is None or self.region == c.region)
            and (self.zone is None or self.zone == c.zone)
            and (self.instance_type is None or self.instance_type == c.instance_type)
            and (self.market is None or self.market == c.market)
        )


@dataclass(frozen=True, slots=True)
class Block(Pattern):
    """A blocked scope: a partial placement whose ``cloud`` is always set (blocks are looked
    up by cloud)."""

    cloud: str

    @classmethod
    def from_scope(cls, scope: Scope | str, candidate: Placed) -> Block | None:
        """The block a failure of ``scope`` at ``candidate`` calls for (see
        :meth:`Placement.block_for`)."""
        c = candidate
        match Scope(scope):
            case Scope.ZONE:  # sold out: this type and market in this zone
                return cls(c.cloud, c.region, c.zone, c.instance_type, c.market)
            case Scope.REGION:  # a regional quota or a hung region: every type, every market
                return cls(c.cloud, region=c.region)
            case Scope.INSTANCE_TYPE:  # e.g. GCP's GPUS_ALL_REGIONS quota: the type everywhere
                return cls(c.cloud, instance_type=c.instance_type, market=c.market)
            case Scope.CLOUD:  # credentials or permissions: nothing on this cloud can work
                return cls(c.cloud)
            case _:  # NONE and REQUEST block nothing
                return None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Block:
        return cls(
            cloud=str(data["cloud"]),
            region=data.get("region"),
            zone=data.get("zone"),
            instance_type=data.get("instance_type"),
            market=data.get("market"),
        )

    def __str__(self) -> str:
        place = self.zone or self.region or "every region"
        what = self.instance_type or "every instance type"
        market = f" ({self.market})" if self.market else ""
        return f"{self.cloud} {place}: {what}{market}"


class PlacementFields(BaseModel):
    """The placement's fields, declared once for every stored record and API view that
    carries one (attempts, chain steps, instances, launches, what a provider reports; the
    attempt, instance and run views), so their JSON stays flat; ``.place`` is the value."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str  # on_demand | spot | reserved

    @property
    def place(self) -> Placement:
        return Placement(self.cloud, self.region, self.zone, self.instance_type, self.market)
