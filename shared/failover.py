"""Failover, step by step: which candidate of a chain to try next, at which scope.

A failed zone attempt hands over to the *region* step, which tries the rest of that region; an
exhausted region hands over to the *cloud* step (the cloud's other regions); an exhausted cloud
hands over to the *next-cloud* step (the rest of the chain, in the planner's order). Each step
is one Celery task in the runtime; this module only decides. Candidates whose scope is
remembered as blocked are passed over and reported, so the account can say why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from corral.shared.blocking import Block, BlockIndex, is_blocked
from corral.shared.placement import Ask, Placed, Placement


class Within(StrEnum):
    """How far a step may look for the next candidate."""

    REGION = "region"  # the failed candidate's region (its other zones)
    CLOUD = "cloud"  # the failed candidate's cloud (its other regions)
    ANY = "any"  # the rest of the chain, any cloud


@dataclass(frozen=True, slots=True)
class NextStep:
    """What a failover step decided.

    ``action`` is ``attempt`` (try ``index``), ``escalate`` (the next candidate lies outside this
    step's scope: hand over to the wider step) or ``exhausted`` (nothing is left to try).
    ``passed_over`` lists ``(index, block)`` for each distinct block that hid candidates.
    """

    action: str
    index: int | None = None
    passed_over: tuple[tuple[int, Block], ...] = field(default=())


def next_step(
    chain: Sequence[Placed | Mapping[str, Any]],
    after: int,
    blocks: Iterable[Block] | BlockIndex,
    within: Within | str,
) -> NextStep:
    """The next candidate after position ``after`` (-1: from the start) that is not blocked,
    if it lies inside ``within`` of the candidate at ``after``. ``blocks`` may come as a
    :class:`BlockIndex` built once for several steps over the same blocks."""
    return scoped(chain, after, first_free(chain, after, blocks), Within(within))


@dataclass(frozen=True, slots=True)
class Free:
    """The first candidate after a position that no block covers (None: none is left), and
    ``(index, block)`` for each distinct block that hid one before it. Which step may try
    it is :func:`scoped`'s to say: a wider step finds the same candidate."""

    index: int | None
    passed_over: tuple[tuple[int, Block], ...]


def first_free(
    chain: Sequence[Placed | Mapping[str, Any]], after: int, blocks: Iterable[Block] | BlockIndex
) -> Free:
    """Walks ``chain`` from ``after + 1`` to the first candidate no block covers."""
    index = blocks if isinstance(blocks, BlockIndex) else BlockIndex(blocks)
    passed: list[tuple[int, Block]] = []
    seen: set[Block] = set()
    for i in range(after + 1, len(chain)):
        place = Placement.of(chain[i])
        near = index.near(place)  # a candidate is checked against the blocks that may cover it
        # What it asks is read only when a block there narrows by it (a family, a ceiling).
        ask = Ask.of(chain[i]) if any(b.above is not None or b.quota_family for b in near) else None
        hit = is_blocked(place, near, ask)
        if hit is None:
            return Free(i, tuple(passed))
        if hit not in seen:
            seen.add(hit)
            passed.append((i, hit))
    return Free(None, tuple(passed))


def scoped(
    chain: Sequence[Placed | Mapping[str, Any]], after: int, free: Free, scope: Within
) -> NextStep:
    """What a step looking ``scope`` wide of the candidate at ``after`` makes of ``free``:
    try it, hand over to the wider step (it lies outside), or nothing is left."""
    if free.index is None:
        return NextStep("exhausted", None, free.passed_over)
    if after < 0:
        return NextStep("attempt", free.index, free.passed_over)
    origin = Placement.of(chain[after])
    if _inside(scope, origin, Placement.of(chain[free.index])):
        return NextStep("attempt", free.index, free.passed_over)
    # Blocks seen beyond this step's scope are the wider step's to report.
    inside = tuple(p for p in free.passed_over if _inside(scope, origin, Placement.of(chain[p[0]])))
    return NextStep("escalate", None, inside)


def _inside(scope: Within, origin: Placement, place: Placement) -> bool:
    if scope == Within.REGION:
        return place.same_region(origin)
    if scope == Within.CLOUD:
        return place.same_cloud(origin)
    return True


WIDER: dict[Within, Within] = {Within.REGION: Within.CLOUD, Within.CLOUD: Within.ANY}
