"""A Determined master's run-time state, one versioned document, and the pure steps that
change it: every pool's agents and tasks, committed with a compare-and-set like the machine
pools' ledger (:mod:`.ledger`).

A pass reads the ledger, builds one :class:`~.model.DetPoolSnapshot` per pool
(:func:`snapshots_of`), runs :func:`~.determined.schedule_pools`, and commits the plans
(:func:`commit_det`). Pools with a provider grow by themselves: :func:`grow` adds agents to
launch for tasks the pool leaves waiting for room, up to the provider's ``max_instances``, and
keeps ``min_instances`` agents up even without work, as Determined does; idle agents past
``max_idle_agent_period`` are reaped (never below ``min_instances``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from operator import attrgetter
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ..budgets import BudgetSpend
from ..lifecycle import AgentStatus
from ..resource_pools import ResolvedPools
from .build import det_scheduler
from .det_pool_state import HOLDS_SLOTS
from .fitting import can_ever_fit
from .model import (
    Agent,
    DetPlan,
    DetPoolSnapshot,
    DetTask,
    SlotAllocation,
    TaskPending,
)
from .notes import file_answers
from .pooled import PooledMachine

NewAgentId = Callable[[str, int], str]  # (pool, index) -> a fresh id


class DetAgent(PooledMachine):
    """One agent (machine) of one pool."""

    KIND: ClassVar[str] = "agent"

    agent_id: str
    pool: str
    slots: int = Field(ge=0)
    status: AgentStatus = AgentStatus.LAUNCHING

    @property
    def key(self) -> str:
        return self.agent_id


class DetLedger(BaseModel):
    """Every pool of one master config at run time."""

    master: str
    version: int = 0
    agents: dict[str, DetAgent] = Field(default_factory=dict)
    tasks: dict[str, DetTask] = Field(default_factory=dict)
    home: dict[str, str] = Field(default_factory=dict)  # task -> the pool it was sent to
    running_in: dict[str, str] = Field(default_factory=dict)  # task -> the pool it started in
    notes: dict[str, TaskPending] = Field(default_factory=dict)
    started_by: dict[str, str] = Field(default_factory=dict)  # task -> why it started there
    preempted_by: dict[str, str] = Field(default_factory=dict)
    budget_spend: dict[str, BudgetSpend] = Field(default_factory=dict)  # budget name -> spend
    # pool -> why its last agent launch failed (cleared when one of its agents comes up)
    launch_failures: dict[str, str] = Field(default_factory=dict)
    # pool -> why the last pass launched no agent there: every place its provider launches in
    # is blocked (:func:`corral.shared.machine_walk.launch_blocked`), until the first ends
    launch_blocked: dict[str, str] = Field(default_factory=dict)

    def pool_of(self, task_id: str) -> str:
        return self.running_in.get(task_id) or self.home[task_id]


_TASK_ID = attrgetter("task_id")


def _market_class(market: str | None) -> str:
    return market if market in ("reserved", "spot") else "on_demand"


def snapshots_of(
    ledger: DetLedger,
    pools: ResolvedPools,
    limits: Mapping[str, Mapping[str, Any]],
    markets: Mapping[str, str] | None = None,
) -> list[DetPoolSnapshot]:
    """One snapshot per pool. ``limits``: per pool, ``det_limits`` of its provider;
    ``markets``: the market of each agent that is up, as its row of the machine table holds
    it (an agent not in it counts as on demand, as one not yet up)."""
    markets = markets or {}
    held = list(filter(HOLDS_SLOTS, ledger.tasks.values()))  # at C speed: most tasks wait
    busy = {a.agent_id for t in held for a in t.allocations}
    # Each task in its pool, in the ledger's order (one walk over a long queue, not one a pool;
    # none when every task's pool is one and the same, as in a master of one pool).
    by_pool: dict[str, list[DetTask]] = {}
    running_in, home = ledger.running_in, ledger.home
    homes = set(home.values())  # at C speed
    if len(homes) == 1 and homes.issuperset(running_in.values()):
        by_pool[homes.pop()] = list(ledger.tasks.values())
    else:
        for tid, t in ledger.tasks.items():
            by_pool.setdefault(running_in.get(tid) or home[tid], []).append(t)
    out = []
    for pool in pools.pools:
        name = pool.pool_name
        agents = tuple(
            Agent(
                agent_id=a.agent_id,
                slots=a.slots,
                market=_market_class(markets.get(a.agent_id)),
                idle_since=None if a.agent_id in busy else (a.idle_since or a.created_at),
            )
            for a in ledger.agents.values()
            if a.pool == name and a.status != "reaping"
        )
        tasks = tuple(by_pool.get(name, ()))
        out.append(
            DetPoolSnapshot(
                pool=name,
                versions={ledger.master: ledger.version},
                scheduler=det_scheduler(pool.scheduler),
                agents=agents,
                tasks=tasks,
                **dict(limits.get(name, {})),
            )
        )
    return out


def grow(
    ledger: DetLedger,
    snapshots: Sequence[DetPoolSnapshot],
    plans: Sequence[DetPlan],
    now: float,
    new_agent_id: NewAgentId,
    blocked: Collection[str] = (),
) -> list[str]:
    """Add agents to launch for tasks left waiting for room, up to each provider's
    ``max_instances``: in the task's own pool, else in the first of its fallback pools that
    can still grow and could ever fit it; and up to ``min_instances`` with no task asking.
    A pool in ``blocked`` (every place its agents launch in is blocked now) grows by none: an
    agent there would only fail its launch, and its tasks' fallback pools are tried instead.
    Returns the new agents' ids."""
    by_pool = {s.pool: s for s in snapshots}
    count = {name: 0 for name in by_pool}
    spare = {name: 0 for name in by_pool}  # slots of agents already on their way
    taken: dict[str, int] = {}
    for held in filter(HOLDS_SLOTS, ledger.tasks.values()):  # at C speed: most tasks wait
        for allocation in held.allocations:
            taken[allocation.agent_id] = taken.get(allocation.agent_id, 0) + allocation.slots
    for agent in ledger.agents.values():
        if agent.pool in count:
            count[agent.pool] += 1
            if agent.status == "launching":  # its slots no task holds yet are on their way
                spare[agent.pool] += max(0, agent.slots - taken.get(agent.agent_id, 0))
    added: list[str] = []
    growable: dict[tuple[str, int], bool] = {}  # (pool, slots): asked once per pass
    # Pools that may still grow or have room on its way: a pool at its size with nothing on
    # its way stays so all this pass (agents are only added), as does a static pool, so a
    # task none of whose pools is among these is passed over at once (most of a long queue).
    open_pools = {
        name
        for name, snap in by_pool.items()
        if snap.max_agents is not None and (count[name] < snap.max_agents or spare[name] > 0)
    }
    waiting = [
        p
        for plan in (plans if open_pools else ())  # none open: no task can grow one
        for p in plan.pending
        # Each waits for slots no agent has free: a fair-share task left over its share is
        # one no free slot fits (free slots go to any group once shares are served).
        if p.code in ("pool_full", "behind_higher_priority", "over_fair_share")
    ]
    for pending in waiting:
        task = ledger.tasks.get(pending.task_id)
        if task is None:
            continue
        pools_of_task = (ledger.home.get(task.task_id, ""), *task.fallback_pools)
        if open_pools.isdisjoint(pools_of_task):
            continue
        for name in pools_of_task:
            snapshot = by_pool.get(name)
            if snapshot is None:
                continue
            if (
                snapshot.max_agents is not None
                and count[name] >= snapshot.max_agents
                and spare[name] <= 0
            ):
                continue  # at its size with nothing on its way: no task of a long queue grows it
            key = (name, task.slots)
            if key not in growable:
                growable[key] = _can_grow_for(snapshot, task.slots)
            if not growable[key]:
                continue
            need = _agents_needed(snapshot, task.slots, spare[name], count[name])
            assert snapshot.max_agents is not None
            if need == 0 and task.slots > 0:
                spare[name] -= task.slots  # room already on its way here
                break
            if need == 0 or count[name] + need > snapshot.max_agents or name in blocked:
                continue
            for _ in range(need):
                agent_id = new_agent_id(name, len(added))
                per_agent = snapshot.slots_per_agent or 0
                ledger.agents[agent_id] = DetAgent(
                    agent_id=agent_id, pool=name, slots=per_agent, created_at=now
                )
                added.append(agent_id)
                count[name] += 1
                spare[name] += per_agent
            spare[name] = max(0, spare[name] - task.slots)
            break
    for name, snapshot in by_pool.items():  # min_instances: Determined keeps that many up
        if snapshot.max_agents is None or name in blocked:
            continue  # a static pool: its agents are started by hand
        while count[name] < min(snapshot.min_agents, snapshot.max_agents):
            agent_id = new_agent_id(name, len(added))
            ledger.agents[agent_id] = DetAgent(
                agent_id=agent_id, pool=name, slots=snapshot.slots_per_agent or 0, created_at=now
            )
            added.append(agent_id)
            count[name] += 1
    return added


