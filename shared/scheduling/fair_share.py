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

A group's ``max_slots`` (Determined's ``resources.max_slots``) caps its demand, so its share,
and what step 2 gives it: a task that would take the group past it waits (``at_max_slots``),
and a task asking more than it can never start. A group holding more than its ``max_slots``
releases preemptible tasks, newest first, down to it, whether or not anyone waits. When
agents hold more slots of running tasks than they have (an agent came back smaller), groups
over their share release that excess as they would for a starved group.

A waiting task that would not fit even on empty agents, keeping off the agents it must avoid,
claims no share (it waits, ``pool_full``; a new agent may take it). Slots held by tasks that
are not preemptible are their group's whatever the shares say; the others share the rest.
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
    max_slots: int | None = None
    fixed: int = 0  # slots held by its tasks that are not preemptible
    waiting: list[DetTask] = field(default_factory=list)
    running: list[DetTask] = field(default_factory=list)


def _groups(state: PoolPass, tasks: Sequence[DetTask]) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}
    for task in [*state.running(), *tasks]:
        if task.blocked_agents and not task.is_running() and not state.fits_empty(task):
            state.wait(
                task,
                "pool_full",
                f"no agent of {state.pool.pool} it may use (it avoids "
                f"{', '.join(task.blocked_agents)}) has {task.slots} slot(s)",
            )
            continue  # it would claim a share it cannot use (Determined leaves it out too)
        group = groups.get(task.group_id)
        if group is None:
            group = groups[task.group_id] = _Group(task.group_id, task.weight, task.submitted_at)
        group.age = min(group.age, task.submitted_at)
        if task.max_slots is not None:
            group.max_slots = min(group.max_slots or task.max_slots, task.max_slots)
        group.demand += task.slots
        if task.is_running():
            group.held += task.slots
            group.fixed += 0 if task.preemptible else task.slots
            group.running.append(task)
        else:
            group.waiting.append(task)
    for group in groups.values():
        group.waiting.sort(key=lambda t: (t.submitted_at, t.task_id))
        if group.max_slots is not None:
            too_big = [t for t in group.waiting if t.slots > group.max_slots]
            for task in too_big:
                group.waiting.remove(task)
                group.demand -= task.slots
                state.wait(
                    task,
                    "can_never_fit",
                    f"it asks {task.slots} slot(s); its group {group.name} may hold at most "
                    f"{group.max_slots} (max_slots)",
                )
    return groups


def run_fair_share(state: PoolPass, tasks: Sequence[DetTask]) -> None:
    """One fair-share pass over the pool's waiting slot tasks (see the module docstring)."""
    groups = _groups(state, tasks)
    oldest_first = sorted(groups.values(), key=lambda g: (g.age, g.name))
    capacity = sum(a.slots for a in state.pool.agents)
    # Slots booked beyond what agents have (an agent came back smaller): to be released.
    excess = sum(max(0, -book.free) for book in state.future.values())
    shares = _shares(capacity, oldest_first)

    def neediest() -> list[_Group]:
        return sorted(oldest_first, key=lambda g: (g.held / g.weight, g.age, g.name))

    for group in neediest():
        _start_in_order(state, group, shares[group.name], "within its fair share")
    for group in neediest():
        _start_in_order(state, group, group.max_slots, "slots no group below its share could use")
    freed = _release_over_max_slots(state, groups)
    freed += _release_excess(state, groups, shares, excess - freed)
    _release_over_share(state, groups, shares, freed)
    for group in groups.values():
        for task in group.waiting:
            if task.task_id in state.pending:
                continue  # waiting for released slots: already said
            share = shares[group.name]
            if group.max_slots is not None and group.held + task.slots > group.max_slots:
                state.wait(
                    task,
                    "at_max_slots",
                    f"group {group.name} holds {group.held} slot(s); its max_slots is "
                    f"{group.max_slots}",
                )
            elif group.held and group.held + task.slots > share:
                state.wait(
                    task,
                    "over_fair_share",
                    f"group {group.name} holds {group.held} slot(s); its fair share is {share}",
                )
            else:
                state.wait(task, "pool_full", state.full_reason(task))


