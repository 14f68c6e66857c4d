"""Blocked scopes: the parts of the search space that failover has ruled out for a while.

A :class:`Block` names a cloud and, optionally, a region, a zone, an instance type and a
market; a field left None matches anything. Failover turns a provider error's
:class:`~corral.shared.errors.Scope` into a block with :meth:`Block.from_scope`, and the planner
leaves every blocked candidate out of the chain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral.shared.errors import Scope
from corral.shared.placement import Placed as Placed  # its home before placement.py


@dataclass(frozen=True, slots=True)
class Block:
    """A blocked scope. None fields are wildcards; ``cloud`` is always set."""

    cloud: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    market: str | None = None

    def covers(self, cloud: str, region: str, zone: str, instance_type: str, market: str) -> bool:
        """True when a launch at this place, of this type and market, falls inside the block."""
        return (
            self.cloud == cloud
            and (self.region is None or self.region == region)
            and (self.zone is None or self.zone == zone)
            and (self.instance_type is None or self.instance_type == instance_type)
            and (self.market is None or self.market == market)
        )

    def matches(self, candidate: Placed) -> bool:
        """True when ``candidate`` falls inside the block."""
        c = candidate
        return self.covers(c.cloud, c.region, c.zone, c.instance_type, c.market)

    @classmethod
    def from_scope(cls, scope: Scope | str, candidate: Placed) -> Block | None:
        """The block a failure of ``scope`` at ``candidate`` calls for; None when nothing is to
        be blocked (retry in place) or the request itself is wrong (fail fast)."""
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
        return {
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "market": self.market,
        }

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


def is_blocked(candidate: Placed, blocks: Iterable[Block]) -> Block | None:
    """The first block that covers ``candidate``, or None when it is free to try."""
    for block in blocks:
        if block.matches(candidate):
            return block
    return None


def blocks_by_cloud(blocks: Iterable[Block]) -> dict[str, tuple[Block, ...]]:
    """Blocks grouped by cloud, so a candidate is checked only against its own cloud's."""
    out: dict[str, list[Block]] = {}
    for block in blocks:
        out.setdefault(block.cloud, []).append(block)
    return {cloud: tuple(bs) for cloud, bs in out.items()}


PlaceKey = tuple[str, str, str, str, str]  # cloud, region, zone, instance type, market


def place_key(candidate: Placed) -> PlaceKey:
    c = candidate
    return (c.cloud, c.region, c.zone, c.instance_type, c.market)


def exact_key(block: Block) -> PlaceKey | None:
    """The one place a block names whole (a sold-out zone's type and market, a lost
    machine's), or None for a wider block (a region, a type everywhere, a cloud)."""
    b = block
    if b.region is None or b.zone is None or b.instance_type is None or b.market is None:
        return None
    return (b.cloud, b.region, b.zone, b.instance_type, b.market)


class BlockIndex:
    """Blocks arranged for many look-ups (a chain walked against the same blocks): the ones
    naming a whole place by that place, the wider ones by cloud. :meth:`near` narrows the
    blocks a candidate must be checked against, keeping their order, so
    :func:`is_blocked` over them answers as it would over all of them."""

    def __init__(self, blocks: Iterable[Block]) -> None:
        self.exact: dict[PlaceKey, tuple[int, Block]] = {}
        self.wide: dict[str, list[tuple[int, Block]]] = {}
        for n, block in enumerate(blocks):
            key = exact_key(block)
            if key is None:
                self.wide.setdefault(block.cloud, []).append((n, block))
            elif key not in self.exact:  # the first: a later one like it is never reached
                self.exact[key] = (n, block)

    def near(self, candidate: Placed) -> list[Block]:
        """The blocks that may cover ``candidate``, in their order: its cloud's wider blocks
        and the first block naming its very place (those after that one are never reached)."""
        found = self.exact.get(place_key(candidate))
        wide = self.wide.get(candidate.cloud, ())
        if found is None:
            return [b for _, b in wide]
        at, block = found
        return [*(b for n, b in wide if n < at), block]