def _can_grow_for(snapshot: DetPoolSnapshot, slots: int) -> bool:
    """A pool with a provider that could ever run a task of ``slots``."""
    if snapshot.max_agents is None:
        return False  # a static pool: its agents are what there is
    if slots == 0:
        return snapshot.max_agents > 0  # any agent runs an auxiliary task
    return snapshot.slots_per_agent is not None and can_ever_fit(snapshot, slots).ok


def _agents_needed(snapshot: DetPoolSnapshot, slots: int, spare: int, count: int) -> int:
    per_agent = snapshot.slots_per_agent or 0
    if slots == 0:
        return 0 if count else 1  # an auxiliary task needs some agent, no slot
    if slots <= spare or per_agent <= 0:
        return 0
    return math.ceil((slots - spare) / per_agent)


def copy_det_ledger(ledger: DetLedger) -> DetLedger:
    """An independent copy at a fraction of a deep copy's cost: containers and (mutable)
    agents copied; tasks and notes are frozen models and are shared."""
    return ledger.model_copy(
        update={
            "agents": {k: a.model_copy() for k, a in ledger.agents.items()},
            "tasks": dict(ledger.tasks),
            "home": dict(ledger.home),
            "running_in": dict(ledger.running_in),
            "notes": dict(ledger.notes),
            "started_by": dict(ledger.started_by),
            "preempted_by": dict(ledger.preempted_by),
            "budget_spend": {k: s.model_copy() for k, s in ledger.budget_spend.items()},
            "launch_blocked": dict(ledger.launch_blocked),
        }
    )


