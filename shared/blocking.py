"""Blocked scopes: the parts of the search space that failover has ruled out for a while.

A :class:`~corral.shared.placement.Block` names a cloud and, optionally, a region, a zone, an
instance type and a market; a field left None matches anything. Failover turns a provider
error's :class:`~corral.shared.errors.Scope` at a placement into a block with
:meth:`~corral.shared.placement.Placement.block_for`, and the planner leaves every blocked
candidate out of the chain. Here: looking blocks up fast over many candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

# A block is a partial placement: it lives with the placement value (its earlier home was here).
from corral.shared.placement import Ask as Ask
from corral.shared.placement import Block as Block
from corral.shared.placement import Placed as Placed


def is_blocked(candidate: Placed, blocks: Iterable[Block], ask: Ask | None = None) -> Block | None:
    """The first block that covers ``candidate``, or None when it is free to try. ``ask``:
    what it asks (its accelerator and nodes), when ``candidate`` is a bare placement."""
    for block in blocks:
        if block.matches(candidate, ask):
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
    machine's), or None for a wider block (a region, a type everywhere, a cloud) or one that
    covers only some asks there (a shortfall's ceiling, a quota family)."""
    b = block
    if b.region is None or b.zone is None or b.instance_type is None or b.market is None:
        return None
    if b.above is not None or b.quota_family is not None:
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
