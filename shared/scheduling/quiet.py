"""When a pool pass can be known to decide nothing: the simulator skips such passes.

A pass (:mod:`.pool_passes`) is a pure function of the ledger and the clock. A pass is
*settled* when what it committed changes nothing a later pass reads: no placement,
preemption, replacement, reap or new agent, the same held room, the same partitions with free
room. A second pass over that same ledger then decides the same, unless the clock alone
crossed a threshold a decision compares against. Every such comparison turns from false to
true as time passes, and only these read the clock:

- machine pools: a victim must have run ``min_runtime_s`` (preemption, and ``corral why``'s
  note on spared work), asked only while work waits; with rebalancing, a workload is replaced
  only ``replacement_guard_s`` after its last replacement and once a better partition has had
  room for its ``replacement_threshold_s``, and an idle machine is reaped past its type's
  ``max_idle_s``; a workload whose machine failed to launch is placed again once its pause
  ends, and a group it passed over is back in its order at its own time (:mod:`.fallback`);
  a machine type whose every place is blocked books new machines again once a block ends
  (its ``launch_blocked_until``, set by the pass's caller);
- Determined: an idle agent is reaped past its pool's ``max_idle_agent_s``;
- budgets: spend accrues with time and periods start afresh, so a pass under budgets is
  never known to be quiet.

:func:`machine_pool_quiet_until` and :func:`determined_quiet_until` give the earliest such
crossing after a settled pass: until then a pass over the unchanged ledger would write the same
plan (only the version and ``computed_at`` differ). After a settled pass without rebalancing,
:func:`rebalancing_quiet_after_plain` says the same of beat's next rebalancing pass, which adds
only replacements and reaps to the plain pass. The runtime runs every pass (beat's
rebalancing every ``pool_rebalance_interval_s``); the simulator, replaying a day, skips the ones
these say are quiet (``tests/unit/test_sim.py`` runs the skipped passes anyway and checks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter, eq, itemgetter
from typing import Any

from ..budgets import for_pools
from .det_ledger import DetLedger
from .det_pool_state import HOLDS_SLOTS
from .fallback import thresholds as setback_times
from .ledger import PoolLedger
from .model import DetPlan, MachineTypeState, Plan
from .pool_passes import Costing, PassKnobs

NEVER = math.inf
_FIELDS = attrgetter("__dict__")  # a model's fields as stored
_PHASE = itemgetter("phase")
ROUNDING_S = 1e-6


def machine_pool_settled(before: PoolLedger, after: PoolLedger, plan: Plan) -> bool:
    """Whether a machine-pool pass changed nothing the next pass reads."""
    acted = plan.placements or plan.preemptions or plan.replacements or plan.reaps
    return (
        not acted
        and after.reservations == before.reservations
        and after.free_since == before.free_since
    )


def machine_pool_quiet_until(
    ledger: PoolLedger,
    types: Sequence[MachineTypeState],
    now: float,
    knobs: PassKnobs,
    *,
    rebalance: bool,
    costing: Costing | None = None,
) -> float:
    """The earliest time a pass over this (settled) ledger could decide otherwise than one at
    ``now``; ``now`` itself when that cannot be known (budgets)."""
    if costing is not None and for_pools(costing.budgets, [ledger.pool]):
        return now
    times: list[float] = setback_times(ledger.workloads, ledger.setbacks)
    # A machine type whose launches are blocked takes new machines again once a block ends.
    times += [t.launch_blocked_until for t in types if t.launch_blocked_until is not None]
    # The phases read at C speed: a queue of thousands waits while a few run.
    workloads = list(ledger.workloads.values())
    phases = list(map(_PHASE, map(_FIELDS, workloads)))
    running = list(compress(workloads, map(eq, phases, repeat("running"))))
    if "pending" in phases:
        times += [_started(w.started_at, w.submitted_at) + knobs.min_runtime_s for w in running]
    if rebalance:
        ripe, guards = _rebalancing_times(ledger, types, running, knobs)
        times += ripe + guards
    return _earliest(times, now)


def rebalancing_quiet_after_plain(
    ledger: PoolLedger,
    types: Sequence[MachineTypeState],
    now: float,
    knobs: PassKnobs,
    plain: float,
) -> float:
    """After a settled pass *without* rebalancing: until when a rebalancing pass over the same
    ledger would decide nothing either; ``now`` when it may decide now.

    A rebalancing pass is the plain pass (the same loop over the queue: the same placements,
    preemptions and answers) with replacements and idle reaps planned after it. Over a ledger
    a settled plain pass left, it adds nothing while no idle machine is past its limit and no
    better partition has had free room for a movable workload's threshold. Unlike after a
    rebalancing pass, a threshold already behind ``now`` is not known to have been looked at
    (the last rebalancing pass saw another ledger), so it makes the pass due now. ``plain``:
    what :func:`machine_pool_quiet_until` said of a plain pass over this ledger."""
    if plain <= now:
        return plain
    workloads = list(ledger.workloads.values())
    phases = map(_PHASE, map(_FIELDS, workloads))
    running = list(compress(workloads, map(eq, phases, repeat("running"))))
    ripe, guards = _rebalancing_times(ledger, types, running, knobs)
    if any(t <= now + ROUNDING_S for t in ripe):
        return now
    return min(plain, _earliest(ripe + guards, now))


def _rebalancing_times(
    ledger: PoolLedger,
    types: Sequence[MachineTypeState],
    running: Sequence[Any],
    knobs: PassKnobs,
) -> tuple[list[float], list[float]]:
    """What only a rebalancing pass compares the clock against: when each better partition's
    free room and each idle machine become ripe (a replacement's or a reap's), and when each
    movable workload's replacement guard ends (it matters only once something is ripe)."""
    movable = [w for w in running if w.enable_replacement]
    guards = [
        w.last_replaced_at + knobs.replacement_guard_s
        for w in movable
        if w.last_replaced_at is not None
    ]
    thresholds = {w.replacement_threshold_s for w in movable}
    ripe = [since + t for since in ledger.free_since.values() for t in thresholds]
    max_idle = {t.machine_type: t.max_idle_s for t in types}
    ripe += [
        m.idle_since + limit
        for m in ledger.machines.values()
        if m.workload_id is None and not m.head and m.status != "reaping"
        if m.idle_since is not None and (limit := max_idle.get(m.machine_type)) is not None
    ]
    return ripe, guards


