"""Idle reaping: which idle machines (or Determined agents) to terminate.

A machine idle longer than its limit (a machine type's ``recycle_policy.max_idle_duration``, a
Determined provider's ``max_idle_agent_period``) may go, longest idle first and reserved
machines last (a reservation is paid for whether used or not, and given back it may not come
back), never leaving fewer than a minimum number of machines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .model import AgentReap, DetPoolSnapshot, Reap
from .partitions import PoolState


@dataclass(frozen=True, slots=True)
class IdleUnit:
    """An idle machine or agent, as the reaper sees it."""

    unit_id: str
    group: str  # its machine type (or pool)
    market: str
    idle_since: float
    max_idle_s: float


def choose_reaps(
    idle: Iterable[IdleUnit], *, total: int, minimum: int, now: float
) -> list[IdleUnit]:
    """The idle units past their limit to terminate, reserved last, longest idle first, at
    most ``total - minimum`` of them."""
    expired = [u for u in idle if now - u.idle_since > u.max_idle_s]
    expired.sort(key=lambda u: (u.market == "reserved", u.idle_since, u.unit_id))
    return expired[: max(0, total - minimum)]


def plan_machine_reaps(state: PoolState, now: float, min_machines: int) -> list[Reap]:
    """Idle pool machines to terminate after this pass's placements; the idle machines that
    held room (reservations) will use are kept, and the pool keeps ``min_machines``."""
    units: list[IdleUnit] = []
    for machine_type in state.snapshot.machine_types:
        if machine_type.max_idle_s is None:
            continue
        for book in state.books_of_type.get(machine_type.machine_type, ()):
            keep = sum(book.reserved.values())
            # book.idle ends with the warmest machine: keep those for the held room.
            spare = book.idle[: max(0, len(book.idle) - keep)]
            units.extend(
                IdleUnit(
                    machine_id,
                    machine_type.machine_type,
                    machine_type.market,
                    since,
                    machine_type.max_idle_s,
                )
                for machine_id in spare
                if (since := state.machines[machine_id].idle_since) is not None
            )
    chosen = choose_reaps(units, total=len(state.snapshot.machines), minimum=min_machines, now=now)
    return [
        Reap(
            machine_id=u.unit_id,
            machine_type=u.group,
            reason=f"idle {now - u.idle_since:.0f} s, over its limit of {u.max_idle_s:.0f} s",
        )
        for u in chosen
    ]


def plan_agent_reaps(
    pool: DetPoolSnapshot, busy_agent_ids: Sequence[str], now: float
) -> list[AgentReap]:
    """Idle agents of a Determined pool to terminate, keeping the provider's ``min_instances``.
    ``busy_agent_ids``: agents with a task, running or just started by this pass."""
    if pool.max_idle_agent_s is None:
        return []
    busy = set(busy_agent_ids)
    units = [
        IdleUnit(a.agent_id, pool.pool, a.market, a.idle_since, pool.max_idle_agent_s)
        for a in pool.agents
        if a.agent_id not in busy and a.idle_since is not None
    ]
    chosen = choose_reaps(units, total=len(pool.agents), minimum=pool.min_agents, now=now)
    return [
        AgentReap(
            agent_id=u.unit_id,
            reason=f"idle {now - u.idle_since:.0f} s, over max_idle_agent_period "
            f"{u.max_idle_s:.0f} s",
        )
        for u in chosen
    ]