def _shares(capacity: int, oldest_first: Sequence[_Group]) -> dict[str, int]:
    """Fair shares of the groups' capped demands; a group whose share falls below the slots
    its non-preemptible tasks hold gets those, and the others share what is left."""
    pinned: dict[str, int] = {}
    while True:
        rest = [(g.name, _capped(g), g.weight) for g in oldest_first if g.name not in pinned]
        shares = fair_shares(capacity - sum(pinned.values()), rest)
        low = {g.name: g.fixed for g in oldest_first if shares.get(g.name, g.fixed) < g.fixed}
        if not low:
            return {**shares, **pinned}
        pinned.update(low)


def _capped(group: _Group) -> int:
    """The group's demand, at most its max_slots."""
    return group.demand if group.max_slots is None else min(group.demand, group.max_slots)


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


def _newest_first(state: PoolPass, group: _Group) -> list[DetTask]:
    """The group's running preemptible tasks not yet released, the newest first."""
    return sorted(
        (t for t in group.running if t.preemptible and t.task_id not in state.released),
        key=lambda t: (-(t.submitted_at if t.started_at is None else t.started_at), t.task_id),
    )


def _release_over_max_slots(state: PoolPass, groups: dict[str, _Group]) -> int:
    """Groups holding more than their max_slots release preemptible tasks, newest first, down
    to it (Determined releases in queue order, oldest first; see docs/SCHEDULING_PEERS.md).
    Returns the slots freed."""
    freed = 0
    for group in groups.values():
        cap = group.max_slots
        if cap is None or group.held <= cap:
            continue
        for task in _newest_first(state, group):
            if group.held <= cap:
                break
            group.held -= task.slots
            freed += task.slots
            state.release(
                task,
                f"max_slots of group {group.name}",
                f"group {group.name} holds {group.held + task.slots} slot(s), more than its "
                f"max_slots ({cap})",
            )
    return freed


def _release_excess(
    state: PoolPass, groups: dict[str, _Group], shares: dict[str, int], excess: int
) -> int:
    """Agents hold ``excess`` slots more than they have: groups over their share, the furthest
    over first, release preemptible tasks, newest first, until it is undone (a group stops
    releasing once within its share). Returns the slots freed."""
    freed = 0
    over = sorted(
        (g for g in groups.values() if g.held > shares[g.name]),
        key=lambda g: (-(g.held - shares[g.name]) / g.weight, g.age, g.name),
    )
    for group in over:
        for task in _newest_first(state, group):
            if freed >= excess or group.held <= shares[group.name]:
                break
            group.held -= task.slots
            freed += task.slots
            state.release(
                task,
                f"the capacity of {state.pool.pool}",
                f"its agents hold {excess} slot(s) more than they have, and group "
                f"{group.name} is over its fair share ({group.held + task.slots} > "
                f"{shares[group.name]} slots)",
            )
    return freed


def _release_over_share(
    state: PoolPass,
    groups: dict[str, _Group],
    shares: dict[str, int],
    freed: int = 0,
) -> None:
    """Release preemptible tasks of over-share groups for the starved ones (less the ``freed``
    slots already being released)."""
    starved = [g for g in groups.values() if g.waiting and g.held < shares[g.name]]
    deficit = sum(min(shares[g.name] - g.held, sum(t.slots for t in g.waiting)) for g in starved)
    deficit -= freed
    over = sorted(
        (g for g in groups.values() if g.held > shares[g.name]),
        key=lambda g: -(g.held - shares[g.name]) / g.weight,
    )
    for group in over:
        for task in _newest_first(state, group):
            if deficit <= 0:
                break
            if group.held - task.slots < shares[group.name]:
                continue  # would take the group below its own share
            group.held -= task.slots
            deficit -= task.slots
            state.release(
                task,
                starved[0].waiting[0],
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
