"""The cluster autoscaler's decision: (node types and limits, nodes, demand, now) -> a Plan.

Pure: no clock (``now`` comes in), no I/O. The steps, in order:

1. **Screen the nodes.** Only REQUESTED (pending) and RUNNING nodes count. A worker whose type
   left the cluster file is terminated; so is an outdated one (its launch hash is not its
   type's), and the work it ran is added to the demand, so a replacement is launched.
2. **Enforce the maxima.** Workers above a type's ``max_workers`` or the global ``max_workers``
   are terminated: pending ones first, then the longest idle, then the least used (for the
   global max, of types above their minimum first).
3. **Minimum workers.** Each type is brought up to ``min_workers``.
4. **Requested resources** (a standing request, as Ray's ``request_resources``): packed against
   the nodes' whole capacity, as if they were idle.
5. **STRICT_SPREAD placement groups**: each bundle on its own node, all or nothing.
6. **Pending demand** (bundles, PACK/SPREAD groups flattened, STRICT_PACK groups summed into
   one bundle): packed onto the free capacity, the rest onto new nodes: Ray's choice of
   types or Corral's, whichever holds more, then costs less, then has fewer nodes
   (:func:`corral.shared.autoscaler.packing.choose_new_nodes`). Placement groups first.
   Cooled-down types are not launched.
7. **Upscaling cap** (Ray's, per node type): a type's pending nodes plus launches stay within
   max(5, upscaling_speed x max(running nodes of the type, 1)); launches for ``min_workers``,
   requested resources and placement groups count but are never clipped (the user asked).
8. **Idle nodes.** Running workers idle past their type's timeout are terminated, never below
   ``min_workers``, never one that pending demand was just packed onto, never the head. Room
   they free under the global ``max_workers`` goes to types still short of their minimum.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..lifecycle import InstanceState
from .model import (
    BundleDemand,
    ClusterSpec,
    Demand,
    Node,
    Plan,
    format_resources,
    head_ids,
)
from .packing import (
    Bin,
    ResourceIndex,
    Room,
    Shape,
    ShapeCount,
    TypeOption,
    choose_new_nodes,
    describe_runs,
    fit_count,
    pack,
    place_strict_spread,
)

INITIAL_IN_FLIGHT = 5  # launches allowed in flight however few nodes run
MIN_WORKERS = "min_workers"
PENDING = "pending demand"
PLACEMENT_GROUPS = "placement groups"
REQUESTED = "requested resources"
STRICT_SPREAD = "(STRICT_SPREAD)"  # in the phase of a strict-spread group's nodes


@dataclass
class Decision:
    """The plan, and every node (existing and planned) with the bundles packed onto it."""

    plan: Plan
    bins: list[Bin]
    index: ResourceIndex


def decide(
    spec: ClusterSpec,
    nodes: Sequence[Node],
    demand: Demand,
    *,
    now: float,
    cooldowns: Mapping[str, float] | None = None,
    requested: Demand | None = None,
) -> Plan:
    """What to launch and terminate now, and why.

    ``cooldowns`` maps a node type that just failed to launch to the time (seconds since the
    epoch, like ``now``) until which it is not launched. ``requested`` is a standing request
    packed against the cluster's whole capacity; ``demand`` is pending work packed against
    the free capacity.
    """
    return decide_detailed(
        spec, nodes, demand, now=now, cooldowns=cooldowns, requested=requested
    ).plan


def decide_detailed(
    spec: ClusterSpec,
    nodes: Sequence[Node],
    demand: Demand,
    *,
    now: float,
    cooldowns: Mapping[str, float] | None = None,
    requested: Demand | None = None,
) -> Decision:
    """:func:`decide`, keeping the packing (tests check it holds what it claims)."""
    run = _Run(spec, nodes, demand, requested, now, cooldowns or {})
    run.screen()
    run.enforce_maxima()
    run.make_bins()
    run.min_workers()
    if requested is not None:
        run.requested(requested)
    run.strict_spreads(demand)
    run.pending(demand)
    run.cap()
    run.idle()
    return Decision(run.plan(), run.bins, run.index)


def _resource_names(
    spec: ClusterSpec, nodes: Iterable[Node], demands: Iterable[Demand]
) -> list[str]:
    names: dict[str, None] = {}
    for t in spec.node_types.values():
        names.update(dict.fromkeys(t.resources))
    for n in nodes:
        names.update(dict.fromkeys(n.used))
    for d in demands:
        names.update(dict.fromkeys(sorted(d.resource_names())))
    return list(names)


class _Run:
    """The state of one decision, step by step (see the module docstring)."""

    def __init__(
        self,
        spec: ClusterSpec,
        nodes: Sequence[Node],
        demand: Demand,
        requested: Demand | None,
        now: float,
        cooldowns: Mapping[str, float],
    ) -> None:
        self.spec = spec
        self.nodes = list(nodes)
        self.now = now
        demands = [demand] if requested is None else [demand, requested]
        self.index = ResourceIndex(_resource_names(spec, self.nodes, demands))
        self.gpu_pos = self.index.position.get("GPU")
        self.totals = {name: self.index.vector(t.resources) for name, t in spec.node_types.items()}
        self.heads = head_ids(self.nodes, spec.head_node_type)
        self.cooled = {t: until for t, until in cooldowns.items() if until > now}
        # The largest amount of each resource any type offers: the scale of a bundle's weight.
        self.scale = [
            max((v[p] for v in self.totals.values()), default=0) or 1
            for p in range(len(self.index.names))
        ]
        self.kept: list[Node] = []
        self.moved_work: list[dict[str, float]] = []  # what outdated nodes ran
        self.terminate: dict[str, str] = {}
        self.protected: set[str] = set()
        self.bins: list[Bin] = []
        self.notes: list[str] = []  # screening, maxima, minima, cool-downs
        self.gpu_note: set[str] = set()
        self.waiting: dict[Shape, int] = {}
        self.waiting_why: dict[Shape, str] = {}
        self.unsatisfiable: dict[Shape, int] = {}
        self.unsat_notes: list[str] = []
        self.cap_note = ""
        self.in_flight_cap = 0
        self.idle_notes: list[str] = []

    # ------------------------------------------------------------------ nodes
    def screen(self) -> None:
        for node in self.nodes:
            if node.state not in (InstanceState.REQUESTED, InstanceState.RUNNING):
                continue
            head = node.id in self.heads
            spec = self.spec.node_types.get(node.node_type)
            if spec is None:
                if head:
                    self.notes.append(
                        f"head {node.id}: node type {node.node_type!r} is not in the cluster "
                        "file; the head is never terminated"
                    )
                else:
                    self.terminate[node.id] = (
                        f"node type {node.node_type!r} is not in the cluster file"
                    )
                continue
            outdated = node.launch_hash is not None and node.launch_hash != spec.launch_hash
            if outdated and head:
                self.notes.append(
                    f"head {node.id} runs an outdated launch config; the autoscaler never "
                    "replaces the head"
                )
            elif outdated:
                self.terminate[node.id] = (
                    f"launch config of {node.node_type} changed (node {node.launch_hash}, "
                    f"type {spec.launch_hash}): replaced by a new node"
                )
                if node.state is InstanceState.RUNNING and node.is_busy():
                    self.moved_work.append(dict(node.used))
                continue
            self.kept.append(node)

    def workers(self, node_type: str | None = None) -> list[Node]:
        return [
            n
            for n in self.kept
            if n.id not in self.heads
            and n.id not in self.terminate
            and (node_type is None or n.node_type == node_type)
        ]

    def worker_counts(self) -> Counter[str]:
        """Workers per type the plan keeps so far (one pass over the nodes)."""
        return Counter(n.node_type for n in self.workers())

    def _victim_key(self, node: Node) -> tuple[bool, bool, float, float]:
        total = self.spec.node_types[node.node_type].resources
        shares = [node.used.get(k, 0.0) / v for k, v in total.items() if v > 0]
        use = sum(shares) / len(shares) if shares else 0.0
        return (node.state is InstanceState.RUNNING, node.is_busy(), -node.idle_s, use)

    def enforce_maxima(self) -> None:
        by_type: dict[str, list[Node]] = {}
        for n in self.workers():
            by_type.setdefault(n.node_type, []).append(n)
        for name, workers in by_type.items():
            cap = self.spec.node_types[name].max_workers
            if len(workers) > cap:
                for node in sorted(workers, key=self._victim_key)[: len(workers) - cap]:
                    self.terminate[node.id] = f"above max_workers {cap} of {name}"
        workers = self.workers()
        excess = len(workers) - self.spec.max_workers
        if excess <= 0:
            return
        # Over the global max: victims from types above their minimum first; only when the
        # minima themselves exceed the global max do they give way too.
        left = self.worker_counts()
        for respect_minimum in (True, False):
            for node in sorted(workers, key=self._victim_key):
                if excess <= 0:
                    return
                floor = self.spec.node_types[node.node_type].min_workers if respect_minimum else 0
                if node.id in self.terminate or left[node.node_type] <= floor:
                    continue
                self.terminate[node.id] = f"above the cluster's max_workers {self.spec.max_workers}"
                left[node.node_type] -= 1
                excess -= 1

    def make_bins(self) -> None:
        for node in self.kept:
            if node.id in self.terminate:
                continue
            total = self.totals[node.node_type]
            free = list(total)
            if node.state is InstanceState.RUNNING:
                used = self.index.vector(node.used)
                free = [max(t - u, 0) for t, u in zip(total, used, strict=True)]
            has_gpu = self.spec.node_types[node.node_type].has_gpu()
            self.bins.append(Bin(node.node_type, free, 1, has_gpu, node.id))
        counts = self.worker_counts()
        self.room = Room(self.spec.max_workers - sum(counts.values()))
        self.options: list[TypeOption] = []
        for order, (name, spec) in enumerate(self.spec.node_types.items()):
            room = spec.max_workers - counts[name]
            if name in self.cooled:
                left_s = self.cooled[name] - self.now
                self.notes.append(
                    f"{name} is cooled down after a failed launch: not launched for "
                    f"{left_s:.0f} s more; the next best type is used instead"
                )
                room = 0
            self.options.append(
                TypeOption(
                    name, self.totals[name], spec.has_gpu(), order, room, spec.price_usd_per_hour
                )
            )

    # ------------------------------------------------------------------ launches
    def _min_launches(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for b in self.bins:
            if b.node_id is None and b.phase == MIN_WORKERS:
                counts[b.node_type] += b.count
        return counts

    def min_workers(self) -> None:
        """Launch what each type lacks of its minimum, as far as the rooms allow. Runs again
        after idle reaping, which may free room under the cluster's max_workers."""
        counts = self.worker_counts() + self._min_launches()
        for opt in self.options:
            spec = self.spec.node_types[opt.name]
            need = min(spec.min_workers, spec.max_workers) - counts[opt.name]
            count = min(need, opt.room, self.room.total)
            if count > 0:
                self.bins.append(
                    Bin(opt.name, list(opt.total), count, opt.has_gpu, None, MIN_WORKERS)
                )
                opt.room -= count
                self.room.total -= count

    def _min_notes(self) -> list[str]:
        have, launched = self.worker_counts(), self._min_launches()
        lines = []
        for name, spec in self.spec.node_types.items():
            want = min(spec.min_workers, spec.max_workers)
            if have[name] >= want:
                continue
            line = f"{name}: min_workers {spec.min_workers}, {have[name]} running or pending"
            if have[name] + launched[name] < want:
                why = "cooled down" if name in self.cooled else "the cluster's max_workers"
                line += f"; only {launched[name]} may be launched now ({why})"
            lines.append(line)
        return lines

    def _shape_count(self, shape: Shape, count: int) -> ShapeCount:
        needs_gpu = any(pos == self.gpu_pos for pos, _ in shape)
        weight = sum(amount / self.scale[pos] for pos, amount in shape)
        return ShapeCount(shape, count, needs_gpu, weight)

    def _aggregate(self, items: Iterable[tuple[Mapping[str, float], int]]) -> list[ShapeCount]:
        # Identical mappings are counted first: one shape is built per distinct mapping.
        by_mapping: dict[tuple[tuple[str, float], ...], int] = {}
        for resources, count in items:
            key = tuple(sorted(resources.items()))
            by_mapping[key] = by_mapping.get(key, 0) + count
        counts: dict[Shape, int] = {}
        for key, count in by_mapping.items():
            shape = self.index.shape(dict(key))
            if shape:  # work too small to measure fits anywhere
                counts[shape] = counts.get(shape, 0) + count
        return [self._shape_count(shape, count) for shape, count in counts.items()]

    def can_ever_hold(self, shape: Shape) -> bool:
        """Whether some node type that can exist (launchable, or the head's) holds ``shape``."""
        return any(
            fit_count(self.totals[name], shape) > 0
            for name, t in self.spec.node_types.items()
            if t.max_workers > 0 or name == self.spec.head_node_type
        )

    def _feasible(self, shapes: list[ShapeCount]) -> list[ShapeCount]:
        """The shapes some node type can hold; the others are recorded as unsatisfiable."""
        out = []
        for sc in shapes:
            if self.can_ever_hold(sc.shape):
                out.append(sc)
            else:
                self.unsatisfiable[sc.shape] = self.unsatisfiable.get(sc.shape, 0) + sc.count
                self.unsat_notes.append(
                    f"unsatisfiable: {sc.count} x {self._fmt(sc.shape)}: no node type can hold it"
                )
        return out

    def _launch_for(self, shapes: list[ShapeCount], phase: str) -> None:
        for choice in choose_new_nodes(shapes, self.options, self.room, phase):
            self.bins.append(choice.bin)
            self.gpu_note.update(choice.kept_off_gpu)

    def _wait(self, shapes: Iterable[ShapeCount]) -> None:
        for sc in shapes:
            if sc.count > 0:
                self.waiting[sc.shape] = self.waiting.get(sc.shape, 0) + sc.count

    def requested(self, requested: Demand) -> None:
        """Pack the standing request against whole nodes; launch for what does not fit. The
        new nodes join the cluster empty (the request is a floor, not work)."""
        shapes = self._feasible(self._aggregate(requested.as_bundles(strict_spread=True)))
        whole = []
        for b in self.bins:
            copy = b.clone(b.count)
            copy.free, copy.placed = list(self.totals[b.node_type]), {}
            whole.append(copy)
        pack(shapes, whole)
        self.protected.update(b.node_id for b in whole if b.node_id and b.placed)
        for choice in choose_new_nodes(shapes, self.options, self.room, REQUESTED):
            new = choice.bin
            new.free, new.placed = list(self.totals[new.node_type]), {}
            self.bins.append(new)
        self._wait(shapes)

    def strict_spreads(self, demand: Demand) -> None:
        for i, pg in enumerate(demand.placement_groups):
            if pg.strategy != "STRICT_SPREAD":
                continue
            label = f"placement group {pg.label(i)} (STRICT_SPREAD)"
            shapes = [self._shape_count(self.index.shape(b), 1) for b in pg.bundles]
            if not all(self.can_ever_hold(sc.shape) for sc in shapes):
                self.unsat_notes.append(f"unsatisfiable: {label}: no node type holds a bundle")
                self._record(self.unsatisfiable, shapes, pg.count)
                continue
            for placed in range(pg.count):
                copies = [self._shape_count(sc.shape, 1) for sc in shapes]
                if place_strict_spread(copies, self.bins, self.options, self.room, label) is None:
                    left = pg.count - placed
                    self._record(self.waiting, shapes, left)
                    for sc in shapes:
                        self.waiting_why.setdefault(sc.shape, f"{label}: one node per bundle")
                    break

    @staticmethod
    def _record(into: dict[Shape, int], shapes: Iterable[ShapeCount], times: int) -> None:
        for sc in shapes:
            into[sc.shape] = into.get(sc.shape, 0) + times

    def pending(self, demand: Demand) -> None:
        """Placement groups' bundles first (Ray puts them at the front of the demand, and
        their nodes pass the upscaling cap), then the other pending work."""
        groups = Demand(placement_groups=demand.placement_groups)
        rest = Demand(bundles=demand.bundles)
        for part, phase, extra in (
            (groups, PLACEMENT_GROUPS, []),
            (rest, PENDING, self.moved_work),
        ):
            items = part.as_bundles(strict_spread=False)
            items.extend((work, 1) for work in extra)
            shapes = self._feasible(self._aggregate(items))
            pack(shapes, self.bins)
            self._launch_for(shapes, phase)
            self._wait(shapes)

    def _exempt(self, phase: str) -> bool:
        """Launches Ray lets past the cap: min_workers, request_resources, placement groups."""
        return phase in (MIN_WORKERS, REQUESTED, PLACEMENT_GROUPS) or phase.endswith(STRICT_SPREAD)

    def cap(self) -> None:
        """Ray's upscaling cap, per node type: launches in flight of a type stay within
        max(5, upscaling_speed x max(running nodes of the type, 1)), less its pending nodes;
        launches for min_workers, requested resources and placement groups count against the
        cap but are never clipped by it."""
        speed = self.spec.upscaling_speed
        running: Counter[str] = Counter(
            n.node_type
            for n in self.kept
            if n.state is InstanceState.RUNNING and n.id not in self.terminate
        )
        pending: Counter[str] = Counter(
            n.node_type
            for n in self.kept
            if n.state is InstanceState.REQUESTED and n.id not in self.terminate
        )
        new = [b for b in self.bins if b.node_id is None]
        clipped: list[str] = []
        self.in_flight_cap = INITIAL_IN_FLIGHT
        for name in self.spec.node_types:
            of_type = [b for b in new if b.node_type == name]
            if not of_type:
                continue
            cap = max(INITIAL_IN_FLIGHT, math.floor(speed * max(running[name], 1)))
            self.in_flight_cap = max(self.in_flight_cap, cap)
            exempt = sum(b.count for b in of_type if self._exempt(b.phase))
            room = max(cap - pending[name] - exempt, 0)
            wanted = sum(b.count for b in of_type) - exempt
            for b in of_type:
                if self._exempt(b.phase):
                    continue
                keep = min(b.count, room)
                room -= keep
                for shape, per_node in b.placed.items():
                    dropped = per_node * (b.count - keep)
                    if dropped:
                        self.waiting[shape] = self.waiting.get(shape, 0) + dropped
                        self.waiting_why[shape] = "the upscaling cap"
                b.count = keep
            launched = sum(b.count for b in of_type) - exempt
            if launched < wanted:
                clipped.append(
                    f"{name}: at most {cap} in flight (max({INITIAL_IN_FLIGHT}, {speed:g} x "
                    f"{max(running[name], 1)} running)), {pending[name]} pending, "
                    f"{exempt} exempt; launching {launched} of the {wanted} wanted now"
                )
        self.bins = [b for b in self.bins if b.count > 0]
        if clipped:
            self.cap_note = "upscaling cap: " + "; ".join(clipped) + "; the rest later"

    # ------------------------------------------------------------------ idle
    def idle(self) -> None:
        self.protected.update(b.node_id for b in self.bins if b.node_id and b.placed)
        left = self.worker_counts()
        for node in sorted(self.kept, key=lambda n: -n.idle_s):
            spec = self.spec.node_types[node.node_type]
            timeout_s = (
                spec.idle_timeout_s if spec.idle_timeout_s is not None else self.spec.idle_timeout_s
            )
            if (
                node.state is not InstanceState.RUNNING
                or node.id in self.terminate
                or node.is_busy()
                or node.idle_s <= timeout_s
            ):
                continue
            idle = f"{node.id} ({node.node_type}) idle {node.idle_s:.0f} s > {timeout_s:.0f} s"
            if node.id in self.heads:
                self.idle_notes.append(f"keep {idle}: the head is never terminated")
            elif node.id in self.protected:
                self.idle_notes.append(f"keep {idle}: pending demand was packed onto it")
            elif left[node.node_type] <= spec.min_workers:
                self.idle_notes.append(f"keep {idle}: min_workers {spec.min_workers}")
            else:
                self.terminate[node.id] = f"idle {node.idle_s:.0f} s > {timeout_s:.0f} s"
                left[node.node_type] -= 1
                self.room.total += 1
                if node.node_type not in self.cooled:
                    self._option(node.node_type).room += 1
        self.min_workers()  # room freed under the cluster's max goes to the minimums first

    def _option(self, name: str) -> TypeOption:
        return next(o for o in self.options if o.name == name)

    # ------------------------------------------------------------------ the plan
    def _fmt(self, shape: Shape) -> str:
        return format_resources(self.index.resources(shape))

    def _launch_lines(self) -> list[str]:
        lines = describe_runs([b for b in self.bins if b.node_id is None], self.index)
        passed_over = sorted(self.gpu_note - {b.node_type for b in self.bins if b.node_id is None})
        if passed_over:
            lines.append(
                "work that needs no GPU kept off GPU node types: " + ", ".join(passed_over)
            )
        return lines

    def _waiting_lines(self) -> list[str]:
        lines = []
        for shape, count in self.waiting.items():
            why = self.waiting_why.get(shape) or self._blockers(shape)
            lines.append(f"waiting: {count} x {self._fmt(shape)}: {why}")
        return lines

    def _blockers(self, shape: Shape) -> str:
        out = []
        for opt in self.options:
            if fit_count(opt.total, shape) == 0:
                continue
            spec = self.spec.node_types[opt.name]
            if opt.name in self.cooled:
                out.append(f"{opt.name} cooled down")
            elif opt.room <= 0:
                out.append(f"{opt.name} at max_workers {spec.max_workers}")
        if self.room.total <= 0:
            out.append(f"the cluster's max_workers {self.spec.max_workers} reached")
        return "; ".join(out) or "no room on the nodes that may be launched"

    def plan(self) -> Plan:
        launch: dict[str, int] = {}
        for name in self.spec.node_types:
            count = sum(b.count for b in self.bins if b.node_id is None and b.node_type == name)
            if count:
                launch[name] = count
        reasons = [*self.notes, *self._min_notes()]
        reasons += [f"terminate {node_id}: {why}" for node_id, why in self.terminate.items()]
        reasons += self._launch_lines()
        reasons += [self.cap_note] if self.cap_note else []
        reasons += self._waiting_lines() + self.unsat_notes + self.idle_notes
        if not reasons:
            reasons.append("nothing to do: the demand fits on the nodes there are")
        return Plan(
            launch=launch,
            terminate=list(self.terminate),
            reasons=reasons,
            unsatisfiable=self._bundles(self.unsatisfiable),
            waiting=self._bundles(self.waiting),
            in_flight_cap=self.in_flight_cap,
        )

    def _bundles(self, counts: Mapping[Shape, int]) -> list[BundleDemand]:
        return [
            BundleDemand(resources=self.index.resources(shape), count=count)
            for shape, count in counts.items()
            if count > 0
        ]
