"""A Determined priority pass over a queue that cannot move, kept between passes.

A pool whose agents are all taken (and can take no more) leaves its whole queue waiting,
pass after pass, while trials keep arriving at its end. Each such pass walked the queue of
hundreds twice to tell every task what it was told the pass before. So the answer of a pass
that started and released nothing, over one priority level of slot tasks all told
``pool_full``, is kept per pool with the snapshot it read; the next pass over a snapshot that
differs from it only by new waiting tasks at the end of that queue (submitted later, at the
same level, of the sizes and avoided agents already waiting) is that answer with the
newcomers told what the others of their size were. Why that is the full pass's answer:

- The tasks it kept are the very same objects (picked out at C speed, in the same order),
  and the agents, the scheduler and the provider's limits are equal: the books, what fits
  and who could be preempted are those of the kept pass.
- The full pass takes the queue in submission order: the kept tasks come first and are
  decided as before (nothing started or was released, so the books never changed).
- A newcomer's size and avoided agents did not fit (an earlier task of that key was
  unfit), and with preemption on, no room could be made for that key in this level, so the
  full pass does not try again: it is told ``pool_full`` with its size's text, which reads
  the unchanged books.

Anything else (a task started, finished or moved, an agent came or went, another level, a
size not seen) runs the full pass, which is kept in turn when it qualifies.
``tests/unit/test_det_kept.py`` checks the kept answers against full passes over queues that
grow and change.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, eq, is_, not_
from typing import Any

from .det_pool_state import FitKey, PoolPass, new_pass
from .model import DetPoolSnapshot, DetTask, TaskPending

_SUBMISSION_ORDER = attrgetter("submitted_at", "task_id")  # a task's place in its queue
_FIT_KEY = attrgetter("slots", "blocked_agents")
_PRIORITY = attrgetter("priority")
_CODE = attrgetter("code")
_KEPT_POOLS_MAX = 64


@dataclass
class _Kept:
    """One pool's last pass that started nothing, over one level of slot tasks all full."""

    pool: DetPoolSnapshot  # the snapshot it read (keeping its tasks alive: ``ids`` hold)
    ids: set[int]  # id() of its tasks
    same: tuple[Any, ...]  # what else of the snapshot the pass reads (:func:`_same_of`)
    last: tuple[float, str]  # the latest submission order among its waiting tasks
    keys: set[FitKey]  # the sizes and avoided agents of its waiting tasks
    level: int  # their priority level
    pending: dict[str, TaskPending]  # what each was told


_KEPT: dict[str, _Kept] = {}


def _same_of(pool: DetPoolSnapshot) -> tuple[Any, ...]:
    return (
        pool.scheduler,
        pool.agents,
        pool.slots_per_agent,
        pool.max_agents,
        pool.max_aux_containers_per_agent,
        pool.min_agents,
        pool.max_idle_agent_s,
    )


def extended(pool: DetPoolSnapshot) -> PoolPass | None:
    """The pass over ``pool`` from the one kept for it (see the module docstring); None when
    it does not extend that one (then the full pass must run)."""
    kept = _KEPT.get(pool.pool)
    if kept is None or pool.scheduler.type != "priority":
        return None
    tasks, before = pool.tasks, kept.pool.tasks
    old = list(map(kept.ids.__contains__, map(id, tasks)))
    if old.count(True) != len(before) or not all(map(is_, compress(tasks, old), before)):
        return None  # a task left or changed (a changed one is another object)
    if _same_of(pool) != kept.same:
        return None
    new = list(compress(tasks, map(not_, old)))
    default = pool.scheduler.default_priority
    for task in new:
        if task.allocations or task.stopping or _FIT_KEY(task) not in kept.keys:
            return None
        if (default if task.priority is None else task.priority) != kept.level:
            return None
        if _SUBMISSION_ORDER(task) <= kept.last:
            return None
    new.sort(key=_SUBMISSION_ORDER)
    state = new_pass(pool)
    state.pending = dict(kept.pending)
    for task in new:
        state.wait(task, "pool_full", state.full_reason(task))
    _KEPT[pool.pool] = _Kept(
        pool,
        kept.ids.union(map(id, new)),
        kept.same,
        _SUBMISSION_ORDER(new[-1]) if new else kept.last,
        kept.keys,
        kept.level,
        dict(state.pending),
    )
    return state


def keep(pool: DetPoolSnapshot, state: PoolPass, waiting: list[DetTask], plain: bool) -> None:
    """After a full priority pass over ``pool``: keep it when it qualifies (see the module
    docstring), else forget what was kept for the pool. ``waiting``: its waiting tasks in
    submission order; ``plain``: all of them slot tasks that may fit one day."""
    name = pool.pool
    levels = set(map(_PRIORITY, waiting))
    if (
        not plain
        or not waiting
        or state.starts
        or state.releases
        or len(levels) != 1
        or len(state.pending) != len(waiting)
        or not all(map(eq, map(_CODE, state.pending.values()), repeat("pool_full")))
    ):
        _KEPT.pop(name, None)
        return
    [level] = levels
    if name not in _KEPT and len(_KEPT) >= _KEPT_POOLS_MAX:
        _KEPT.clear()
    _KEPT[name] = _Kept(
        pool,
        set(map(id, pool.tasks)),
        _same_of(pool),
        _SUBMISSION_ORDER(waiting[-1]),
        set(map(_FIT_KEY, waiting)),
        pool.scheduler.default_priority if level is None else level,
        dict(state.pending),
    )
