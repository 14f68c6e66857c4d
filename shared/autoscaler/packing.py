"""Bin packing of aggregated demand: identical bundles are one shape with a count.

Demand of 10,000 bundles in 5 shapes is packed as 5 shapes with counts, never bundle by bundle:
how many of a shape fit on a node is one division per resource, and a run of identical new
nodes is planned at once (``k`` nodes each filled the same way). The cost grows with the number
of distinct shapes and nodes, not with the number of bundles.

Amounts are integers in units of :data:`RESOURCE_UNIT` (1/10,000, Ray's granularity), so the
arithmetic is exact: fractions of a CPU never leave a node 1e-16 short.

A :class:`Bin` is ``count`` identical nodes of one type with the same free capacity: an
existing node (count 1, with its id) or a run of planned new nodes. Packing part of a shape onto
a run splits it into the nodes that took some and those that did not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .model import RESOURCE_UNIT, format_resources

UNITS_PER_ONE = round(1 / RESOURCE_UNIT)

# A bundle shape: (resource position, amount in units) for every amount > 0, by position.
Shape = tuple[tuple[int, int], ...]


class ResourceIndex:
    """Resource names <-> positions in the dense vectors that node capacities are."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.position: dict[str, int] = {}
        for name in names:
            self.add(name)

    def add(self, name: str) -> int:
        if name not in self.position:
            self.position[name] = len(self.names)
            self.names.append(name)
        return self.position[name]

    def vector(self, resources: Mapping[str, float]) -> list[int]:
        """A dense vector of units; names the index lacks are left out (nothing offers them)."""
        out = [0] * len(self.names)
        for name, amount in resources.items():
            pos = self.position.get(name)
            if pos is not None:
                out[pos] = to_units(amount)
        return out

    def shape(self, resources: Mapping[str, float]) -> Shape:
        """The sparse shape of a bundle; amounts below one unit are dropped (they fit anywhere)."""
        units = ((self.add(k), to_units(v)) for k, v in resources.items())
        return tuple(sorted((pos, n) for pos, n in units if n > 0))

    def resources(self, shape: Shape) -> dict[str, float]:
        return {self.names[pos]: from_units(amount) for pos, amount in shape}


def to_units(amount: float) -> int:
    return round(amount * UNITS_PER_ONE)


def from_units(units: int) -> float:
    return units / UNITS_PER_ONE


@dataclass(eq=False)
class ShapeCount:
    """``count`` bundles of one shape still to place."""

    shape: Shape
    count: int
    needs_gpu: bool
    weight: float = 0.0  # size against the largest node type, summed over resources

    def order_key(self) -> tuple[bool, int, float, Shape]:
        # GPU work first (it has the fewest homes), then the most resource kinds, then the
        # heaviest: big rocks go in before sand.
        return (self.needs_gpu, len(self.shape), self.weight, self.shape)


def by_packing_order(shapes: Iterable[ShapeCount]) -> list[ShapeCount]:
    return sorted((s for s in shapes if s.count > 0), key=ShapeCount.order_key, reverse=True)


@dataclass(eq=False)
class Bin:
    """``count`` identical nodes of ``node_type``: same free capacity, same bundles placed."""

    node_type: str
    free: list[int]
    count: int
    has_gpu: bool
    node_id: str | None = None  # an existing node; None: planned new nodes
    phase: str = "existing"  # why planned nodes are launched: min_workers, requested, ...
    placed: dict[Shape, int] = field(default_factory=dict)  # bundles per node

    def clone(self, count: int) -> Bin:
        return Bin(
            self.node_type,
            list(self.free),
            count,
            self.has_gpu,
            self.node_id,
            self.phase,
            dict(self.placed),
        )

    def add(self, shape: Shape, per_node: int) -> None:
        for pos, amount in shape:
            self.free[pos] -= amount * per_node
        self.placed[shape] = self.placed.get(shape, 0) + per_node

    def split_one(self, bins: list[Bin]) -> Bin:
        """One node of this run as a bin of its own (the run keeps the others)."""
        if self.count == 1:
            return self
        self.count -= 1
        one = self.clone(1)
        bins.append(one)
        return one


def fit_count(free: Sequence[int], shape: Shape) -> int:
    """How many bundles of ``shape`` fit in ``free``."""
    best = -1
    for pos, amount in shape:
        n = free[pos] // amount
        if n == 0:
            return 0
        if best < 0 or n < best:
            best = n
    return max(best, 0)