def commit_det(ledger: DetLedger, plans: Sequence[DetPlan], now: float) -> DetLedger:
    """The ledger once the plans are committed at ``now`` (the store bumps the version)."""
    out = copy_det_ledger(ledger)
    for plan in plans:
        for start in plan.starts:
            task = out.tasks.get(start.task_id)
            if task is None:
                continue
            out.tasks[start.task_id] = task.model_copy(
                update={"allocations": start.allocations, "started_at": now}
            )
            out.running_in[start.task_id] = start.pool
            out.started_by[start.task_id] = start.reason
            out.notes.pop(start.task_id, None)
        for rel in plan.releases:
            task = out.tasks.get(rel.task_id)
            if task is not None:
                out.tasks[rel.task_id] = task.model_copy(update={"stopping": True})
                out.preempted_by[rel.task_id] = rel.preempted_by
        file_answers(out.notes, plan.pending, _TASK_ID)
        for reap in plan.reaps:
            agent = out.agents.get(reap.agent_id)
            if agent is not None and agent.status == AgentStatus.UP:
                agent.move(AgentStatus.REAPING)
    return out


def add_task(ledger: DetLedger, task: DetTask, pool: str) -> bool:
    """Queue a task in ``pool``; False if it is already known."""
    if task.task_id in ledger.tasks:
        return False
    ledger.tasks[task.task_id] = task
    ledger.home[task.task_id] = pool
    return True


def release_task(ledger: DetLedger, task_id: str, now: float, *, finished: bool) -> bool:
    """A task gives its slots back: a preempted one waits again (keeping its place), a
    finished one leaves. Agents left without tasks turn idle at ``now``."""
    task = ledger.tasks.get(task_id)
    if task is None:
        return False
    agents = {a.agent_id for a in task.allocations}
    if finished:
        for table in (ledger.tasks, ledger.home, ledger.notes, ledger.started_by):
            table.pop(task_id, None)
        ledger.preempted_by.pop(task_id, None)
    else:
        ledger.tasks[task_id] = task.model_copy(
            update={"allocations": (), "stopping": False, "started_at": None}
        )
    ledger.running_in.pop(task_id, None)
    still = {a.agent_id for t in ledger.tasks.values() for a in t.allocations}
    for agent_id in agents - still:
        if agent_id in ledger.agents:
            ledger.agents[agent_id].idle_since = now
    return True


def agent_lost(ledger: DetLedger, agent_id: str, now: float) -> list[str]:
    """An agent is gone (failed to launch, or lost): its tasks wait again. Returns them."""
    ledger.agents.pop(agent_id, None)
    hit = [  # most tasks of a long queue hold nothing: passed over before a generator is made
        tid
        for tid, t in ledger.tasks.items()
        if t.allocations and any(a.agent_id == agent_id for a in t.allocations)
    ]
    for tid in hit:
        release_task(ledger, tid, now, finished=False)
    return hit


def allocations_on(ledger: DetLedger, agent_id: str) -> list[tuple[str, SlotAllocation]]:
    """The tasks with slots (or a zero-slot container) on an agent."""
    return [
        (tid, a) for tid, t in ledger.tasks.items() for a in t.allocations if a.agent_id == agent_id
    ]
