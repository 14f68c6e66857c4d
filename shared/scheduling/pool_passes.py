"""One pool pass, as the runtime's scheduling worker and the simulator both run it: a ledger in,
the ledger to write and the plan out. Pure; the callers bring the clock, the ids and the prices.

- :func:`machine_pool_pass`: the machine-pool scheduler over a snapshot of the ledger,
  committed to a copy.
- :func:`determined_pass`: every resource pool of a master config (fallback pools included),
  committed, and agents added for tasks left waiting for room.

Both honour dollar budgets (:mod:`corral.shared.budgets`) when given a :class:`Costing`: the
placements of a plan are checked in order, those a budget refuses are held back
(``over_budget``) and the pass is computed again without them, until every placement fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, not_
from typing import Any

from ..budgets import Budget, BudgetSpend, Gate, accrue, budget_rates, for_pools
from ..catalog.catalog import Catalog
from ..config.machine_pool import MachinePool
from ..machine_walk import LaunchBlocked
from ..resource_pools import ResolvedPools
from . import trusted
from .build import market_of
from .det_ledger import DetLedger, NewAgentId, commit_det, grow, snapshots_of
from .determined import schedule_pools
from .fallback import seen_at
from .ledger import NewMachineId, PoolLedger, commit, snapshot_of
from .machine_pools import schedule
from .model import DetPlan, MachineTypeState, Pending, Plan, TaskPending, Workload
from .partitions import FIELDS

NO_REAPING = 10**9  # a pass that must not reap (only a rebalancing pass reaps)


@dataclass(frozen=True)
class PassKnobs:
    """The runtime's timers a pass reads (``services.settings.Timers`` has the defaults)."""

    min_runtime_s: float = 60.0
    replacement_budget: int = 1
    replacement_guard_s: float = 600.0
    pool_min_machines: int = 0

    @classmethod
    def of(cls, timers: Any) -> PassKnobs:
        """The knobs from an object with the same field names (the settings' timers)."""
        return cls(
            min_runtime_s=float(timers.min_runtime_s),
            replacement_budget=int(timers.replacement_budget),
            replacement_guard_s=float(timers.replacement_guard_s),
            pool_min_machines=int(timers.pool_min_machines),
        )