def _place(b: Bin, shape: Shape, take: int, per_node: int, bins: list[Bin]) -> None:
    """Put ``take`` bundles on the run ``b`` (``per_node`` at most on each of its nodes)."""
    full, rest = divmod(take, per_node)
    untouched = b.count - full - (1 if rest else 0)
    pieces = [(n, k) for n, k in ((full, per_node), (1 if rest else 0, rest)) if n > 0]
    if untouched > 0:
        bins.append(b.clone(untouched))
    first, *others = pieces
    for n, k in others:
        piece = b.clone(n)
        piece.add(shape, k)
        bins.append(piece)
    b.count = first[0]
    b.add(shape, first[1])


def visit_order(bins: Sequence[Bin], needs_gpu: bool) -> list[Bin]:
    """Bins in the order a shape tries them: work without GPUs tries GPU nodes last."""
    if needs_gpu:
        return list(bins)
    return [b for b in bins if not b.has_gpu] + [b for b in bins if b.has_gpu]


def pack(shapes: Iterable[ShapeCount], bins: list[Bin]) -> None:
    """First fit, largest shapes first, onto the bins in order; lowers each shape's count by
    what was placed (``bins`` may grow: runs split)."""
    for sc in by_packing_order(shapes):
        for b in visit_order(bins, sc.needs_gpu):
            per_node = fit_count(b.free, sc.shape)
            if per_node == 0:
                continue
            take = min(sc.count, per_node * b.count)
            _place(b, sc.shape, take, per_node, bins)
            sc.count -= take
            if sc.count == 0:
                break


@dataclass(eq=False)
class TypeOption:
    """A node type new nodes may be of, with how many more of it may be launched now."""

    name: str
    total: list[int]
    has_gpu: bool
    order: int  # position in the cluster file: the last tie-break
    room: int
    price_usd_per_hour: float | None = None  # from the catalog; None: unknown

    def copy(self) -> TypeOption:
        return TypeOption(
            self.name, self.total, self.has_gpu, self.order, self.room, self.price_usd_per_hour
        )


@dataclass
class Room:
    """How many more workers may be launched: per type (``TypeOption.room``) and in all."""

    total: int


Score = tuple[float | str, ...]
Scorer = Callable[["TypeOption", Sequence["ShapeCount"], Sequence[int]], "Score | None"]


def fill_one(total: Sequence[int], shapes: Sequence[ShapeCount]) -> tuple[list[int], list[int]]:
    """Fill one empty node greedily in packing order: (bundles taken per shape, free left)."""
    free = list(total)
    taken = [0] * len(shapes)
    for i, sc in enumerate(shapes):
        n = min(fit_count(free, sc.shape), sc.count)
        if n:
            taken[i] = n
            for pos, amount in sc.shape:
                free[pos] -= amount * n
    return taken, free


def score(opt: TypeOption, shapes: Sequence[ShapeCount], taken: Sequence[int]) -> Score | None:
    """How good one new node of ``opt`` is for the demand left (higher is better), or None
    when it holds none of it. In order:

    1. it does not spend a GPU node on work that needs no GPU;
    2. it absorbs the most demand (so the fewest nodes are added);
    3. the resources the work uses are the most used up (the smallest type that holds it);
    4. it has the fewest resource kinds the work leaves unused (custom resources stay free
       for the work that asks for them);
    5. it comes first in the cluster file.
    """
    used_kinds: set[int] = set()
    absorbed = 0.0
    any_gpu_work = False
    for sc, n in zip(shapes, taken, strict=True):
        if n:
            absorbed += n * sc.weight
            any_gpu_work = any_gpu_work or sc.needs_gpu
            used_kinds.update(pos for pos, _ in sc.shape)
    if not used_kinds:
        return None
    used = [0] * len(opt.total)
    for sc, n in zip(shapes, taken, strict=True):
        for pos, amount in sc.shape:
            used[pos] += amount * n
    utilization = sum(used[p] / opt.total[p] for p in used_kinds) / len(used_kinds)
    spare_kinds = sum(1 for p, v in enumerate(opt.total) if v > 0 and p not in used_kinds)
    gpu_ok = any_gpu_work or not opt.has_gpu
    return (gpu_ok, round(absorbed, 9), round(utilization, 9), -spare_kinds, -opt.order)


@dataclass
class Choice:
    """A run of new nodes chosen for demand, and whether a GPU type was passed over for it."""

    bin: Bin
    kept_off_gpu: list[str]


