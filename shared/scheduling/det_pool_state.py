"""One Determined pool during a scheduling pass: what every scheduler type (:mod:`.determined`,
:mod:`.fair_share`) reads and books as it decides. Agents as they are now (``books``) and once
planned releases are done and promised slots taken (``future``). Pure: no clock, no I/O.

A pass over a long queue asks where each waiting task would fit, most of them against books
that have not changed since the last task asked (a full pool says no to all of them): answers
are kept until something is booked (:meth:`PoolPass.book_future` and :meth:`PoolPass.start`),
so a pass costs the queue's length, not the queue times the agents.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from . import trusted
from .fitting import (
    AgentBook,
    FitVerdict,
    agent_books,
    book_allocations,
    can_ever_fit,
    find_fit,
)
from .model import (
    DetPendingCode,
    DetPoolSnapshot,
    DetTask,
    SlotAllocation,
    TaskPending,
    TaskRelease,
    TaskStart,
)

FitKey = tuple[int, tuple[str, ...]]  # a task's slots and the agents it must avoid


@dataclass
class PoolPass:
    """One pool during a pass: agents now (``books``) and once planned releases are done and
    promised slots taken (``future``)."""

    pool: DetPoolSnapshot
    books: dict[str, AgentBook]
    future: dict[str, AgentBook]
    starts: list[TaskStart] = field(default_factory=list)
    releases: list[TaskRelease] = field(default_factory=list)
    pending: dict[str, TaskPending] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    # Tasks holding slots as of the snapshot (neither stopping nor pending); and where a task
    # of so many slots would fit now / in ``future``, kept until the next booking.
    holding: list[DetTask] = field(default_factory=list)
    fits_now: dict[FitKey, tuple[SlotAllocation, ...] | None] = field(default_factory=dict)
    _fits_future: dict[FitKey, tuple[SlotAllocation, ...] | None] = field(default_factory=dict)
    _most_free: list[int] | None = None
    _full_reasons: dict[int, str] = field(default_factory=dict)  # slots -> full_reason's text
    _ever: dict[int, FitVerdict] = field(default_factory=dict)
    _ever_avoiding: dict[FitKey, bool] = field(default_factory=dict)
    _lowest_victim: tuple[int, float] | None = None
    _lowest_known: bool = False

    @property
    def policy(self) -> str:
        return self.pool.scheduler.fitting_policy

    def priority(self, task: DetTask) -> int:
        """Determined's number for the task: its own, else the pool's default (lower wins)."""
        return task.priority if task.priority is not None else self.pool.scheduler.default_priority

    def running(self) -> list[DetTask]:
        """Tasks holding slots that are neither stopping nor released by this pass."""
        return [t for t in self.holding if t.task_id not in self.released]

    def lowest_victim(self) -> tuple[int, float] | None:
        """The largest (priority number, submitted_at) of the running preemptible tasks: a
        task preempts only what is above its own (lower priority, or the same and submitted
        later), so a task at or above this has no victim. None: nothing is preemptible."""
        if not self._lowest_known:
            keys = [(self.priority(t), t.submitted_at) for t in self.running() if t.preemptible]
            self._lowest_victim = max(keys, default=None)
            self._lowest_known = True
        return self._lowest_victim

    def ever_fits(self, slots: int) -> FitVerdict:
        """Whether the pool could ever run a task of ``slots`` (:func:`.fitting.can_ever_fit`)."""
        if slots not in self._ever:
            self._ever[slots] = can_ever_fit(self.pool, slots)
        return self._ever[slots]

    def fits_empty(self, task: DetTask) -> bool:
        """Whether the task would fit on the pool's agents were they all empty, keeping off
        the agents it must avoid (Determined's blocked nodes)."""
        key = (task.slots, task.blocked_agents)
        if key not in self._ever_avoiding:
            empty = agent_books(self.pool.agents, self.pool.max_aux_containers_per_agent)
            fit = find_fit(empty, task.slots, self.policy, task.blocked_agents, self.heterogeneous)
            self._ever_avoiding[key] = fit is not None
        return self._ever_avoiding[key]

    def fit_now(self, task: DetTask) -> tuple[SlotAllocation, ...] | None:
        """Where the task could start now without taking slots (or auxiliary places)
        promised to a preemptor."""
        key = (task.slots, task.blocked_agents)
        if key in self.fits_now:
            return self.fits_now[key]
        view = {
            k: AgentBook(
                b.agent_id,
                b.slots,
                min(b.free, self.future[k].free),
                max(b.aux, self.future[k].aux),
                max_aux=b.max_aux,
            )
            for k, b in self.books.items()
        }
        fit = find_fit(view, task.slots, self.policy, task.blocked_agents, self.heterogeneous)
        self.fits_now[key] = fit
        return fit

    def fit_future(self, task: DetTask) -> tuple[SlotAllocation, ...] | None:
        """Where the task would fit once planned releases are done and promised slots taken."""
        key = (task.slots, task.blocked_agents)
        if key not in self._fits_future:
            self._fits_future[key] = find_fit(
                self.future, task.slots, self.policy, task.blocked_agents, self.heterogeneous
            )
        return self._fits_future[key]

    @property
    def heterogeneous(self) -> bool:
        return self.pool.scheduler.allow_heterogeneous_fits

    def book_future(
        self, task_id: str, allocations: Iterable[SlotAllocation], sign: int = 1
    ) -> None:
        """Take (``sign=1``) or give back (``-1``) slots in ``future`` only."""
        book_allocations(self.future, task_id, allocations, sign)
        self._booked()

    def _booked(self) -> None:
        self.fits_now.clear()
        self._fits_future.clear()
        self._most_free = None
        self._full_reasons.clear()

    def start(self, task: DetTask, allocations: tuple[SlotAllocation, ...], reason: str) -> None:
        book_allocations(self.books, task.task_id, allocations)
        book_allocations(self.future, task.task_id, allocations)
        self._booked()
        self.pending.pop(task.task_id, None)
        self.starts.append(
            TaskStart(
                task_id=task.task_id, pool=self.pool.pool, allocations=allocations, reason=reason
            )
        )

    def wait(self, task: DetTask, code: DetPendingCode, reason: str) -> None:
        self.pending[task.task_id] = told(task.task_id, code, reason)

    def release(self, victim: DetTask, preemptor: DetTask | str, reason: str) -> None:
        """Release ``victim`` for ``preemptor`` (a task, or what else takes its slots back,
        such as its group's max_slots)."""
        self.released.add(victim.task_id)
        self._lowest_known = False
        by = preemptor if isinstance(preemptor, str) else preemptor.task_id
        self.releases.append(TaskRelease(task_id=victim.task_id, preempted_by=by, reason=reason))

    def full_reason(self, task: DetTask) -> str:
        """Why a task of its size waits in a full pool (the same text for every task of that
        size until the next booking: a long queue asks it of each of its tasks)."""
        said = self._full_reasons.get(task.slots)
        if said is not None:
            return said
        if self._most_free is None:
            self._most_free = sorted((b.free for b in self.books.values()), reverse=True)[:4]
        free = self._most_free
        said = f"no agent of {self.pool.pool} has {task.slots} free slot(s) (most free: {free})"
        self._full_reasons[task.slots] = said
        return said


def new_pass(pool: DetPoolSnapshot) -> PoolPass:
    """Agents with every running task's slots taken; in ``future``, the slots of tasks already
    stopping (released by an earlier pass) are free."""
    books = agent_books(pool.agents, pool.max_aux_containers_per_agent)
    # Only the tasks holding slots are booked: picked out of a long waiting queue at C speed.
    held = list(filter(HOLDS_SLOTS, pool.tasks))
    for task in held:
        book_allocations(books, task.task_id, task.allocations)
    future = {
        k: AgentBook(b.agent_id, b.slots, b.free, b.aux, list(b.tasks), b.max_aux)
        for k, b in books.items()
    }
    for task in held:
        if task.stopping:
            book_allocations(future, task.task_id, task.allocations, -1)
    holding = [t for t in held if not t.stopping]
    return PoolPass(pool, books, future, holding=holding)


# A task's slots held, true when it holds any (``DetTask.is_running``): read at C speed, to
# pick the few running tasks out of a long waiting queue with ``filter``.
HOLDS_SLOTS = attrgetter("allocations")


def told(task_id: str, code: DetPendingCode, reason: str) -> TaskPending:
    """``trusted.task_pending(task_id, code, reason)``, the last two answers per task given
    again while equal (:func:`.trusted.kept_or_made`)."""
    return trusted.kept_or_made(
        _TOLD, task_id, (code, reason), trusted.task_pending, task_id, code, reason
    )


_TOLD: dict[str, list[tuple[Any, TaskPending]]] = {}