def determined_settled(before: DetLedger, after: DetLedger, plans: Iterable[DetPlan]) -> bool:
    """Whether a Determined pass changed nothing the next pass reads (no agent was added)."""
    acted = any(p.starts or p.releases or p.reaps for p in plans)
    return not acted and after.agents.keys() == before.agents.keys()


def determined_quiet_until(
    ledger: DetLedger,
    limits: Mapping[str, Mapping[str, Any]],
    now: float,
    *,
    pools: Iterable[str] = (),
    costing: Costing | None = None,
    blocked_until: Iterable[float] = (),
) -> float:
    """The earliest time a pass over this (settled) master ledger could decide otherwise than
    one at ``now`` (an idle agent due for reaping, a pool's launches no longer all blocked);
    ``now`` itself under budgets. ``pools``: the resource pools' names; ``limits``: per pool,
    its provider's limits; ``blocked_until``: when each blocked pool's first block ends."""
    if costing is not None and for_pools(costing.budgets, [ledger.master, *pools]):
        return now
    busy = {a.agent_id for t in filter(HOLDS_SLOTS, ledger.tasks.values()) for a in t.allocations}
    times: list[float] = list(blocked_until)
    for agent in ledger.agents.values():
        limit = limits.get(agent.pool, {}).get("max_idle_agent_s")
        if limit is not None and agent.status != "reaping" and agent.agent_id not in busy:
            times.append((agent.idle_since or agent.created_at) + float(limit))
    return _earliest(times, now)


def _started(started_at: float | None, submitted_at: float) -> float:
    return started_at if started_at is not None else submitted_at


def _earliest(times: Iterable[float], now: float) -> float:
    """The first threshold not yet behind ``now`` (those behind have already flipped), a
    microsecond early: the decisions compare ``now - since`` with a limit, which may round
    differently from ``since + limit``."""
    return min((t for t in times if t >= now), default=NEVER) - ROUNDING_S
