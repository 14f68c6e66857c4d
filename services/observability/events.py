"""Event metrics: counters and histograms of what happens, recorded where it is written.

The store calls :func:`request_created`, :func:`request_written` and :func:`instance_written`
after each successful write (a create, or a compare-and-set that won). A change is written
exactly once however often a task is delivered or a writer retries, so counting at the write
counts each attempt, each request getting capacity, each instance coming up, once.

These live in the process that wrote: workers (multiprocess mode under prefork, see
:mod:`.exposition`) and the API. Prometheus sums them over targets. Gauges of *state* (how many
requests are RUNNING) are not here: they are computed from Redis at scrape time
(:mod:`.state_metrics`), which stays right across any number of processes.

Only the standard library, prometheus_client and the core's record types are imported: the
store imports this module.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

from corral.shared.lifecycle import (
    TERMINAL_INSTANCE_STATES,
    TERMINAL_REQUEST_STATES,
    InstanceState,
    RequestState,
)
from corral.shared.records import Instance, LaunchRequest

# No `_created` series beside each counter and histogram: multiprocess mode has none either,
# and a scrape of the API and of a worker should read alike.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Seconds from a second to an hour: a local launch is up in well under a second, a cloud GPU
# after minutes, a pool workload may wait an hour for room.
_WAIT_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
# Chain positions: 0 is the first choice. A chain runs one candidate per zone and type.
# A chain walked to its end: the request fails, or waits for capacity (retry until up).
_EXHAUSTED = frozenset(
    {
        (RequestState.PROVISIONING, RequestState.FAILED),
        (RequestState.PROVISIONING, RequestState.WAITING),
    }
)
_DEPTH_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
_TASK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

ATTEMPTS = Counter(
    "corral_attempts",
    "Launch attempts that ended, by where and how (ok, capacity, quota, throttled, auth, "
    "invalid, timeout, error, blocked).",
    ["cloud", "region", "outcome"],
)
ATTEMPT_SECONDS = Histogram(
    "corral_attempt_duration_seconds",
    "From the cloud call to the attempt's end (up, refused, or timed out); blocked attempts, "
    "which call nothing, are left out.",
    ["cloud", "outcome"],
    buckets=_WAIT_BUCKETS_S,
)
TIME_TO_CAPACITY = Histogram(
    "corral_time_to_capacity_seconds",
    "From submission to the request's first RUNNING: every node up (or placed on a pool).",
    ["route"],
    buckets=_WAIT_BUCKETS_S,
)
FAILOVER_DEPTH = Histogram(
    "corral_failover_depth",
    "Candidates of a request's chain passed over (failed or blocked) before it got capacity "
    "(result=running) or before the chain ran out (result=exhausted).",
    ["result"],
    buckets=_DEPTH_BUCKETS,
)
REQUESTS_CREATED = Counter(
    "corral_requests_created", "Launch requests accepted, by route.", ["route"]
)
REQUESTS_ENDED = Counter(
    "corral_requests_ended",
    "Launch requests that reached an end state (SUCCEEDED, FAILED, CANCELLED, TERMINATED).",
    ["route", "state"],
)
INSTANCE_BOOT = Histogram(
    "corral_instance_boot_seconds",
    "From the cloud call to the instance reported up (its agent registered, on clouds with one).",
    ["cloud"],
    buckets=_WAIT_BUCKETS_S,
)
INSTANCES_ENDED = Counter(
    "corral_instances_ended",
    "Instances that reached an end state (TERMINATED, FAILED, LOST), by cloud and market.",
    ["cloud", "market", "state"],
)

# Celery tasks, recorded by the worker signals (worker_hooks).
TASKS = Counter(
    "corral_celery_tasks",
    "Celery tasks run by this worker, by task name and outcome (success, failure, retry).",
    ["task", "outcome"],
)
TASK_SECONDS = Histogram(
    "corral_celery_task_duration_seconds",
    "Wall time of one run of a task's body.",
    ["task"],
    buckets=_TASK_BUCKETS_S,
)
# livesum: in multiprocess mode each pool process writes its own value and a dead process's
# file is dropped (mark_process_dead), so a killed child does not leave a task "running".
TASKS_RUNNING = Gauge(
    "corral_celery_tasks_running",
    "Tasks running now in this worker's processes.",
    ["task"],
    multiprocess_mode="livesum",
)


def request_created(req: LaunchRequest) -> None:
    """A request was stored (once per id: a second create of the same id writes nothing)."""
    REQUESTS_CREATED.labels(route=req.route.kind).inc()


def request_written(before: LaunchRequest, after: LaunchRequest) -> None:
    """A compare-and-set of a request won: count the attempts it ended and the move it made."""
    _attempts_ended(before, after)
    if after.state == before.state:
        return
    route = after.route.kind
    chained = route == "direct" and bool(after.chain)
    up_at = _entered_at(before, after, RequestState.RUNNING)
    if up_at is not None and not _was_running(before):
        TIME_TO_CAPACITY.labels(route=route).observe(up_at - after.created_at)
        if chained:
            FAILOVER_DEPTH.labels(result="running").observe(after.next_step)
    elif chained and (before.state, after.state) in _EXHAUSTED:
        FAILOVER_DEPTH.labels(result="exhausted").observe(len(after.chain))
    if after.state in TERMINAL_REQUEST_STATES:
        REQUESTS_ENDED.labels(route=route, state=after.state.value).inc()


def instance_written(before: Instance, after: Instance) -> None:
    """A compare-and-set of an instance won: its boot time when it came up, its end."""
    if after.state == before.state:
        return
    up_at = _entered_at(before, after, InstanceState.RUNNING)
    if up_at is not None and before.state == InstanceState.REQUESTED:
        INSTANCE_BOOT.labels(cloud=after.cloud).observe(up_at - after.created_at)
    if after.state in TERMINAL_INSTANCE_STATES:
        INSTANCES_ENDED.labels(
            cloud=after.cloud, market=after.market, state=after.state.value
        ).inc()


def instance_created(inst: Instance) -> None:
    """An instance was stored; one stored already up (or up and ended) counts its boot here."""
    up_at = next((t.at for t in inst.history if t.to_state == InstanceState.RUNNING.value), None)
    if up_at is not None:
        INSTANCE_BOOT.labels(cloud=inst.cloud).observe(up_at - inst.created_at)
    if inst.state in TERMINAL_INSTANCE_STATES:
        INSTANCES_ENDED.labels(cloud=inst.cloud, market=inst.market, state=inst.state.value).inc()


def _attempts_ended(before: LaunchRequest, after: LaunchRequest) -> None:
    ended_before = {a.attempt_id for a in before.attempts if a.outcome is not None}
    for a in after.attempts:
        if a.outcome is None or a.attempt_id in ended_before:
            continue
        ATTEMPTS.labels(cloud=a.cloud, region=a.region, outcome=a.outcome).inc()
        if a.outcome != "blocked" and a.ended_at is not None:
            seconds = max(0.0, a.ended_at - a.started_at)
            ATTEMPT_SECONDS.labels(cloud=a.cloud, outcome=a.outcome).observe(seconds)


def _entered_at(
    before: LaunchRequest | Instance,
    after: LaunchRequest | Instance,
    state: RequestState | InstanceState,
) -> float | None:
    """When the write from ``before`` to ``after`` moved the record into ``state`` (one
    write may make two moves: a quick job up and ended at its first look), else None."""
    moves = after.history[len(before.history) :]
    return next((t.at for t in moves if t.to_state == state.value), None)


def _was_running(req: LaunchRequest) -> bool:
    """Whether the request had been RUNNING before (a relaunch or a re-placement is not a
    first time to capacity)."""
    return any(t.to_state == RequestState.RUNNING.value for t in req.history)


class EventMetrics:
    """The store's write listener (``state.store.WriteListener``) that counts these metrics;
    the runtime's Deps hands it to the store, so the store imports no metrics."""

    def created(self, record: LaunchRequest | Instance) -> None:
        if isinstance(record, LaunchRequest):
            request_created(record)
        else:
            instance_created(record)

    def written(self, before: LaunchRequest | Instance, after: LaunchRequest | Instance) -> None:
        if isinstance(before, LaunchRequest) and isinstance(after, LaunchRequest):
            request_written(before, after)
        elif isinstance(before, Instance) and isinstance(after, Instance):
            instance_written(before, after)
