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

from corral.shared.errors import ProviderError, Scope
from corral.shared.quota_families import primary_family, quota_families

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
    def block_for(self, scope: Scope | str, family: str | None = None) -> Block | None:
        """What a failure of ``scope`` here rules out; None when nothing is (retry in place)
        or the request itself is wrong (fail fast)."""
        return Block.from_scope(scope, self, family=family)

    def in_block(self, block: Block) -> bool:
        return block.matches(self)


class AtPlace:
    """A placed thing's place fields read as its own (a planner candidate, a pooled machine's
    place): blocks and scopes read ``cloud``, ``region``, ``zone``, ``instance_type`` and
    ``market`` off it. The class declares ``place``."""

    __slots__ = ()
    place: Placement

    @property
    def cloud(self) -> str:
        return self.place.cloud

    @property
    def region(self) -> str:
        return self.place.region

    @property
    def zone(self) -> str:
        return self.place.zone

    @property
    def instance_type(self) -> str:
        return self.place.instance_type

    @property
    def market(self) -> str:
        return self.place.market


@dataclass(frozen=True, slots=True)
class Ask:
    """What a candidate asks beyond its place, as blocks read it: its accelerator kind (for
    its quota families) and how many nodes (for a shortfall's ceiling)."""

    accelerator: str | None = None
    nodes: int = 1

    @classmethod
    def of(cls, candidate: Any) -> Ask:
        """Read from a planner candidate, a chain step or either's JSON; a bare placement asks
        one machine with no accelerator."""
        if isinstance(candidate, Mapping):
            accelerators = candidate.get("accelerators") or {}
            nodes = candidate.get("num_nodes", 1)
        else:
            accelerators = getattr(candidate, "accelerators", None) or {}
            nodes = getattr(candidate, "num_nodes", 1)
        return cls(next(iter(accelerators), None), int(nodes or 1))


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
    up by cloud). Two narrowings beyond the place: ``quota_family`` (a quota error: only the
    candidates counting against that family, see :mod:`corral.shared.quota_families`) and
    ``above`` (a shortfall, "1 of 1 free, asked for 2": only asks of more than ``above``
    nodes; None: every ask)."""

    cloud: str
    quota_family: str | None = None
    above: int | None = None

    def matches(self, candidate: Placed, ask: Ask | None = None) -> bool:
        """True when ``candidate`` falls inside the block; ``ask``: what it asks (read from
        the candidate when not given, and only when the block narrows by it)."""
        if not Pattern.matches(self, candidate):
            return False
        if self.above is None and self.quota_family is None:
            return True
        asked = ask if ask is not None else Ask.of(candidate)
        if self.above is not None and asked.nodes <= self.above:
            return False
        if self.quota_family is not None:
            c = candidate
            families = quota_families(c.cloud, c.instance_type, c.market, asked.accelerator, c.zone)
            return self.quota_family in families
        return True

    @classmethod
    def from_scope(
        cls,
        scope: Scope | str,
        candidate: Placed,
        *,
        family: str | None = None,
        free: int | None = None,
    ) -> Block | None:
        """The block a failure of ``scope`` at ``candidate`` calls for (see
        :meth:`Placement.block_for`). ``family``: the quota family a FAMILY failure named
        (None: the candidate's own, :func:`~corral.shared.quota_families.primary_family`);
        ``free``: a shortfall's free machines (a ZONE block then ceils at them)."""
        c = candidate
        match Scope(scope):
            case Scope.ZONE:  # sold out (or short): this type and market in this zone
                above = free if free is not None and free > 0 else None
                return cls(c.cloud, c.region, c.zone, c.instance_type, c.market, above=above)
            case Scope.FAMILY:  # a regional quota: the candidates of that family there
                if family is None:
                    accelerator = Ask.of(c).accelerator
                    family = primary_family(c.cloud, c.instance_type, c.market, accelerator, c.zone)
                if family is None:
                    return cls(c.cloud, region=c.region)
                return cls(c.cloud, region=c.region, quota_family=family)
            case Scope.REGION:  # a hung region (an API that does not answer): everything
                return cls(c.cloud, region=c.region)
            case Scope.INSTANCE_TYPE:  # e.g. GCP's GPUS_ALL_REGIONS quota: the type everywhere
                return cls(c.cloud, instance_type=c.instance_type, market=c.market)
            case Scope.CLOUD:  # credentials or permissions: nothing on this cloud can work
                return cls(c.cloud)
            case _:  # NONE and REQUEST block nothing
                return None

    @classmethod
    def for_error(cls, error: ProviderError, candidate: Placed) -> Block | None:
        """What ``error`` at ``candidate`` blocks: its scope, narrowed to the quota family it
        names and the ceiling a shortfall leaves. The one rule of the runtime's memory
        (``attempt_record.remember``) and the simulator's."""
        return cls.from_scope(error.scope, candidate, family=error.family, free=error.free)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in FIELDS}
        out["quota_family"], out["above"], out["scope"] = self.quota_family, self.above, self.kind
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Block:
        above = data.get("above")
        return cls(
            cloud=str(data["cloud"]),
            region=data.get("region"),
            zone=data.get("zone"),
            instance_type=data.get("instance_type"),
            market=data.get("market"),
            quota_family=data.get("quota_family"),
            above=int(above) if above is not None else None,
        )

    @property
    def kind(self) -> str:
        """What the block is about, in one word: ``capacity`` (a type and market in a zone),
        ``shortfall`` (the same, for asks over a ceiling), ``quota`` (a family in a region),
        ``region``, ``instance_type`` (a type everywhere), ``cloud`` or ``place`` (any other
        partial place)."""
        if self.quota_family is not None:
            return "quota"
        if self.zone is not None and self.instance_type is not None:
            return "shortfall" if self.above is not None else "capacity"
        if self.region is not None and self.zone is None and self.instance_type is None:
            return "region"
        if self.region is None and self.zone is None and self.instance_type is not None:
            return "instance_type"
        if self.region is None and self.zone is None and self.instance_type is None:
            return "cloud"
        return "place"

    def __str__(self) -> str:
        place = self.zone or self.region or "every region"
        if self.quota_family is not None:
            return f"{self.cloud} {place}: quota {self.quota_family}"
        what = self.instance_type or "every instance type"
        market = f" ({self.market})" if self.market else ""
        ceiling = f", asks of more than {self.above} node{'s' * (self.above != 1)}" if (
            self.above is not None) else ""  # fmt: skip
        return f"{self.cloud} {place}: {what}{market}{ceiling}"


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