def ray_score(opt: TypeOption, shapes: Sequence[ShapeCount], taken: Sequence[int]) -> Score | None:
    """Ray's node type score (``_resource_based_utilization_scorer``): the tightest fit. In
    order: no GPU node for work without GPUs; the most resource kinds of the demand the type
    offers; the highest of the lowest, then of the mean, per-resource use, each weighted as
    Ray weighs it (amount x use cubed, over the resources of which the type has one or more)."""
    if not any(taken):
        return None
    kinds = {pos for sc in shapes for pos, _ in sc.shape}
    used = [0] * len(opt.total)
    any_gpu_work = False
    for sc, n in zip(shapes, taken, strict=True):
        any_gpu_work = any_gpu_work or sc.needs_gpu
        for pos, amount in sc.shape:
            used[pos] += amount * n
    weighted = []
    matching = 0
    for pos, total in enumerate(opt.total):
        if total < UNITS_PER_ONE:
            continue
        matching += pos in kinds
        weighted.append(from_units(total) * (used[pos] / total) ** 3)
    if not weighted:
        return None
    gpu_ok = any_gpu_work or not opt.has_gpu
    # Ray sorts (score, node type name) from the top: at equal scores the larger name wins.
    return (gpu_ok, matching, min(weighted), sum(weighted) / len(weighted), opt.name)


def value_score(
    opt: TypeOption, shapes: Sequence[ShapeCount], taken: Sequence[int]
) -> Score | None:
    """The most demand absorbed per dollar (only for a type with a price; no GPU node for
    work without GPUs first)."""
    if opt.price_usd_per_hour is None or not any(taken):
        return None
    absorbed = sum(n * sc.weight for sc, n in zip(shapes, taken, strict=True))
    any_gpu_work = any(sc.needs_gpu for sc, n in zip(shapes, taken, strict=True) if n)
    per_usd = absorbed / opt.price_usd_per_hour if opt.price_usd_per_hour else float("inf")
    return (any_gpu_work or not opt.has_gpu, round(per_usd, 9), -opt.order)


def best_option(
    options: Sequence[TypeOption], shapes: Sequence[ShapeCount], room: Room, scorer: Scorer = score
) -> tuple[TypeOption, list[int], list[int], list[str]] | None:
    """The best type for one new node: (option, taken per shape, free left, GPU types that
    could have held the work but were passed over), or None when no type may hold any."""
    best: tuple[Score, TypeOption, list[int], list[int]] | None = None
    gpu_fits: list[str] = []
    if room.total <= 0:
        return None
    for opt in options:
        if opt.room <= 0:
            continue
        taken, free = fill_one(opt.total, shapes)
        s = scorer(opt, shapes, taken)
        if s is None:
            continue
        if not s[0]:
            gpu_fits.append(opt.name)
        if best is None or s > best[0]:
            best = (s, opt, taken, free)
    if best is None:
        return None
    kept_off = gpu_fits if best[0][0] else []
    return best[1], best[2], best[3], kept_off