@dataclass(frozen=True)
class Costing:
    """Budgets and prices for one pass. ``prices``: USD per hour of one machine of each
    machine type (machine pools), or of one slot of each resource pool (Determined)."""

    budgets: tuple[Budget, ...] = ()
    prices: Mapping[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# Machine pools


def machine_pool_pass(
    ledger: PoolLedger,
    types: Sequence[MachineTypeState],
    now: float,
    knobs: PassKnobs,
    *,
    rebalance: bool,
    new_id: NewMachineId,
    costing: Costing | None = None,
) -> tuple[PoolLedger, Plan]:
    """The machine-pool scheduler over ``ledger`` at ``now``, committed to a copy.
    ``rebalance``: replacement and idle reaping are decided too (beat's pass). A workload
    whose machine failed to launch (:mod:`.fallback`) is held back while it backs off, and
    seen without the groups it passes over."""
    snapshot = snapshot_of(ledger, types)
    setbacks = ledger.setbacks
    backing_off: dict[str, Pending] = {}
    gone: dict[str, str] = {}
    if setbacks:
        changed, backing_off, gone = seen_at(ledger.workloads, setbacks, now)
        snapshot = snapshot.model_copy(
            update={"workloads": _narrowed_all(ledger, snapshot.workloads, changed)}
        )

    def run(hidden: Mapping[str, Any], passed_over: Mapping[str, str] | None = None) -> Plan:
        snap = snapshot
        if hidden:
            every = snapshot.workloads  # those not hidden, picked out at C speed
            shown = map(not_, map(hidden.__contains__, map(_WORKLOAD_ID, map(FIELDS, every))))
            kept = tuple(compress(every, shown))
            snap = snapshot.model_copy(update={"workloads": kept})
        return schedule(
            snap,
            now,
            min_runtime_s=knobs.min_runtime_s,
            replacement_budget=knobs.replacement_budget if rebalance else 0,
            replacement_guard_s=knobs.replacement_guard_s,
            min_machines=knobs.pool_min_machines if rebalance else NO_REAPING,
            passed_over=passed_over,
        )

    budgets = for_pools(costing.budgets, [ledger.pool]) if costing else ()
    if costing is None or not budgets:
        # The groups passed over told as the pass tells each workload (as _told_of_setbacks
        # tells them after: the same answers), the workloads held back added at the end.
        plan = run(backing_off, gone)
        if backing_off:
            plan = plan.model_copy(update={"pending": (*plan.pending, *backing_off.values())})
        return commit(ledger, plan, types, now, new_id), plan
    prices = costing.prices
    rates = budget_rates(budgets, _pool_holders(ledger, prices))
    spend = accrue(ledger.budget_spend, budgets, rates, now)
    held: dict[str, Pending] = dict(backing_off)
    while True:
        plan = run(held)
        gate = Gate(budgets, spend)
        refused = []
        for placement in plan.placements:
            workload = ledger.workloads[placement.workload_id]
            rate = sum(prices.get(n.machine_type, 0.0) for n in placement.nodes)
            why = gate.admit((ledger.pool,), workload.selector_labels(), rate)
            if why is not None:
                refused.append(
                    Pending(
                        workload_id=workload.workload_id,
                        code="over_budget",
                        reason=why.reason,
                        budget=why.budget,
                    )
                )
        if not refused:
            break
        # Held back for this pass: computed again without them, the room they would have
        # taken goes to the next in line (and is checked in turn).
        held.update((p.workload_id, p) for p in refused)
    plan = plan.model_copy(update={"pending": (*plan.pending, *held.values())})
    if setbacks:
        plan = _told_of_setbacks(plan, {}, gone)
    after = commit(ledger, plan, types, now, new_id)
    after.budget_spend = _booked(spend, gate)
    return after, plan


def _narrowed_all(
    ledger: PoolLedger, workloads: tuple[Workload, ...], changed: Mapping[str, Workload]
) -> tuple[Workload, ...]:
    """The snapshot's workloads (``ledger.workloads``' values, in order) with those that
    :func:`narrowed` changes (``changed``, by id) put in their places."""
    if not changed:
        return workloads
    out = list(workloads)
    where = dict(zip(ledger.workloads, range(len(out)), strict=True))
    for wid, seen in changed.items():
        out[where[wid]] = seen
    return tuple(out)


_WORKLOAD_ID = itemgetter("workload_id")


def _told_of_setbacks(
    plan: Plan, backing_off: Mapping[str, Pending], gone: Mapping[str, str]
) -> Plan:
    """The plan with the workloads held back (``backing_off``) among its waiting ones, and a
    waiting workload that passes groups over told so (``gone``: by id, the groups it passes
    over, as :func:`passed_over` says them): its reason speaks of the groups it may use, not
    of the ones it waits to use again. Only those in ``gone`` are looked at (a queue of
    thousands is picked out at C speed)."""
    pending = list(plan.pending)
    if gone:
        ids = list(map(_WORKLOAD_ID, map(FIELDS, pending)))
        for i in compress(range(len(ids)), map(gone.__contains__, ids)):
            p = pending[i]
            if p.code != "backing_off":
                pending[i] = _told(p, gone[ids[i]])
    return plan.model_copy(update={"pending": (*pending, *backing_off.values())})


def _told(pending: Pending, gone: str) -> Pending:
    """``pending`` with the groups it passes over (``gone``) added to its reason. A long
    queue is told the same pass after pass: the last answer per workload is kept and given
    again while what it was made of is equal (the models are frozen)."""
    own = pending.__dict__
    known = _TOLD.get(own["workload_id"])
    if known is not None and known[1] == gone and known[0] == own:
        return known[2]
    reason = f"{own['reason']}; passed over after a failed launch: {gone}"
    told = trusted.updated(pending, {"reason": reason})
    if len(_TOLD) >= _TOLD_MAX:
        _TOLD.clear()
    _TOLD[own["workload_id"]] = (own, gone, told)
    return told


_TOLD: dict[str, tuple[dict[str, Any], str, Pending]] = {}
_TOLD_MAX = 20_000


def _pool_holders(
    ledger: PoolLedger, prices: Mapping[str, float]
) -> list[tuple[Sequence[str], Mapping[str, str], float]]:
    rate: dict[str, float] = {}
    for m in ledger.machines.values():
        if m.workload_id is not None and not m.head and m.workload_id in ledger.workloads:
            rate[m.workload_id] = rate.get(m.workload_id, 0.0) + prices.get(m.machine_type, 0.0)
    return [((ledger.pool,), ledger.workloads[wid].selector_labels(), r) for wid, r in rate.items()]


def _booked(spend: Mapping[str, BudgetSpend], gate: Gate) -> dict[str, BudgetSpend]:
    """The spend with this pass's placements added to each budget's rate."""
    return {
        name: s.model_copy(
            update={"rate_usd_per_hour": s.rate_usd_per_hour + gate.added.get(name, 0.0)}
        )
        for name, s in spend.items()
    }


def machine_type_prices(pool: MachinePool, cloud: str, catalog: Catalog) -> dict[str, float]:
    """USD per hour of one machine of each machine type: its first launch template's instance
    type in the catalog, at the spot price for a spot type and the list price otherwise (a
    reservation is priced as on-demand). A type the catalog lacks costs 0."""
    out: dict[str, float] = {}
    for machine in pool.machine_types:
        template = machine.launch_templates[0] if machine.launch_templates else None
        found = catalog.instance_type(cloud, template.instance_type) if template else ()
        if not found:
            out[machine.machine_type] = 0.0
            continue
        spot = found[0].spot_price_usd_per_hour
        market = market_of(machine)
        use_spot = market == "spot" and spot is not None
        out[machine.machine_type] = (
            spot if use_spot and spot is not None else found[0].price_usd_per_hour
        )
    return out


# ----------------------------------------------------------------------------------------------
# Determined


def determined_pass(
    ledger: DetLedger,
    pools: ResolvedPools,
    limits: Mapping[str, Mapping[str, Any]],
    now: float,
    *,
    new_id: NewAgentId,
    costing: Costing | None = None,
    markets: Mapping[str, str] | None = None,
    launch_blocked: Mapping[str, LaunchBlocked] | None = None,
) -> tuple[DetLedger, tuple[DetPlan, ...]]:
    """Every pool of the master's ledger scheduled at ``now``, committed to a copy, and agents
    added for tasks left waiting for room. ``limits``: per pool, its provider's limits;
    ``markets``: each up agent's market, from its row of the machine table;
    ``launch_blocked``: the pools whose every agent place is blocked now, which grow by no
    agent (it would only fail its launch) and say so in ``launch_blocked``."""
    snapshots = snapshots_of(ledger, pools, limits, markets)
    budgets = for_pools(costing.budgets, [ledger.master, *pools.names()]) if costing else ()
    held: dict[str, TaskPending] = {}
    gate: Gate | None = None
    spend: dict[str, BudgetSpend] = {}
    if costing is not None and budgets:
        rates = budget_rates(budgets, _det_holders(ledger, costing.prices))
        spend = accrue(ledger.budget_spend, budgets, rates, now)
    while True:
        snaps = snapshots
        if held:
            snaps = [
                s.model_copy(update={"tasks": tuple(t for t in s.tasks if t.task_id not in held)})
                for s in snapshots
            ]
        plans = schedule_pools(snaps, now)
        if costing is None or not budgets:
            break
        gate = Gate(budgets, spend)
        refused = _refused(ledger, plans, gate, costing.prices)
        if not refused:
            break
        held.update((p.task_id, p) for p in refused)
    plans = _with_held(plans, ledger, held)
    after = commit_det(ledger, plans, now)
    blocked = launch_blocked or {}
    grow(after, snaps, plans, now, new_id, blocked)
    told = {pool: f"no new agent: {b.places}" for pool, b in blocked.items()}
    if told != after.launch_blocked:
        after.launch_blocked = told
    if gate is not None:
        after.budget_spend = _booked(spend, gate)
    return after, plans


def _det_holders(
    ledger: DetLedger, prices: Mapping[str, float]
) -> list[tuple[Sequence[str], Mapping[str, str], float]]:
    out: list[tuple[Sequence[str], Mapping[str, str], float]] = []
    for tid, task in ledger.tasks.items():
        if task.allocations:
            pool = ledger.pool_of(tid)
            slots = sum(a.slots for a in task.allocations)
            out.append(((ledger.master, pool), task.labels, slots * prices.get(pool, 0.0)))
    return out


def _refused(
    ledger: DetLedger, plans: Iterable[DetPlan], gate: Gate, prices: Mapping[str, float]
) -> list[TaskPending]:
    out = []
    for plan in plans:
        for start in plan.starts:
            task = ledger.tasks[start.task_id]
            rate = sum(a.slots for a in start.allocations) * prices.get(start.pool, 0.0)
            why = gate.admit((ledger.master, start.pool), task.labels, rate)
            if why is not None:
                out.append(
                    TaskPending(
                        task_id=task.task_id,
                        code="over_budget",
                        reason=why.reason,
                        budget=why.budget,
                    )
                )
    return out


def _with_held(
    plans: tuple[DetPlan, ...], ledger: DetLedger, held: Mapping[str, TaskPending]
) -> tuple[DetPlan, ...]:
    if not held:
        return plans
    out = []
    for plan in plans:
        mine = tuple(p for tid, p in held.items() if ledger.home.get(tid) == plan.pool)
        out.append(plan.model_copy(update={"pending": (*plan.pending, *mine)}) if mine else plan)
    return tuple(out)


def slot_prices(
    pools: ResolvedPools, limits: Mapping[str, Mapping[str, Any]], catalog: Catalog
) -> dict[str, float]:
    """USD per hour of one slot of each resource pool with a provider: the provider's instance
    type in the catalog (its spot price when the provider asks for spot) over its slots."""
    out: dict[str, float] = {}
    for pool in pools.pools:
        provider = pool.provider or {}
        instance = provider.get("instance_type")
        if isinstance(instance, Mapping):
            instance = instance.get("machine_type")
        cloud = str(provider.get("type") or "")
        found = catalog.instance_type(cloud, str(instance)) if instance else ()
        slots = limits.get(pool.pool_name, {}).get("slots_per_agent") or 0
        if not found or not slots:
            out[pool.pool_name] = 0.0
            continue
        spot = found[0].spot_price_usd_per_hour
        price = spot if provider.get("spot") and spot is not None else found[0].price_usd_per_hour
        out[pool.pool_name] = price / float(slots)
    return out
