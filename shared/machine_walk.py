"""A pooled machine's zone walk (a machine pool's machine, a Determined agent, a pod of either),
with the same block memory as a direct request's.

A pooled machine is launched in the first place of its launch order that takes it: each launch
template in order, each in the zones that offer its type (a reservation's zone alone for a
template that draws on one). Those places are a chain like a direct request's, walked by the
same :func:`corral.shared.failover.next_step` against the same remembered blocks (the runtime's
Redis memory, the simulator's :class:`~corral.shared.sim.direct.BlockMemory`): a place a block
covers for its type and market (a sold-out zone, a quota family used up in its region, a
hung region, a cloud without credentials) is passed over without a cloud call, and a refused
launch is remembered at the scope the cloud meant (:meth:`Block.for_error`), for every later
request, pooled or direct, and for the rest of this walk.

Plan, then apply, in steps: :meth:`MachineWalk.next` decides (a typed
:class:`~corral.shared.failover_plan.Attempt` or :class:`~corral.shared.failover_plan.Fail`;
no wait is planned: a pool's own fallback paces what follows a failed machine,
:mod:`corral.shared.scheduling.fallback`), the adapter makes the call, and
:meth:`MachineWalk.failed` says what a refusal blocks. The runtime
(:func:`corral.services.runtime.pooled.launching.launch_pooled`) and the simulator
(:mod:`corral.shared.sim.pool_sims`) both walk with this class.

One exception to the memory: a reservation that is full (a capacity error where the machine
draws on a reservation) is not remembered. The reservation is the pool's own, not a scope
other requests launch in, and the pool's fallback already passes its group over for a while;
remembered, it would stay blocked after our own machine there ends and frees it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.errors import ProviderError, Scope
from corral.shared.failover import Within, next_step
from corral.shared.failover_plan import Attempt, Fail, PassedOver
from corral.shared.placement import AtPlace, Block, Placed, Placement
from corral.shared.reservations import reservation_of

# (zone, region) pairs that offer a template's type (its reservation's zone alone, if it has one).
ZonesOf = Callable[[LaunchTemplate], Sequence[tuple[str, str]]]
AcceleratorOf = Callable[[str], str | None]  # an instance type's accelerator kind (None: CPUs)
BlockRule = Callable[[ProviderError, Placed], Block | None]


@dataclass(frozen=True, slots=True)
class MachinePlace(AtPlace):
    """One place of a pooled machine's launch order: ``template`` is its launch template's
    position. Its ``market`` is ``reserved`` when the template draws on a reservation (what
    blocks and quota families read); :attr:`launch_market` is the market the cloud is asked
    for. Its accelerator is looked up only when a block or a refusal needs it (a quota
    family), through ``accelerator_of``."""

    place: Placement
    template: int
    launch_market: str  # on_demand | spot: the template's market_type
    accelerator_of: AcceleratorOf | None = field(default=None, compare=False, repr=False)

    @classmethod
    def launched(
        cls,
        place: Placement,
        config: Mapping[str, Any],
        accelerator_of: AcceleratorOf | None = None,
    ) -> MachinePlace:
        """The place of a machine launched at ``place`` (its market as the cloud was asked)
        with ``config``: read as ``reserved`` when the config draws on a reservation, as
        :func:`machine_places` reads its template."""
        rid = place.reservation or reservation_of(config)
        market = "reserved" if rid is not None else place.market
        at = Placement(place.cloud, place.region, place.zone, place.instance_type, market, rid)
        return cls(at, 0, place.market, accelerator_of)

    @property
    def reservation(self) -> str | None:
        return self.place.reservation

    @property
    def accelerators(self) -> dict[str, int]:
        """What :class:`~corral.shared.placement.Ask` reads: its accelerator kind, if any."""
        found = self.accelerator_of(self.instance_type) if self.accelerator_of else None
        return {found: 1} if found else {}

    @property
    def num_nodes(self) -> int:
        return 1  # a pooled launch is one machine


def machine_places(
    cloud: str,
    templates: Sequence[LaunchTemplate],
    zones_of: ZonesOf,
    accelerator_of: AcceleratorOf | None = None,
) -> list[MachinePlace]:
    """The places of a launch order, in the order they are tried: each template's zones (its
    ``zones`` when it names some), template by template."""
    out: list[MachinePlace] = []
    for n, template in enumerate(templates):
        rid = reservation_of(template.advanced_instance_config)
        launch_market = "spot" if template.market_type == "SPOT" else "on_demand"
        market = "reserved" if rid is not None else launch_market
        for zone, region in zones_of(template):
            if template.zones is not None and zone not in template.zones:
                continue
            place = Placement(cloud, region, zone, template.instance_type, market, rid)
            out.append(MachinePlace(place, n, launch_market, accelerator_of))
    return out


def failure_block(exc: ProviderError, place: MachinePlace, rule: BlockRule) -> Block | None:
    """What a refused launch at ``place`` blocks: ``rule``'s block (the runtime's
    :meth:`Block.for_error`), except a full reservation's (see the module docstring)."""
    if place.reservation is not None and exc.scope == Scope.ZONE:
        return None
    return rule(exc, place)


# A launch order laid out on a cloud: its places in order, and the instance types no zone offers.
Laid = tuple[list[MachinePlace], list[str]]


def lay_out(
    cloud: str,
    templates: Sequence[LaunchTemplate],
    zones_of: ZonesOf,
    accelerator_of: AcceleratorOf | None = None,
) -> Laid:
    """The places a walk of these templates goes through, and the types no zone offers."""
    places = machine_places(cloud, templates, zones_of, accelerator_of)
    offered = {p.template for p in places}
    return places, [t.instance_type for n, t in enumerate(templates) if n not in offered]


