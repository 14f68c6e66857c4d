"""A request's job queue: ``corral exec ID task.yaml``, ``corral queue ID``, ``corral cancel``.

As SkyPilot's job queue on a cluster (``sky exec``, ``sky queue``, ``sky cancel``): every
job has a number on its request (job 1 is the launch's own ``run``; the ``exec``'d tasks
follow, 2, 3, ...), a state, and once it ended an exit code. A request's nodes run one job at
a time, first submitted first (each node's agent takes the next job only when the one before
it has ended there): a job waits (PENDING) behind what runs.

The queue is one document per request (its writes a compare-and-set on ``version``). A job
runs as one command per node (its ``execs``, in node order); each node's agent reports its
command's start and exit code, and :func:`observe` turns those reports into the job's state,
moved only along :data:`TRANSITIONS`. The launch's own run (job 1) is not stored: it is
:func:`launch_job`, read from the request.

Pure: the standard library and pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

MAX_JOBS = 1000  # jobs a request's queue keeps (the oldest ended ones go first)
MAX_WAITING = 100  # jobs of one request not ended at once: past it, a submission is refused
MAX_JOB_NAME = 200


class JobState(StrEnum):
    """Where a job is. Values are what ``corral queue`` and the API print (SkyPilot's)."""

    PENDING = "PENDING"  # submitted; waits for the jobs before it on the nodes
    RUNNING = "RUNNING"  # a node started it
    SUCCEEDED = "SUCCEEDED"  # every node's command exited 0
    FAILED = "FAILED"  # a node's command exited non-zero (the job's code: the first such)
    CANCELLED = "CANCELLED"  # cancelled by the user, or its request ended before it did


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset(
        {
            JobState.RUNNING,  # a node took it (the job before it ended there)
            # It ran and ended between two looks: its nodes' exit codes say how.
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,  # `corral cancel`, or the request ended before it ran
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,  # every node's command exited 0
            JobState.FAILED,  # one exited non-zero
            JobState.CANCELLED,  # `corral cancel` (its process groups killed), or the request ended
        }
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalJobMove(ValueError):
    """A move the table does not allow (a terminal job moved again)."""


class Job(BaseModel):
    """One job of a request's queue."""

    model_config = ConfigDict(extra="forbid")

    id: int
    name: str | None = None
    state: JobState = JobState.PENDING
    submitted_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    num_nodes: int = 1
    execs: list[str] = Field(default_factory=list)  # one command per node, node 0 first
    user: str | None = None
    reason: str | None = None  # why it was cancelled, or failed without an exit code

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at
        return None if end is None else max(0.0, end - self.started_at)


class JobQueue(BaseModel):
    """A request's exec'd jobs (job 1, the launch's run, is :func:`launch_job`)."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    version: int = 0
    jobs: list[Job] = Field(default_factory=list)
    next_id: int = 2
    launch: Job | None = None  # job 1 once `corral cancel` cancelled it (else read off the request)


def move(job: Job, to: JobState, now: float, *, exit_code: int | None = None,
         reason: str | None = None) -> Job:  # fmt: skip
    """``job`` moved to ``to`` (a copy); raises :class:`IllegalJobMove` off the table."""
    if to == job.state:
        return job
    if to not in TRANSITIONS[job.state]:
        raise IllegalJobMove(f"job {job.id}: {job.state} cannot become {to}")
    update: dict[str, object] = {"state": to}
    if to is JobState.RUNNING:
        update["started_at"] = job.started_at if job.started_at is not None else now
    if to in TERMINAL:
        update["ended_at"] = now
        update["exit_code"] = exit_code
        update["reason"] = reason
    return job.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What one node's agent said of its command for a job: taken (started) and when, ended
    and with which exit code (None: not yet), and why it could not run (an error)."""

    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    error: str | None = None


def observe(job: Job, reports: list[NodeReport | None], now: float) -> Job:
    """The job as its nodes' reports say (``None``: that node's command is gone, expired).
    Every node ended: SUCCEEDED if all exited 0, else FAILED with the first non-zero code (in
    node order); any node started: RUNNING. A terminal job stays as it is (a cancelled job's
    killed commands report their signal's code afterwards)."""
    if job.state in TERMINAL or not reports:
        return job
    started = [r.started_at for r in reports if r is not None and r.started_at is not None]
    if all(r is not None and r.exit_code is not None for r in reports):
        codes = [r.exit_code for r in reports if r is not None and r.exit_code is not None]
        ends = [r.ended_at for r in reports if r is not None and r.ended_at is not None]
        bad = next((c for c in codes if c != 0), None)
        errors = [r.error for r in reports if r is not None and r.error]
        out = job.model_copy(update={"started_at": min(started) if started else now})
        to = JobState.SUCCEEDED if bad is None else JobState.FAILED
        return move(out, to, max(ends) if ends else now, exit_code=bad or 0,
                    reason=errors[0] if errors else None)  # fmt: skip
    if started and job.state is JobState.PENDING:
        return move(job, JobState.RUNNING, min(started))
    return job


def request_ended(job: Job, now: float, request_state: str) -> Job:
    """A job its request outlived no longer: the request ended (or stopped) before the job
    did, so it never will. CANCELLED, saying why."""
    if job.state in TERMINAL:
        return job
    said = "before it ran" if job.state is JobState.PENDING else "while it ran"
    return move(job, JobState.CANCELLED, now, reason=f"the request became {request_state} {said}")


class CancelRefused(ValueError):
    """A job that cannot be cancelled (it ended already)."""


def cancel(job: Job, now: float, who: str | None) -> Job:
    """``job`` cancelled by ``who``; raises :class:`CancelRefused` once it has ended."""
    if job.state in TERMINAL:
        raise CancelRefused(f"job {job.id} has already ended ({job.state})")
    return move(job, JobState.CANCELLED, now, reason=f"cancelled by {who or 'the user'}")


class QueueFull(ValueError):
    """A request with :data:`MAX_WAITING` jobs not ended takes no more."""


def add(queue: JobQueue, job: Job) -> JobQueue:
    """``queue`` with ``job`` appended under the next number (``job.id`` is replaced); the
    oldest ended jobs are dropped past :data:`MAX_JOBS`. Raises :class:`QueueFull` when
    :data:`MAX_WAITING` jobs have not ended."""
    waiting = sum(1 for j in queue.jobs if j.state not in TERMINAL)
    if waiting >= MAX_WAITING:
        raise QueueFull(
            f"request {queue.request_id} has {waiting} jobs not ended, the most it may "
            "queue; wait for some, or cancel them (corral cancel ID JOB)"
        )
    numbered = job.model_copy(update={"id": queue.next_id})
    jobs = [*queue.jobs, numbered]
    while len(jobs) > MAX_JOBS:
        old = next((j for j in jobs if j.state in TERMINAL), None)
        if old is None:
            break
        jobs.remove(old)
    return queue.model_copy(update={"jobs": jobs, "next_id": queue.next_id + 1})


def launch_job(
    *,
    has_run: bool,
    request_state: str,
    created_at: float,
    started_at: float | None,
    ended_at: float | None,
    exit_code: int | None,
    name: str | None,
    num_nodes: int,
    cancelled: Job | None = None,
) -> Job | None:
    """Job 1, the launch's own ``run``, as its request says (None for a service: no run).
    ``cancelled``: job 1 as ``corral cancel`` recorded it (it stays CANCELLED)."""
    if not has_run:
        return None
    if cancelled is not None:
        return cancelled
    state = {
        "SUCCEEDED": JobState.SUCCEEDED,
        "FAILED": JobState.FAILED if exit_code is not None else JobState.CANCELLED,
        "RUNNING": JobState.RUNNING,
    }.get(request_state)
    if state is None:
        ended = request_state in ("CANCELLED", "TERMINATED", "PREEMPTED", "STOPPED")
        state = JobState.CANCELLED if ended else JobState.PENDING
    return Job(
        id=1,
        name=name,
        state=state,
        submitted_at=created_at,
        started_at=started_at,
        ended_at=ended_at if state in TERMINAL else None,
        exit_code=exit_code if state in (JobState.SUCCEEDED, JobState.FAILED) else None,
        num_nodes=num_nodes,
        reason=None if state is not JobState.CANCELLED else f"the request is {request_state}",
    )
