"""From a task's resources to the ordered failover chain of launchable candidates.

The chain is what failover walks, first to last. How it is ordered:

1. **Preference tiers.** ``ordered`` candidates and accelerator *lists* are tried in the user's
   order; a tier is finished before the next one starts. ``any_of`` candidates and accelerator
   *sets* share one tier: the cheapest of them first.
2. **Groups.** Inside a tier, candidates are grouped by (cloud, accelerator and count, market).
   Groups go cheapest first, each by its cheapest offering. A single accelerator therefore
   gives "the cheapest cloud first, then the next cloud", and a set interleaves clouds by price
   (GCP L4:8 at 7.98, then AWS A10G:8 at 16.29, then GCP A100:8 ...).
3. **Regions.** Inside a group, each instance type's regions go in price order with the
   region's zones together (a *run*); runs go cheapest first, so a cheaper type in the next
   region comes before a dearer type in this one. A pin or a region filter removes runs, never
   reorders the rest.

Equal prices keep catalog order (the data files' order; the local cloud's file order), so a
chain is the same every time. A pinned cloud, region or zone keeps the chain inside it. Blocked
scopes (:mod:`corral.shared.blocking`) are left out; so is a candidate an earlier tier already
holds. Clouds Corral has no provider for (``azure``, ...) are left out with a notice.

Without accelerators or an instance type a request asks for CPU machines: every CPU-only type
with at least the requested vCPUs and memory, and at least
:data:`DEFAULT_MIN_CPUS` vCPUs and :data:`DEFAULT_MIN_MEMORY_GIB` GiB when neither is given.
The ordered views come from :mod:`corral.shared.catalog.ordering`: sorted once per catalog,
then only filtered per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.shared.accelerators import AcceleratorOption
from corral.shared.blocking import Block, blocks_by_cloud
from corral.shared.catalog.catalog import Catalog, GroupKey
from corral.shared.catalog.offering import Offering
from corral.shared.catalog.ordering import (
    MARKET_ON_DEMAND,
    MARKET_SPOT,
    RegionRun,
    Runs,
    filter_runs,
    group_runs,
    market_prices,
    merge_runs,
    type_runs,
)
from corral.shared.catalog_names import unknown_accelerator, unknown_instance_type
from corral.shared.clouds import PROVIDER_CLOUDS
from corral.shared.config.task import Resources, Task
from corral.shared.images import image_regions
from corral.shared.placement import AtPlace, Pattern, Placement
from corral.shared.quota_families import quota_families

# A CPU task that states neither cpus nor memory gets a general-purpose machine of this size.
DEFAULT_MIN_CPUS = 4.0
DEFAULT_MIN_MEMORY_GIB = 16.0


@dataclass(frozen=True, slots=True)
class Candidate(AtPlace):
    """One step of a failover chain: ``num_nodes`` instances of one type and market in one
    zone (its ``place``), with what each node has and costs."""

    place: Placement
    accelerators: dict[str, int]  # name -> count per node; empty for CPU-only types
    vcpus: float
    memory_gib: float
    price_usd_per_hour: float  # per node
    num_nodes: int = 1

    @property
    def cost_usd_per_hour(self) -> float:
        """What the whole request costs per hour: the node price times the node count."""
        return self.price_usd_per_hour * self.num_nodes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the cost; the shape ``corral plan --json`` prints."""
        p = self.place
        return {
            "cloud": p.cloud,
            "region": p.region,
            "zone": p.zone,
            "instance_type": p.instance_type,
            "accelerators": dict(self.accelerators),
            "vcpus": self.vcpus,
            "memory_gib": self.memory_gib,
            "market": p.market,
            "price_usd_per_hour": self.price_usd_per_hour,
            "num_nodes": self.num_nodes,
            "cost_usd_per_hour": round(self.cost_usd_per_hour, 6),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        """The inverse of :meth:`to_dict` (extra keys such as ``chosen`` are ignored)."""
        return cls(
            place=Placement.of(data),
            accelerators={str(k): int(v) for k, v in dict(data.get("accelerators") or {}).items()},
            vcpus=float(data["vcpus"]),
            memory_gib=float(data["memory_gib"]),
            price_usd_per_hour=float(data["price_usd_per_hour"]),
            num_nodes=int(data.get("num_nodes", 1)),
        )


@dataclass
class Plan:
    """A failover chain, first candidate first; ``reasons`` say why when it is empty."""

    candidates: list[Candidate]
    notices: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> Candidate | None:
        """The candidate failover tries first."""
        return self.candidates[0] if self.candidates else None


@dataclass(frozen=True, slots=True)
class Spec:
    """One flat alternative of a request: candidate fields merged over the outer defaults,
    one accelerator option. Specs of equal ``rank`` form one tier (cheapest first)."""

    rank: tuple[int, int]  # (ordered position, accelerator-list position)
    where: Pattern  # what it pins of the placement; its market is always set
    accelerator: AcceleratorOption | None
    min_cpus: float | None
    min_memory_gib: float | None
    # The regions a per-region image_id names (None: any region).
    regions: frozenset[str] | None = None

    @property
    def market(self) -> str:
        return self.where.market or MARKET_ON_DEMAND

    def describe(self) -> str:
        """``A100:8 on gcp in us-central1 (spot)``: the request part, for reasons."""
        w = self.where
        what = [str(self.accelerator)] if self.accelerator else []
        if w.instance_type:
            what.append(w.instance_type)
        if not what:
            sizes = [
                f"{self.min_cpus:g}+ vCPUs" if self.min_cpus else "",
                f"{self.min_memory_gib:g}+ GiB" if self.min_memory_gib else "",
            ]
            what.append("CPU machine " + ", ".join(s for s in sizes if s))
        where = [f"on {w.cloud}"] if w.cloud else []
        if w.zone or w.region:
            where.append(f"in {w.zone or w.region}")
        elif self.regions is not None:
            where.append(f"in {', '.join(sorted(self.regions))} (the regions of its image_id)")
        market = " (spot)" if self.market == MARKET_SPOT else ""
        return " ".join([*what, *where]) + market


def _pick(item: Resources | None, outer: Resources, name: str) -> Any:
    value = getattr(item, name) if item is not None else None
    return value if value is not None else getattr(outer, name)


def _specs_of(outer: Resources, item: Resources | None, tier: int) -> list[Spec]:
    """The specs of one candidate (``item``, or the outer resources alone when None)."""
    holder = item if item is not None and item.accelerators is not None else outer
    request = holder.accelerator_request()
    cpus_from = item if item is not None and item.cpus is not None else outer
    memory_from = item if item is not None and item.memory is not None else outer
    where = Pattern(
        cloud=_pick(item, outer, "cloud"),
        region=_pick(item, outer, "region"),
        zone=_pick(item, outer, "zone"),
        instance_type=_pick(item, outer, "instance_type"),
        market=MARKET_SPOT if _pick(item, outer, "use_spot") else MARKET_ON_DEMAND,
    )
    base: dict[str, Any] = {
        "where": where,
        "min_cpus": cpus_from.min_cpus(),
        "min_memory_gib": memory_from.min_memory_gib(),
        "regions": image_regions(_pick(item, outer, "image_id")),
    }
    if request is None:
        if (
            where.instance_type is None
            and base["min_cpus"] is None
            and (base["min_memory_gib"] is None)
        ):
            base["min_cpus"], base["min_memory_gib"] = DEFAULT_MIN_CPUS, DEFAULT_MIN_MEMORY_GIB
        return [Spec(rank=(tier, 0), accelerator=None, **base)]
    return [
        Spec(rank=(tier, position if request.ordered else 0), accelerator=option, **base)
        for position, option in enumerate(request.options)
    ]


def request_specs(resources: Resources) -> list[Spec]:
    """Every flat alternative of ``resources``, sorted by rank (stable: written order)."""
    if resources.ordered:
        items: list[tuple[int, Resources | None]] = list(enumerate(resources.ordered))
    elif resources.any_of:
        items = [(0, item) for item in resources.any_of]
    else:
        items = [(0, None)]
    specs = [spec for tier, item in items for spec in _specs_of(resources, item, tier)]
    specs.sort(key=lambda s: s.rank)
    return specs


def _groups_for(catalog: Catalog, spec: Spec, cloud: str) -> list[GroupKey]:
    """The catalog groups a spec can use on one cloud."""
    if spec.accelerator is not None:
        key: GroupKey = (cloud, spec.accelerator.name, spec.accelerator.count)
        return [key] if key in catalog.by_group else []
    offerings = catalog.offerings
    if spec.where.instance_type is not None:
        indices = catalog.by_instance_type.get((cloud, spec.where.instance_type.lower()), ())
        groups = list(
            dict.fromkeys(
                (cloud, offerings[i].accelerator, offerings[i].accelerator_count) for i in indices
            )
        )
        # A type sold bare and with attached GPUs (GCP n1): without accelerators, the bare one.
        bare = [g for g in groups if g[1] is None]
        return bare or groups
    key = (cloud, None, 0)
    return [key] if key in catalog.by_group else []


def _narrowing(catalog: Catalog, spec: Spec) -> Callable[[int], bool] | None:
    """A test for the offerings a spec accepts beyond its group, type and region; None if
    it accepts them all."""
    offerings: Sequence[Offering] = catalog.offerings
    zone, min_cpus, min_mem = spec.where.zone, spec.min_cpus, spec.min_memory_gib
    if zone is None and min_cpus is None and min_mem is None:
        return None

    def keep(i: int) -> bool:
        o = offerings[i]
        return (
            (zone is None or o.zone == zone)
            and (min_cpus is None or o.vcpus >= min_cpus)
            and (min_mem is None or o.memory_gib >= min_mem)
        )

    return keep


def spec_runs(catalog: Catalog, spec: Spec, cloud: str) -> list[tuple[GroupKey, Runs]]:
    """For one cloud: each usable group with its ordered region runs narrowed to ``spec``."""
    out = []
    keep = _narrowing(catalog, spec)
    type_lower = spec.where.instance_type.lower() if spec.where.instance_type else None
    for group in _groups_for(catalog, spec, cloud):
        if type_lower is None:
            runs = group_runs(catalog, spec.market, group)
        else:
            runs = type_runs(catalog, spec.market, group, type_lower)
        if spec.where.region is not None:
            runs = tuple(r for r in runs if r.region == spec.where.region)
        if spec.regions is not None:
            runs = tuple(r for r in runs if r.region in spec.regions)
        if keep is not None and runs:
            runs = filter_runs(catalog, spec.market, runs, keep)
        if runs:
            out.append((group, runs))
    return out


def _clouds_for(
    spec: Spec, catalog: Catalog, allowed: frozenset[str] | None, notes: _Notes
) -> tuple[str, ...]:
    """The clouds a spec may use: its pinned one, or every planned cloud of the catalog. The
    ``allowed`` clouds are ones that can launch, so each has a provider (a registered cloud
    beyond the shipped ones too)."""
    if allowed is not None:
        planned = tuple(c for c in catalog.clouds if c in allowed)
    else:
        planned = tuple(c for c in catalog.clouds if c in PROVIDER_CLOUDS)
    cloud = spec.where.cloud
    if cloud is None:
        return planned
    if cloud not in PROVIDER_CLOUDS and cloud not in (allowed or ()):
        notes.notice(f"{cloud}: Corral has no provider for this cloud; left out of the plan")
    elif cloud not in catalog.clouds:
        notes.reason(
            f"{spec.describe()}: the {cloud} cloud is not configured (nothing lists its "
            "offerings: no price list, no file, no provider turned on)"
        )
    elif cloud not in planned:
        notes.reason(f"{spec.describe()}: {cloud} is not among the clouds enabled here")
    return (cloud,) if cloud in planned else ()


def _unknown_place(catalog: Catalog, spec: Spec, clouds: Sequence[str]) -> str:
    """`` (no region X in the catalog)`` when the spec names a place no cloud has; else
    ``; instance type X is not in the catalog (did you mean ...?)`` for a name it lacks."""
    for kind, name, index in (
        ("region", spec.where.region, catalog.by_region),
        ("zone", spec.where.zone, catalog.by_zone),
    ):
        if name is not None and not any((cloud, name) in index for cloud in clouds):
            return f" (the catalog has no {kind} {name} there)"
    only = clouds[0] if len(clouds) == 1 else None
    why = None
    if spec.where.instance_type is not None:
        why = unknown_instance_type(catalog, spec.where.instance_type, only)
    if why is None and spec.accelerator is not None:
        why = unknown_accelerator(catalog, spec.accelerator.name, only)
    return f"; {why}" if why else ""


@dataclass
class _Notes:
    """Notices (always shown) and reasons (shown when nothing can be planned), deduplicated."""

    notices: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def notice(self, text: str) -> None:
        if text not in self.notices:
            self.notices.append(text)

    def reason(self, text: str) -> None:
        if text not in self.reasons:
            self.reasons.append(text)


_TierGroup = tuple[tuple[float, int, int], tuple[str, str], Runs]  # key, (cloud, market), runs


def _tier_groups(
    catalog: Catalog, specs: Iterable[Spec], allowed: frozenset[str] | None, notes: _Notes
) -> list[_TierGroup]:
    """The groups of one tier, cheapest first: each (cloud, accelerator, market) group's runs,
    the union over every spec of the tier that reaches it."""
    found: dict[tuple[GroupKey, str], list[Runs]] = {}
    for spec in specs:
        clouds = _clouds_for(spec, catalog, allowed, notes)
        hits = [hit for cloud in clouds for hit in spec_runs(catalog, spec, cloud)]
        if clouds and not hits:
            notes.reason(
                f"{spec.describe()}: no offering on {', '.join(clouds)}"
                + _unknown_place(catalog, spec, clouds)
            )
        for group, runs in hits:
            found.setdefault((group, spec.market), []).append(runs)
    groups: list[_TierGroup] = []
    for (group, market), many in found.items():
        runs = merge_runs(catalog, market, many)
        market_rank = 0 if market == MARKET_ON_DEMAND else 1
        key = (runs[0].price_usd_per_hour, runs[0].first, market_rank)
        groups.append((key, (group[0], market), runs))
    groups.sort(key=lambda g: g[0])
    return groups


def _candidate(o: Offering, market: str, price: float, num_nodes: int) -> Candidate:
    return Candidate(
        place=Placement(o.cloud, o.region, o.zone, o.instance_type, market),
        accelerators={o.accelerator: o.accelerator_count} if o.accelerator else {},
        vcpus=o.vcpus,
        memory_gib=o.memory_gib,
        price_usd_per_hour=price,
        num_nodes=num_nodes,
    )


_MEMO_MAX_NODES = 64


class _Chain:
    """Collects a chain run by run, leaving out blocked scopes and what an earlier tier holds.

    Candidates are built once per (offering, market, node count) and memoised on the catalog,
    so plans share them: treat a candidate as read-only (it is frozen; leave its
    ``accelerators`` alone too).
    """

    def __init__(self, catalog: Catalog, nodes: int, blocked: Iterable[Block], dedupe: bool):
        self.catalog = catalog
        self.nodes = nodes
        self.blocks = blocks_by_cloud(blocked)
        self.seen: set[tuple[int, str]] | None = set() if dedupe else None
        self.candidates: list[Candidate] = []
        self.blocked_count = 0

    def _built(self, market: str) -> list[Candidate | None]:
        key = ("candidates", market, self.nodes)
        built: list[Candidate | None] | None = self.catalog.memo.get(key)
        if built is None:
            built = [None] * len(self.catalog.offerings)
            if self.nodes <= _MEMO_MAX_NODES:  # bound the memo; bigger requests are rare
                self.catalog.memo[key] = built
        return built

    def _blocked_zones(self, cloud: str, market: str, run: RegionRun) -> set[str] | None:
        """The run's zones some block covers; None when a block covers the whole run. A
        shortfall's block covers only asks of more nodes than it left free; a quota family's,
        only the offerings that count against that family (the same rule as
        :meth:`~corral.shared.placement.Block.matches`)."""
        zones: set[str] = set()
        for b in self.blocks.get(cloud, ()):
            if b.above is not None and self.nodes <= b.above:
                continue
            if (
                (b.region is None or b.region == run.region)
                and (b.instance_type is None or b.instance_type == run.instance_type)
                and (b.market is None or b.market == market)
            ):
                if b.quota_family is not None:
                    zones.update(self._family_zones(cloud, market, run, b.quota_family))
                elif b.zone is None:
                    return None
                else:
                    zones.add(b.zone)
        return zones

    def _family_zones(self, cloud: str, market: str, run: RegionRun, family: str) -> set[str]:
        offerings = self.catalog.offerings
        return {
            o.zone
            for o in (offerings[i] for i in run.entries)
            if family in quota_families(cloud, o.instance_type, market, o.accelerator, o.zone)
        }

    def add(self, cloud: str, market: str, runs: Runs) -> None:
        """Append one group's runs, in order."""
        offerings = self.catalog.offerings
        prices = market_prices(self.catalog, market)
        built = self._built(market)
        for run in runs:
            zones = self._blocked_zones(cloud, market, run)
            if zones is None:
                self.blocked_count += len(run.entries)
                continue
            for i in run.entries:
                if self.seen is not None:
                    if (i, market) in self.seen:
                        continue  # an earlier tier already holds it
                    self.seen.add((i, market))
                if zones and offerings[i].zone in zones:
                    self.blocked_count += 1
                    continue
                c = built[i]
                if c is None:
                    price = prices[i]
                    assert price is not None
                    c = built[i] = _candidate(offerings[i], market, price, self.nodes)
                self.candidates.append(c)


def plan(
    task_or_resources: Task | Resources,
    catalog: Catalog,
    *,
    blocked: Iterable[Block] = (),
    num_nodes: int | None = None,
    clouds: Iterable[str] | None = None,
) -> Plan:
    """The failover chain for a task (or bare resources) over ``catalog``.

    ``blocked`` scopes are left out; ``clouds`` restricts planning to those clouds (default:
    every cloud of the catalog Corral has a provider for). ``num_nodes`` defaults to the
    task's (1 for bare resources). Pure: reads nothing but its arguments.
    """
    if isinstance(task_or_resources, Task):
        resources, nodes = task_or_resources.resources, task_or_resources.num_nodes
    else:
        resources, nodes = task_or_resources, 1
    nodes = num_nodes if num_nodes is not None else nodes
    allowed = frozenset(clouds) if clouds is not None else None
    notes = _Notes()
    specs = request_specs(resources)
    tiers: dict[tuple[int, int], list[Spec]] = {}
    for spec in specs:
        tiers.setdefault(spec.rank, []).append(spec)
    chain = _Chain(catalog, nodes, blocked, dedupe=len(tiers) > 1)
    for tier_specs in tiers.values():
        for _key, (cloud, market), runs in _tier_groups(catalog, tier_specs, allowed, notes):
            chain.add(cloud, market, runs)
    if chain.candidates:
        return Plan(chain.candidates, notes.notices, [])
    if chain.blocked_count:
        notes.reason(f"every matching candidate ({chain.blocked_count}) is in a blocked scope")
    if not notes.reasons:
        notes.reason("nothing in the request can be planned on the clouds Corral has providers for")
    return Plan([], notes.notices, notes.reasons)