def _greedy(
    active: list[ShapeCount],
    options: Sequence[TypeOption],
    room: Room,
    phase: str,
    scorer: Scorer,
) -> list[Choice]:
    choices: list[Choice] = []
    while active:
        found = best_option(options, active, room, scorer)
        if found is None:
            break
        opt, taken, free, kept_off = found
        repeat = min(sc.count // n for sc, n in zip(active, taken, strict=True) if n)
        repeat = min(repeat, opt.room, room.total)
        placed = {sc.shape: n for sc, n in zip(active, taken, strict=True) if n}
        for sc, n in zip(active, taken, strict=True):
            sc.count -= n * repeat
        opt.room -= repeat
        room.total -= repeat
        new = Bin(opt.name, free, repeat, opt.has_gpu, None, phase, placed)
        choices.append(Choice(new, kept_off))
        active = [sc for sc in active if sc.count > 0]
    return choices


def _plan_cost(choices: Sequence[Choice], prices: Mapping[str, float | None]) -> float | None:
    total = 0.0
    for c in choices:
        price = prices.get(c.bin.node_type)
        if price is None:
            return None
        total += price * c.bin.count
    return total


def choose_new_nodes(
    shapes: Iterable[ShapeCount], options: Sequence[TypeOption], room: Room, phase: str
) -> list[Choice]:
    """Add nodes for the demand left until it is all held or no type may be launched. Plans
    are made on copies: Ray's (the tightest-fitting type each step, :func:`ray_score`),
    Corral's (the type that absorbs the most demand, :func:`score`) and, over the types with
    a price, the most demand per dollar (:func:`value_score`). The one that holds more of
    the demand wins; then, when every chosen type has a price, the cheaper, then the one
    with fewer nodes; without prices, Ray's. So a plan never costs more than Ray's for the
    same demand. Each step plans ``k`` identical nodes: as many as the step's fill can be
    repeated before a shape runs out. Lowers the shapes' counts and the rooms."""
    real = by_packing_order(shapes)
    prices = {o.name: o.price_usd_per_hour for o in options}
    trials = []
    scorers: list[Scorer] = [ray_score, score]
    if any(o.price_usd_per_hour is not None for o in options):
        scorers.append(value_score)  # over the types with a price
    for rank, scorer in enumerate(scorers):
        copies = [ShapeCount(sc.shape, sc.count, sc.needs_gpu, sc.weight) for sc in real]
        opts = [o.copy() for o in options]
        trial_room = Room(room.total)
        choices = _greedy(list(copies), opts, trial_room, phase, scorer)
        left = sum(sc.count for sc in copies)
        cost = _plan_cost(choices, prices)
        nodes = sum(c.bin.count for c in choices)
        priced = (cost, nodes) if cost is not None else (0.0, rank)
        trials.append(((left, *priced, rank), choices, copies, opts, trial_room))
    _, choices, copies, opts, trial_room = min(trials, key=lambda t: t[0])
    for sc, copy in zip(real, copies, strict=True):
        sc.count = copy.count
    for opt, copy_opt in zip(options, opts, strict=True):
        opt.room = copy_opt.room
    room.total = trial_room.total
    return choices


def place_strict_spread(
    bundles: Sequence[ShapeCount],
    bins: list[Bin],
    options: Sequence[TypeOption],
    room: Room,
    phase: str,
) -> list[Bin] | None:
    """Place one STRICT_SPREAD group, every bundle on a different node: on existing or planned
    nodes first, then one new node per bundle left. All or nothing: None (and nothing changed)
    when some bundle has no node. Returns the new runs (already appended to ``bins``)."""
    taken_nodes: dict[int, int] = {}  # id(bin) -> nodes of that run this group uses
    on_existing: list[tuple[Bin, ShapeCount]] = []
    left: list[ShapeCount] = []
    for sc in by_packing_order(bundles):
        target = next(
            (
                b
                for b in visit_order(bins, sc.needs_gpu)
                if taken_nodes.get(id(b), 0) < b.count and fit_count(b.free, sc.shape) > 0
            ),
            None,
        )
        if target is None:
            left.append(sc)
        else:
            taken_nodes[id(target)] = taken_nodes.get(id(target), 0) + 1
            on_existing.append((target, sc))
    picks: list[tuple[TypeOption, list[int]]] = []
    trial_room = {id(o): o.room for o in options}
    trial_total = room.total
    for sc in left:
        pool = [TypeOption(o.name, o.total, o.has_gpu, o.order, trial_room[id(o)]) for o in options]
        found = best_option(pool, [sc], Room(trial_total))
        if found is None:
            return None
        chosen = next(o for o in options if o.name == found[0].name)
        trial_room[id(chosen)] -= 1
        trial_total -= 1
        picks.append((chosen, found[2]))
    for target, sc in on_existing:
        target.split_one(bins).add(sc.shape, 1)
    new_bins: list[Bin] = []
    for (opt, free), sc in zip(picks, left, strict=True):
        opt.room -= 1
        room.total -= 1
        new = Bin(opt.name, free, 1, opt.has_gpu, None, phase, {sc.shape: 1})
        bins.append(new)
        new_bins.append(new)
    return new_bins


def describe_runs(runs: Iterable[Bin], index: ResourceIndex) -> list[str]:
    """One line per kind of planned run: ``launch 3 t for pending demand: each holds ...``."""
    groups: dict[tuple[str, str, tuple[tuple[Shape, int], ...]], int] = {}
    for b in runs:
        key = (b.phase, b.node_type, tuple(sorted(b.placed.items())))
        groups[key] = groups.get(key, 0) + b.count
    lines = []
    for (phase, node_type, placed), count in groups.items():
        line = f"launch {count} {node_type} for {phase}"
        if placed:
            held = " + ".join(
                f"{n} x {format_resources(index.resources(shape))}" for shape, n in placed
            )
            line += f": {'each holds' if count > 1 else 'holds'} {held}"
        lines.append(line)
    return lines
