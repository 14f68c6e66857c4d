"""Determined's fair share: a pool's slots split among groups (jobs) by weighted max-min.

Shares: each group with demand (the slots of its running and waiting tasks) gets an equal
share of the pool's slots per unit of weight, capped by its demand; what a capped group does
not need is split the same way among the others, until every group is capped or the slots
are used up. Shares are exact fractions, rounded down to whole slots; the slots the rounding
leaves go one at a time to the groups with the largest fractional part (ties: the older
group), never above a group's demand. Example, 8 slots, demands A 6, B 1, C 4, weights 1:
an equal third (8/3) caps B at 1; A and C split the other 7, 3.5 each; rounded 3 and 3, the
last slot to A (older): A 4, B 1, C 3.

A pass then:

1. starts tasks of the groups furthest below their share first (slots held / weight), each
   group's tasks in submission order, while the group stays within its share;
2. gives slots still free to any group whose next task fits (no slot left idle);
3. for groups below their share with tasks still waiting, releases preemptible tasks of
   groups over their share, newest first, never taking such a group below its share, until
   the deficit is covered. Released slots are not started on in the same pass (the released
   tasks must stop first); the starved groups, ordered first, get them in the next pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from math import floor

from .det_pool_state import PoolPass
from .model import DetTask


def fair_shares(capacity: int, groups: Sequence[tuple[str, int, float]]) -> dict[str, int]:
    """Weighted max-min shares of ``capacity`` slots; ``groups`` are (name, demand, weight),
    oldest first (the order rounding ties are broken in)."""
    age = {name: i for i, (name, _, _) in enumerate(groups)}
    demand = {name: d for name, d, _ in groups}
    weight = {name: Fraction(w) for name, _, w in groups}
    exact: dict[str, Fraction] = {}
    remaining = Fraction(max(0, capacity))
    active = sorted((n for n in demand if demand[n] > 0), key=lambda n: demand[n] / weight[n])
    for i, name in enumerate(active):
        level = remaining / sum(weight[n] for n in active[i:])
        if demand[name] <= level * weight[name]:
            exact[name] = Fraction(demand[name])
            remaining -= demand[name]
            continue
        for rest in active[i:]:  # nobody left is capped: all get the same level
            exact[rest] = level * weight[rest]
        break
    shares = {name: floor(exact.get(name, 0)) for name in demand}
    leftover = min(capacity, sum(demand.values())) - sum(shares.values())
    by_fraction = sorted(
        (n for n in exact if shares[n] < demand[n]),
        key=lambda n: (-(exact[n] - shares[n]), age[n]),
    )
    for name in by_fraction[: max(0, leftover)]:
        shares[name] += 1
    return shares


@dataclass
class _Group:
    name: str
    weight: float
    age: float
    held: int = 0
    demand: int = 0
    waiting: list[DetTask] = field(default_factory=list)
    running: list[DetTask] = field(default_factory=list)


def _groups(state: PoolPass, tasks: Sequence[DetTask]) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}
    for task in [*state.running(), *tasks]:
        group = groups.get(task.group_id)
        if group is None:
            group = groups[task.group_id] = _Group(task.group_id, task.weight, task.submitted_at)
        group.age = min(group.age, task.submitted_at)
        group.demand += task.slots
        if task.is_running():
            group.held += task.slots
            group.running.append(task)
        else:
            group.waiting.append(task)
    for group in groups.values():
        group.waiting.sort(key=lambda t: (t.submitted_at, t.task_id))
    return groups


def run_fair_share(state: PoolPass, tasks: Sequence[DetTask]) -> None:
    """One fair-share pass over the pool's waiting slot tasks (see the module docstring)."""
    groups = _groups(state, tasks)
    oldest_first = sorted(groups.values(), key=lambda g: (g.age, g.name))
    capacity = sum(a.slots for a in state.pool.agents)
    shares = fair_shares(capacity, [(g.name, g.demand, g.weight) for g in oldest_first])

    def neediest() -> list[_Group]:
        return sorted(oldest_first, key=lambda g: (g.held / g.weight, g.age, g.name))

    for group in neediest():
        _start_in_order(state, group, shares[group.name], "within its fair share")
    for group in neediest():
        _start_in_order(state, group, None, "slots no group below its share could use")
    _release_over_share(state, groups, shares)
    for group in groups.values():
        for task in group.waiting:
            if task.task_id in state.pending:
                continue  # waiting for released slots: already said
            share = shares[group.name]
            if group.held + task.slots > share:
                state.wait(
                    task,
                    "over_fair_share",
                    f"group {group.name} holds {group.held} slot(s); its fair share is {share}",
                )
            else:
                state.wait(task, "pool_full", state.full_reason(task))


def _start_in_order(state: PoolPass, group: _Group, cap: int | None, why: str) -> None:
    while group.waiting:
        task = group.waiting[0]
        if cap is not None and group.held + task.slots > cap:
            return
        fit = state.fit_now(task)
        if fit is None:
            return  # a group's tasks start in submission order
        group.waiting.pop(0)
        group.held += task.slots
        state.start(task, fit, f"group {group.name}: {why} ({group.held} slot(s) held)")


def _release_over_share(state: PoolPass, groups: dict[str, _Group], shares: dict[str, int]) -> None:
    starved = [g for g in groups.values() if g.waiting and g.held < shares[g.name]]
    deficit = sum(min(shares[g.name] - g.held, sum(t.slots for t in g.waiting)) for g in starved)
    over = sorted(
        (g for g in groups.values() if g.held > shares[g.name]),
        key=lambda g: -(g.held - shares[g.name]) / g.weight,
    )
    for group in over:
        newest_first = sorted(
            (t for t in group.running if t.preemptible and t.task_id not in state.released),
            key=lambda t: (-(t.submitted_at if t.started_at is None else t.started_at), t.task_id),
        )
        for task in newest_first:
            if deficit <= 0:
                break
            if group.held - task.slots < shares[group.name]:
                continue  # would take the group below its own share
            group.held -= task.slots
            deficit -= task.slots
            beneficiary = starved[0].waiting[0]
            state.release(
                task,
                beneficiary,
                f"group {group.name} is over its fair share "
                f"({group.held + task.slots} > {shares[group.name]} slots) while "
                f"{', '.join(g.name for g in starved)} wait(s) below theirs",
            )
    if any(t.task_id in state.released for g in groups.values() for t in g.running):
        for group in starved:
            for task in group.waiting:
                state.wait(
                    task,
                    "waiting_for_preemption",
                    f"slots of over-share groups are being released for group {group.name}",
                )
