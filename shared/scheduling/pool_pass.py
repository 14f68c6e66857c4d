"""One Determined pool during a scheduling pass: what every scheduler type (:mod:`.determined`,
:mod:`.fair_share`) reads and books as it decides. Agents as they are now (``books``) and once
planned releases are done and promised slots taken (``future``). Pure: no clock, no I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from .fitting import AgentBook, agent_books, book_allocations, find_fit
from .model import (
    DetPendingCode,
    DetPoolSnapshot,
    DetTask,
    SlotAllocation,
    TaskPending,
    TaskRelease,
    TaskStart,
)


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

    @property
    def policy(self) -> str:
        return self.pool.scheduler.fitting_policy

    def priority(self, task: DetTask) -> int:
        """Determined's number for the task: its own, else the pool's default (lower wins)."""
        return task.priority if task.priority is not None else self.pool.scheduler.default_priority

    def running(self) -> list[DetTask]:
        """Tasks holding slots that are neither stopping nor released by this pass."""
        return [
            t
            for t in self.pool.tasks
            if t.is_running() and not t.stopping and t.task_id not in self.released
        ]

    def fit_now(self, task: DetTask) -> tuple[SlotAllocation, ...] | None:
        """Where the task could start now without taking slots promised to a preemptor."""
        view = {
            k: AgentBook(b.agent_id, b.slots, min(b.free, self.future[k].free), b.aux)
            for k, b in self.books.items()
        }
        return find_fit(view, task.slots, self.policy, self.pool.max_aux_containers_per_agent)

    def start(self, task: DetTask, allocations: tuple[SlotAllocation, ...], reason: str) -> None:
        book_allocations(self.books, task.task_id, allocations)
        book_allocations(self.future, task.task_id, allocations)
        self.pending.pop(task.task_id, None)
        self.starts.append(
            TaskStart(
                task_id=task.task_id, pool=self.pool.pool, allocations=allocations, reason=reason
            )
        )

    def wait(self, task: DetTask, code: DetPendingCode, reason: str) -> None:
        self.pending[task.task_id] = TaskPending(task_id=task.task_id, code=code, reason=reason)

    def release(self, victim: DetTask, preemptor: DetTask, reason: str) -> None:
        self.released.add(victim.task_id)
        self.releases.append(
            TaskRelease(task_id=victim.task_id, preempted_by=preemptor.task_id, reason=reason)
        )

    def full_reason(self, task: DetTask) -> str:
        free = sorted((b.free for b in self.books.values()), reverse=True)[:4]
        return f"no agent of {self.pool.pool} has {task.slots} free slot(s) (most free: {free})"


def new_pass(pool: DetPoolSnapshot) -> PoolPass:
    """Agents with every running task's slots taken; in ``future``, the slots of tasks already
    stopping (released by an earlier pass) are free."""
    books = agent_books(pool.agents)
    for task in pool.tasks:
        book_allocations(books, task.task_id, task.allocations)
    future = copy.deepcopy(books)
    for task in pool.tasks:
        if task.stopping:
            book_allocations(future, task.task_id, task.allocations, -1)
    return PoolPass(pool, books, future)
