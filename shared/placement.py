"""Where a machine runs and how it is bought: one value for failover's chain and the
simulator's cloud (the cloud, region, zone, instance type, market and, when it is bought from
one, the reservation).

Block matching takes any value with these fields (:class:`Placed`), this one among them; the
scope checks failover walks by are its methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

FIELDS = ("cloud", "region", "zone", "instance_type", "market")


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
    market: str
    reservation: str | None = None

    @classmethod
    def of(cls, candidate: Placed | Mapping[str, Any]) -> Placement:
        """The placement of a planner candidate, a stored chain step, or either's JSON."""
        if isinstance(candidate, Placement):
            return candidate
        if isinstance(candidate, Mapping):
            get: Any = candidate.__getitem__
            return cls(*(str(get(f)) for f in FIELDS))
        c = candidate  # a placed candidate's fields are text already
        return cls(c.cloud, c.region, c.zone, c.instance_type, c.market)

    def same_region(self, other: Placement) -> bool:
        """In ``other``'s region (of the same cloud)."""
        return self.cloud == other.cloud and self.region == other.region

    def same_cloud(self, other: Placement) -> bool:
        return self.cloud == other.cloud
