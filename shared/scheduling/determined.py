"""Determined resource pools: each pool schedules with its own algorithm, a pure pass from a
:class:`DetPoolSnapshot` to a :class:`DetPlan`.

- ``priority``: Determined's numbers, lower wins (1-99, default 42), then submission order,
  slot and zero-slot tasks apart (see :func:`_priority`). When a task of a level does not
  fit, lower levels start nothing (preemption off) or only preemptible tasks (preemption on);
  once a release is planned nothing lower starts in that pass. With ``preemption`` on, a task
  that does not fit first counts the room releases already planned will free (and not yet
  promised), then releases preemptible running tasks of its class from the lowest priority
  (99) up, newest first (at its own priority only tasks submitted after it), until it fits;
  a last pass keeps any it turns out not to need (Determined keeps them all: we stop no
  more work than the preemptor needs). Released room is promised to it.
- ``fair_share``: see :mod:`.fair_share`.
- ``round_robin``: groups (jobs) in order of their oldest task take turns, one task per group
  per round, each group's tasks in submission order, until no group can start another.

Every pool places with its ``fitting_policy`` (:mod:`.fitting`). Under fair share and round
robin, zero-slot tasks are placed first and apart (they hold no slot). A task the pool can
never fit is refused (``can_never_fit``), never left pending. :func:`schedule_pools` adds
the fallback pools: a task its pool leaves waiting may start in the first pool of its
``fallback_pools`` with room left.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import filterfalse
from operator import attrgetter

from . import det_kept
from .det_pool_state import HOLDS_SLOTS, PoolPass, new_pass
from .fair_share import run_fair_share
from .model import (
    DetPendingCode,
    DetPlan,
    DetPoolSnapshot,
    DetTask,
)
from .reaping import plan_agent_reaps

_SUBMISSION_ORDER = attrgetter("submitted_at", "task_id")  # a task's place in its queue
_SLOTS = attrgetter("slots")
_PRIORITY = attrgetter("priority")
_STOPPING = attrgetter("stopping")
_FALLBACK_POOLS = attrgetter("fallback_pools")


def schedule_pool(pool: DetPoolSnapshot, now: float) -> DetPlan:
    """One pass over one pool (no fallback pools)."""
    state = run_pass(pool)
    return _plan(state, now)


def run_pass(pool: DetPoolSnapshot, keep: bool = True) -> PoolPass:
    """The pool's own decisions, as a working state (``schedule_pools`` builds on it).
    ``keep``: a priority pass over a queue that cannot move is kept, and the next pass that
    only adds to its end extends it (:mod:`.det_kept`); off: always the full pass, keeping
    nothing (to check that keeping changes nothing)."""
    if keep:
        kept = det_kept.extended(pool)
        if kept is not None:
            return kept
    state = new_pass(pool)
    waiting = sorted(  # tasks holding nothing (is_running() false), in submission order
        filterfalse(_STOPPING, filterfalse(HOLDS_SLOTS, pool.tasks)),  # at C speed
        key=_SUBMISSION_ORDER,
    )
    slot_tasks: list[DetTask] = []
    aux_tasks: list[DetTask] = []
    sizes = set(map(_SLOTS, waiting))
    if 0 not in sizes and all(state.ever_fits(slots).ok for slots in sizes):
        slot_tasks = waiting  # the common case, a queue of slot tasks that may all fit one day
    else:
        for task in waiting:
            verdict = state.ever_fits(task.slots)
            if not verdict.ok:
                state.wait(task, "can_never_fit", verdict.reason)
            else:
                (slot_tasks if task.slots else aux_tasks).append(task)
    if pool.scheduler.type == "priority":
        # Determined schedules slot and zero-slot tasks apart, each by priority: a blocked
        # slot task holds back no zero-slot task, and the other way round.
        _priority(state, slot_tasks)
        _priority(state, aux_tasks)
        if keep:
            det_kept.keep(pool, state, waiting, not aux_tasks and slot_tasks is waiting)
        return state
    for task in aux_tasks:
        _place_aux(state, task)
    if pool.scheduler.type == "round_robin":
        _round_robin(state, slot_tasks)
    else:
        run_fair_share(state, slot_tasks)
    return state


def _place_aux(state: PoolPass, task: DetTask) -> None:
    fit = state.fit_now(task)
    if fit is None:
        state.wait(
            task,
            "pool_full",
            f"every agent of {state.pool.pool} runs as many auxiliary containers as it may "
            "(max_aux_containers_per_agent), or the pool has no agent",
        )
    else:
        state.start(task, fit, f"zero-slot task on {fit[0].agent_id}")


# --------------------------------------------------------------------------- priority
def _priority(state: PoolPass, tasks: Sequence[DetTask]) -> None:
    """Determined's priority pass over one class of tasks (slot or zero-slot), level by level
    (``agentrm/priority.go``):

    - At each priority level, from the highest (lowest number), every waiting task that fits
      is booked, in submission order; the ones that do not fit do not stop the rest of their
      level.
    - Booked tasks start unless a release was planned at a higher level (then nothing more
      starts this pass), or a higher level left a task waiting: then, with preemption off,
      nothing below it starts (it would starve); with preemption on, only preemptible tasks
      start (they can be taken back). A task held back keeps its booked room, so lower work
      cannot take it.
    - With preemption on, a task that does not fit first counts what planned releases free,
      then releases victims of its class (:func:`_make_room`).
    """
    preemption = state.pool.scheduler.preemption
    levels: dict[int, list[DetTask]] = {}
    default = state.pool.scheduler.default_priority  # state.priority, read at once
    priorities = set(map(_PRIORITY, tasks))
    if len(priorities) == 1:  # one level (a queue of alike trials): no walk to split it
        [own] = priorities
        levels[default if own is None else own] = list(tasks)
    else:
        for task in tasks:  # in submission order (run_pass sorts them): so is each level
            own = task.priority
            levels.setdefault(default if own is None else own, []).append(task)
    blocker: DetTask | None = None  # the first task a higher level left waiting
    releasing: DetTask | None = None  # the first task slots are being freed for
    fits = state.fits_now  # state.fit_now's answers so far (emptied by each booking)
    for level in sorted(levels):
        unfit: list[DetTask] = []
        for task in levels[level]:
            key = (task.slots, task.blocked_agents)
            fit = fits[key] if key in fits else state.fit_now(task)
            if fit is None:
                unfit.append(task)
                continue
            held = _held_back(state, task, blocker, releasing, preemption)
            if held is None:
                note = f", backfilling behind {blocker.task_id}" if blocker else ""
                state.start(task, fit, f"priority {level}{note}")
            else:
                state.book_future(task.task_id, fit)
                state.wait(task, "behind_higher_priority", held)
        # Tasks of a size (and agents to avoid) for which no room could be made: a later one
        # of the level can preempt no more than an earlier one (only what was submitted after
        # it, at its level), so it cannot either, until room is made for another.
        no_room: set[tuple[int, tuple[str, ...]]] = set()
        # What a task of a size is told (the blocker is the level's, the free slots the books'
        # now, which a promise of room does not change): made once per size, not per task.
        code: DetPendingCode = "pool_full" if blocker is None else "behind_higher_priority"
        told: dict[int, str] = {}
        for task in unfit:
            key = (task.slots, task.blocked_agents)
            if preemption and key not in no_room and _make_room(state, task):
                releasing = releasing or task
                no_room.clear()  # the books changed
                continue
            if preemption:
                no_room.add(key)
            reason = told.get(task.slots)
            if reason is None:
                reason = told[task.slots] = (
                    state.full_reason(task)
                    if blocker is None
                    else f"{blocker.task_id} (priority {state.priority(blocker)}) waits, and "
                    f"{state.full_reason(task)}"
                )
            state.wait(task, code, reason)
        if unfit:
            blocker = blocker or unfit[0]


def _held_back(
    state: PoolPass,
    task: DetTask,
    blocker: DetTask | None,
    releasing: DetTask | None,
    preemption: bool,
) -> str | None:
    """Why a task that fits must not start now (None: it may)."""
    if releasing is not None:
        return (
            f"slots are being freed for {releasing.task_id} (priority "
            f"{state.priority(releasing)}); nothing lower starts until they are"
        )
    if blocker is None or (preemption and task.preemptible):
        return None
    why = "only preemptible tasks backfill" if preemption else "lower priorities wait for it"
    return f"{blocker.task_id} (priority {state.priority(blocker)}) waits; {why}"


def _victims_for(state: PoolPass, task: DetTask) -> list[DetTask]:
    """Running preemptible tasks of its class (slot or zero-slot) below this one, lowest
    priority (99) first, newest first."""
    mine = state.priority(task)
    lowest = state.lowest_victim()
    if lowest is None or lowest <= (mine, task.submitted_at):
        return []  # nothing runs below it (most of a long queue, asked in turn)
    out = [
        v
        for v in state.running()
        if v.preemptible
        and (v.slots == 0) == (task.slots == 0)
        and (
            state.priority(v) > mine
            or (state.priority(v) == mine and v.submitted_at > task.submitted_at)
        )
    ]
    out.sort(
        key=lambda v: (
            -state.priority(v),
            -(v.started_at if v.started_at is not None else v.submitted_at),
            v.task_id,
        )
    )
    return out


def _make_room(state: PoolPass, task: DetTask) -> bool:
    """Promise the task room in ``future``, releasing victims as needed; False if it cannot."""
    chosen: list[DetTask] = []
    claim = state.fit_future(task)
    if claim is None:
        for victim in _victims_for(state, task):
            state.book_future(victim.task_id, victim.allocations, -1)
            chosen.append(victim)
            if state.fit_future(task) is not None:
                break
        else:
            for victim in chosen:  # even all of them would not do: undo
                state.book_future(victim.task_id, victim.allocations)
            return False
        for victim in reversed(chosen[:-1]):  # keep the ones it turns out not to need
            state.book_future(victim.task_id, victim.allocations)
            if state.fit_future(task) is None:
                state.book_future(victim.task_id, victim.allocations, -1)
            else:
                chosen.remove(victim)
        claim = state.fit_future(task)
    assert claim is not None
    state.book_future(task.task_id, claim)
    for victim in chosen:
        state.release(
            victim,
            task,
            f"preempted for {task.task_id} (priority "
            f"{state.priority(task)} beats {state.priority(victim)})",
        )
    names = ", ".join(v.task_id for v in chosen) or "tasks already being released"
    state.wait(task, "waiting_for_preemption", f"slots promised to it while {names} stop(s)")
    return True


# --------------------------------------------------------------------------- round robin
def _round_robin(state: PoolPass, tasks: Sequence[DetTask]) -> None:
    queues: dict[str, list[DetTask]] = {}
    for task in sorted(tasks, key=lambda t: (t.submitted_at, t.task_id)):
        queues.setdefault(task.group_id, []).append(task)
    blocked: set[str] = set()
    round_number = 0
    progress = True
    while progress:
        progress = False
        round_number += 1
        for group, queue in queues.items():
            if not queue or group in blocked:
                continue
            task = queue[0]
            fit = state.fit_now(task)
            if fit is None:
                blocked.add(group)  # a group's tasks start in order: it waits for its head
                continue
            queue.pop(0)
            state.start(task, fit, f"round {round_number}, group {group}")
            progress = True
    for group, queue in queues.items():
        for i, task in enumerate(queue):
            why = state.full_reason(task) if i == 0 else f"behind {queue[0].task_id} of {group}"
            state.wait(task, "pool_full", why)


# --------------------------------------------------------------------------- many pools
def schedule_pools(pools: Sequence[DetPoolSnapshot], now: float) -> tuple[DetPlan, ...]:
    """Each pool's own pass, then fallbacks: a waiting task (not one slots are being freed
    for, nor one its group's ``max_slots`` holds back) starts in the first pool of its
    ``fallback_pools`` that can fit it with what that pool has left. Its start is in that
    pool's plan, whose ``based_on`` then also carries the versions of the task's own pool (the
    committer must compare both)."""
    states = {p.pool: run_pass(p) for p in pools}
    based_on = {p.pool: dict(p.versions) for p in pools}
    for state in states.values():
        # Only a task with fallback pools can move (picked out at C speed: most have none).
        for task in filter(_FALLBACK_POOLS, state.pool.tasks):
            waiting = state.pending.get(task.task_id)
            if waiting is None or waiting.code in ("waiting_for_preemption", "at_max_slots"):
                continue  # room is coming; or its job's max_slots holds it wherever it goes
            if task.max_slots is not None and task.slots > task.max_slots:
                continue
            for name in task.fallback_pools:
                target = states.get(name)
                if target is None or name == state.pool.pool:
                    continue
                if not target.ever_fits(task.slots).ok:
                    continue
                fit = target.fit_now(task)
                if fit is not None:
                    del state.pending[task.task_id]
                    target.start(
                        task,
                        fit,
                        f"moved from {state.pool.pool} ({waiting.code}) "
                        f"to its fallback pool {name}",
                    )
                    based_on[name].update(state.pool.versions)
                    break
    return tuple(_plan(states[p.pool], now, based_on[p.pool]) for p in pools)


def _plan(state: PoolPass, now: float, based_on: dict[str, int] | None = None) -> DetPlan:
    busy = [a.agent_id for t in filter(HOLDS_SLOTS, state.pool.tasks) for a in t.allocations]
    busy += [a.agent_id for s in state.starts for a in s.allocations]
    return DetPlan(
        pool=state.pool.pool,
        based_on=dict(state.pool.versions) if based_on is None else based_on,
        computed_at=now,
        starts=tuple(state.starts),
        releases=tuple(state.releases),
        pending=tuple(state.pending.values()),
        reaps=tuple(plan_agent_reaps(state.pool, busy, now)),
    )
