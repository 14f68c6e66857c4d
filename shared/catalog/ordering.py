"""Price-ordered views of a catalog, computed once per catalog and reused by every plan.

The planner's unit is the *run*: the zones of one region that offer one instance type, cheapest
first. A failover chain walks runs in price order, so each region's zones stay together, and a
cheaper type in the next region comes before a dearer type in this one. Ties are broken by
catalog index (the order of the data files), so every view, and every plan built from them, is
deterministic.

Views are memoised on the catalog (``Catalog.memo``): a group's runs are sorted once, and a
request that only narrows them (a region, a zone, a minimum size) filters the sorted runs
instead of sorting again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from corral.shared.catalog.catalog import Catalog, GroupKey

MARKET_ON_DEMAND = "on_demand"
MARKET_SPOT = "spot"
MARKET_RESERVED = "reserved"  # capacity reservations: never planned from list prices
PRICED_MARKETS = (MARKET_ON_DEMAND, MARKET_SPOT)

Prices = tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class RegionRun:
    """One instance type's offerings in one region's zones, cheapest first (equal prices in
    catalog order)."""

    region: str
    instance_type: str
    entries: tuple[int, ...]  # offering indices into Catalog.offerings; never empty
    price_usd_per_hour: float  # the price of entries[0] in the run's market

    @property
    def first(self) -> int:
        return self.entries[0]


Runs = tuple[RegionRun, ...]


def market_prices(catalog: Catalog, market: str) -> Prices:
    """Each offering's price per hour in ``market`` (None where that market is not offered)."""
    key = ("prices", market)
    cached: Prices | None = catalog.memo.get(key)
    if cached is None:
        if market == MARKET_ON_DEMAND:
            cached = tuple(o.price_usd_per_hour for o in catalog.offerings)
        elif market == MARKET_SPOT:
            cached = tuple(o.spot_price_usd_per_hour for o in catalog.offerings)
        else:
            raise ValueError(f"no list prices for market {market!r}")
        catalog.memo[key] = cached
    return cached


def _order(runs: Iterable[RegionRun]) -> Runs:
    """Runs by their cheapest offering; equal prices keep catalog order."""
    return tuple(sorted(runs, key=lambda r: (r.price_usd_per_hour, r.first)))


def build_runs(catalog: Catalog, market: str, indices: Iterable[int]) -> Runs:
    """Group offerings (of one cloud) into ordered runs, one per (region, instance type), for
    ``market``; offerings the market does not offer are left out."""
    prices = market_prices(catalog, market)
    by_place: dict[tuple[str, str], list[int]] = {}
    offerings = catalog.offerings
    for i in indices:
        if prices[i] is not None:
            o = offerings[i]
            by_place.setdefault((o.region, o.instance_type), []).append(i)
    return _runs_of(prices, by_place.items())


def _runs_of(prices: Prices, places: Iterable[tuple[tuple[str, str], Iterable[int]]]) -> Runs:
    runs = []
    for (region, instance_type), entries in places:
        ordered = sorted(entries, key=lambda i: (prices[i], i))
        price = prices[ordered[0]]
        assert price is not None
        runs.append(RegionRun(region, instance_type, tuple(ordered), price))
    return _order(runs)


def group_runs(catalog: Catalog, market: str, group: GroupKey) -> Runs:
    """The ordered runs of one group (cloud, accelerator, count) in ``market``, memoised."""
    key = ("group", market, group)
    runs: Runs | None = catalog.memo.get(key)
    if runs is None:
        runs = build_runs(catalog, market, catalog.by_group.get(group, ()))
        catalog.memo[key] = runs
    return runs


def type_runs(catalog: Catalog, market: str, group: GroupKey, instance_type: str) -> Runs:
    """The ordered runs of one instance type (lower-case name) within a group, memoised."""
    key = ("type", market, group, instance_type)
    runs: Runs | None = catalog.memo.get(key)
    if runs is None:
        offerings = catalog.offerings
        indices = catalog.by_instance_type.get((group[0], instance_type), ())
        mine = [
            i
            for i in indices
            if (offerings[i].accelerator, offerings[i].accelerator_count) == group[1:]
        ]
        runs = build_runs(catalog, market, mine)
        catalog.memo[key] = runs
    return runs


def filter_runs(catalog: Catalog, market: str, runs: Runs, keep: Callable[[int], bool]) -> Runs:
    """The runs with only the offerings ``keep`` accepts, re-ordered only if a run's cheapest
    offering changed. Sorted order inside a run survives filtering."""
    prices = market_prices(catalog, market)
    out: list[RegionRun] = []
    reorder = False
    for run in runs:
        entries = tuple(i for i in run.entries if keep(i))
        if not entries:
            continue
        if entries[0] != run.first:
            price = prices[entries[0]]
            assert price is not None
            out.append(RegionRun(run.region, run.instance_type, entries, price))
            reorder = True
        else:
            same = len(entries) == len(run.entries)
            price = run.price_usd_per_hour
            out.append(run if same else RegionRun(run.region, run.instance_type, entries, price))
    return _order(out) if reorder else tuple(out)


def merge_runs(catalog: Catalog, market: str, many: Sequence[Runs]) -> Runs:
    """One set of runs holding every offering of ``many`` (the union), ordered afresh."""
    if len(many) == 1:
        return many[0]
    by_place: dict[tuple[str, str], set[int]] = {}
    for runs in many:
        for run in runs:
            by_place.setdefault((run.region, run.instance_type), set()).update(run.entries)
    return _runs_of(market_prices(catalog, market), by_place.items())