class MachineWalk:
    """One pooled machine's walk (see the module docstring). ``blocks``: the blocks in force
    when it starts, each with its end; ``rule``: what a refusal blocks (the simulator's
    comparison of the rule before issue #46 passes its own)."""

    def __init__(
        self,
        places: Sequence[MachinePlace],
        blocks: Sequence[tuple[Block, float]],
        *,
        cloud: str = "",
        unoffered: Sequence[str] = (),
        rule: BlockRule = Block.for_error,
    ) -> None:
        self.places = list(places)
        self.cloud = cloud or (places[0].cloud if places else "")
        self.blocks = [b for b, _ in blocks]
        self.unoffered = list(unoffered)  # instance types no zone offers (told in the account)
        self.rule = rule
        self.after = -1
        self.tried: list[tuple[int, ProviderError]] = []
        self.passed: list[tuple[int, Block]] = []

    @classmethod
    def of(
        cls,
        cloud: str,
        templates: Sequence[LaunchTemplate],
        zones_of: ZonesOf,
        blocks: Sequence[tuple[Block, float]],
        *,
        accelerator_of: AcceleratorOf | None = None,
        rule: BlockRule = Block.for_error,
    ) -> MachineWalk:
        """The walk of a launch order's templates on ``cloud``."""
        places, unoffered = lay_out(cloud, templates, zones_of, accelerator_of)
        return cls(places, blocks, cloud=cloud, unoffered=unoffered, rule=rule)

    def next(self) -> Attempt | Fail:
        """The next place to try, after the last one tried, that no block covers; or the end
        of the walk."""
        found = next_step(self.places, self.after, self.blocks, Within.ANY)
        known = {block for _, block in self.passed}
        self.passed.extend(p for p in found.passed_over if p[1] not in known)
        if found.index is not None:
            return Attempt(found.index, found.passed_over)
        verdict = f"all {len(self.places)} places failed or are blocked ({len(self.tried)} tried)"
        return Fail(verdict, None, tuple(self.passed))

    def failed(self, index: int, exc: ProviderError, *, remember: bool = True) -> Block | None:
        """The launch at position ``index`` was refused with ``exc``: the walk goes on after
        it, and the block the refusal calls for (None: nothing) covers the rest of this walk;
        the caller remembers it for everyone. ``remember``: False when the caller knows the
        refusal says nothing of the cloud (a timeout its own outage caused)."""
        self.after = index
        self.tried.append((index, exc))
        block = failure_block(exc, self.places[index], self.rule) if remember else None
        if block is not None:
            self.blocks.append(block)
        return block

    @property
    def passed_over(self) -> PassedOver:
        return tuple(self.passed)

    def account(self) -> str:
        """What the walk met, in order: each refusal (``zone: outcome: error``), each block
        that hid places (``zone: blocked: the block``), each type no zone offers."""
        told: list[tuple[int, str]] = [
            (i, f"{self.places[i].zone}: {exc.outcome}: {exc}") for i, exc in self.tried
        ]
        told += [(i, f"{self.places[i].zone}: blocked: {block}") for i, block in self.passed]
        lines = [text for _, text in sorted(told, key=lambda t: t[0])]
        lines += [f"no zone of {self.cloud} offers {itype}" for itype in self.unoffered]
        return "; ".join(lines)


@dataclass(frozen=True, slots=True)
class LaunchBlocked:
    """Every place of a launch order is blocked now: no new machine of it is worth asking the
    cloud for (its idle machines still serve) before ``until``, the first of those blocks' ends
    (a place another block covers too stays blocked past it: a pass then looks again).
    ``places``: which places, blocked by what; :attr:`why` is the line a waiting workload's
    reason carries."""

    until: float
    places: str

    @property
    def why(self) -> str:
        return f"no new machine: {self.places}"


def launch_blocked(
    cloud: str,
    templates: Sequence[LaunchTemplate],
    zones_of: ZonesOf,
    blocks: Sequence[tuple[Block, float]],
    *,
    accelerator_of: AcceleratorOf | None = None,
    laid: Laid | None = None,
) -> LaunchBlocked | None:
    """Whether a machine launched with ``templates`` now would be refused by the blocks
    alone, every place passed over without a cloud call (a pool pass then books no new
    machine of it: a workload placed there would only fail its launch, back off and be
    placed again). None when some place can be tried, or when no zone offers it (its launch
    says so, as before). ``laid``: the templates' :func:`lay_out`, when the caller keeps it
    (a simulated pool asks again at every change of its cloud's blocks)."""
    if not any(block.cloud == cloud for block, _ in blocks):
        return None  # nothing of this cloud is blocked: its places are not even asked for
    if laid is None:
        walk = MachineWalk.of(cloud, templates, zones_of, blocks, accelerator_of=accelerator_of)
    else:
        walk = MachineWalk(laid[0], blocks, cloud=cloud, unoffered=laid[1])
    if not walk.places or isinstance(walk.next(), Attempt):
        return None
    ends: dict[Block, float] = {}
    for block, end in blocks:
        ends[block] = max(end, ends.get(block, end))
    covering = list(dict.fromkeys(block for _, block in walk.passed))
    until = min(ends[block] for block in covering)
    places = len(walk.places)
    # The text names the blocks, not their ends: a block renewed by another launch's refusal
    # (the common case while a type is sold out) moves its end, and a reason that moved with
    # it would be a new answer for every waiting workload at every renewal. `corral why`
    # lists the named blocks with their ends as they are when it is asked.
    return LaunchBlocked(
        until,
        f"its {places} place{'s' * (places != 1)} blocked "
        f"({'; '.join(map(str, covering))}) until the first of these blocks ends",
    )
