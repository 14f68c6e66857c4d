"""The simulated clock and event loop, the work each request does, and what is measured.

A policy (:class:`Policy`) decides how requests get capacity; the engine owns time (a heap of
events, ``now`` in seconds from the start of the day), the simulated cloud, and each request's
work: it runs once the policy says it has its capacity (:meth:`Sim.work_start`), keeps its
progress up to its last checkpoint when stopped (:meth:`Sim.work_stop`), and tells the policy
when it is done (``Policy.done``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cloud import SimCloud, SimInstance
from .metrics import Recorder, ReqStat
from .scenario import Scenario
from .workload import Arrival

UTILIZATION_EVERY_S = 60.0  # how often reservation use is looked at


@dataclass(frozen=True)
class SimTimers:
    """The runtime timers the simulator plays (``services.settings.Timers`` has the defaults
    the CLI passes in), and the simulator's own."""

    blocked_ttl_s: float = 180.0
    throttle_backoff_s: float = 0.5
    throttle_retries: int = 3
    relaunch_limit: int = 3
    relaunch_reset_s: float = 1800.0
    attempt_deadline_s: float = 60.0
    pool_rebalance_interval_s: float = 30.0
    min_runtime_s: float = 60.0
    replacement_budget: int = 1
    replacement_guard_s: float = 600.0
    pool_min_machines: int = 0
    pool_retry_initial_s: float = 5.0  # a workload whose machine failed: its pause, doubled
    pool_retry_cap_s: float = 120.0
    pool_avoid_initial_s: float = 60.0  # and how long the failed group is passed over
    pool_avoid_cap_s: float = 1800.0
    autoscale_cooldown_s: float = 180.0
    reconcile_interval_s: float = 2.0  # the autoscaler's tick while it has work
    wait_retry_initial_s: float = 30.0  # an exhausted chain waits, then is walked again
    wait_retry_multiplier: float = 1.6
    wait_retry_cap_s: float = 300.0
    wait_retry_jitter: float = 0.2
    # The simulator's own: passes of one pool coalesce within this; a job keeps its progress
    # up to its last checkpoint; a launcher with nothing left retries the whole chain after.
    pass_coalesce_s: float = 1.0
    checkpoint_every_s: float = 600.0
    retry_until_up_s: float = 60.0

    @classmethod
    def of(cls, timers: Any, **own: Any) -> SimTimers:
        """From an object with the runtime's timer names (the settings' ``timers``)."""
        names = [n for n in cls.__dataclass_fields__ if hasattr(timers, n)]
        found: dict[str, Any] = {n: getattr(timers, n) for n in names}
        return cls(**{**found, **own})


class Policy(Protocol):
    """How requests get capacity."""

    name: str

    def start(self, sim: Sim) -> None: ...

    def arrive(self, arrival: Arrival) -> None: ...

    def lost(self, inst: SimInstance) -> None:
        """The cloud took an instance back (spot reclaimed, zone outage)."""
        ...

    def done(self, request_id: str) -> None:
        """A request's work is finished: give its capacity back."""
        ...

    def queue_depth(self) -> int: ...


@dataclass
class _Work:
    run_from: float | None = None
    progress_s: float = 0.0
    generation: int = 0
    ended: bool = False


@dataclass
class Sim:
    """One policy's run over a scenario and a workload."""

    scenario: Scenario
    arrivals: list[Arrival]
    timers: SimTimers = field(default_factory=SimTimers)
    now: float = 0.0
    # Run the pool passes known to decide nothing anyway, and fail if one does (a test's).
    check_skips: bool = False
    # Per request that could use one: its reservations and the machines it asks for
    # (:func:`corral.shared.sim.reserved.reserved_demand`); what reservation use is measured on.
    reserved_demand: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cloud = SimCloud(self.scenario)
        self.catalog = self.scenario.catalog()
        self.end_s = self.scenario.duration_s
        self.recorder = Recorder()
        self._events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._work: dict[str, _Work] = {}
        self._wanting: dict[str, dict[str, int]] = {}  # arrived, not ended, could use one
        self.events_run = 0

    # ------------------------------------------------------------------ the clock
    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at time ``t`` (never before now)."""
        heapq.heappush(self._events, (max(t, self.now), next(self._seq), fn, args))

    def after(self, dt_s: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + dt_s, fn, *args)

    def run(self, policy: Policy) -> Recorder:
        """Play the day: arrivals, capacity changes and samples, until the scenario ends."""
        self.policy = policy
        for arrival in self.arrivals:
            self.at(arrival.at_s, self._arrive, arrival)
        for t in self.cloud.change_times():
            self.at(t, self._reclaim)
        self.at(0.0, self._sample)
        self.at(0.0, self.look_at_reservations)
        policy.start(self)
        while self._events and self._events[0][0] <= self.end_s:
            t, _, fn, args = heapq.heappop(self._events)
            self.now = t
            fn(*args)
            self.events_run += 1
        self.now = self.end_s
        for rid in list(self._work):
            self.work_stop(rid, kept_all=True)
        self.recorder.cost = self.cloud.finish(self.end_s)
        self.recorder.launch_calls = self.cloud.calls
        return self.recorder

    # ------------------------------------------------------------------ requests
    def _arrive(self, arrival: Arrival) -> None:
        self.recorder.requests[arrival.id] = ReqStat(
            arrival.id, self.now, arrival.duration_s, _kind(arrival)
        )
        if arrival.id in self.reserved_demand:
            self._wanting[arrival.id] = self.reserved_demand[arrival.id]
        self.policy.arrive(arrival)

    def stat(self, request_id: str) -> ReqStat:
        return self.recorder.requests[request_id]

    def failed(self, request_id: str, why: str) -> None:
        """The request ends without its work done."""
        stat = self.stat(request_id)
        if stat.done_s is None and stat.failed is None:
            self.work_stop(request_id)
            stat.failed = why
            self._wanting.pop(request_id, None)

    # ------------------------------------------------------------------ work
    def work_start(self, request_id: str, gpus: int) -> None:
        """The request has all its capacity: its work runs from now."""
        stat = self.stat(request_id)
        if stat.done_s is not None or stat.failed is not None:
            return
        work = self._work.setdefault(request_id, _Work())
        if work.run_from is not None:
            return
        if stat.first_up_s is None:
            stat.first_up_s = self.now
        stat.gpus = gpus
        work.run_from = self.now
        work.generation += 1
        if stat.duration_s is not None:
            left = max(0.0, stat.duration_s - work.progress_s)
            self.after(left, self._finished, request_id, work.generation)

    def work_stop(self, request_id: str, *, kept_all: bool = False) -> None:
        """The request lost its capacity: a job keeps its progress up to its last checkpoint
        (``kept_all``: all of it, at the end of the day); a service's time served counts."""
        work = self._work.get(request_id)
        if work is None or work.run_from is None:
            return
        stat = self.stat(request_id)
        ran = self.now - work.run_from
        every = self.timers.checkpoint_every_s
        kept = ran if kept_all or stat.duration_s is None else math.floor(ran / every) * every
        work.progress_s += kept
        stat.useful_gpu_s += kept * stat.gpus
        work.run_from = None
        work.generation += 1

    def running(self, request_id: str) -> bool:
        work = self._work.get(request_id)
        return work is not None and work.run_from is not None

    def _finished(self, request_id: str, generation: int) -> None:
        work = self._work.get(request_id)
        if work is None or work.generation != generation or work.run_from is None:
            return  # stopped meanwhile
        self.work_stop(request_id, kept_all=True)
        self.stat(request_id).done_s = self.now
        del self._work[request_id]
        self._wanting.pop(request_id, None)
        self.policy.done(request_id)

    # ------------------------------------------------------------------ the cloud's side
    def launched(self, inst: SimInstance) -> None:
        """Watch a new instance: the cloud takes it back at its preemption time."""
        if inst.preempt_at is not None and inst.preempt_at < self.end_s:
            self.at(inst.preempt_at, self._take_back, inst)

    def _take_back(self, inst: SimInstance) -> None:
        if inst.ended_at is not None:
            return
        if inst.owner in self.recorder.requests:  # a Ray node's owner is its node id
            self.stat(inst.owner).spot_preemptions += 1
        self.recorder.spot_preemptions += 1
        self.cloud.end(inst, self.now)
        self.policy.lost(inst)

    def _reclaim(self) -> None:
        for inst in self.cloud.reclaim(self.now):
            self._take_back(inst)

    # ------------------------------------------------------------------ samples
    def _sample(self) -> None:
        markets = self.cloud.by_market()
        self.recorder.sample(
            self.now, markets, self.policy.queue_depth(), self.cloud.accrued_usd(self.now)
        )
        self.after(self.scenario.sample_every_s, self._sample)

    def look_at_reservations(self) -> None:
        """Reservation use while demand exists, looked at every ``UTILIZATION_EVERY_S``: per
        reservation, while requests that could draw on it (``reserved_demand``) are waiting
        or running anywhere, its machines that demand could fill (its count, at most the
        machines those requests ask for) are counted, and of them the ones a request holds
        (launched in the reservation for it, booting or running its work; an idle machine
        counts as unused)."""
        wanted: dict[str, int] = {}
        for asks in self._wanting.values():
            for rid, nodes in asks.items():
                wanted[rid] = wanted.get(rid, 0) + nodes
        if not wanted:
            self.after(UTILIZATION_EVERY_S, self.look_at_reservations)
            return
        held: dict[str, int] = {}  # per reservation: its machines a request holds
        for inst in self.cloud.live.values():
            where = inst.place.reservation
            if where is not None and inst.owner is not None:
                held[where] = held.get(where, 0) + 1
        rec = self.recorder
        for rid, nodes in wanted.items():
            could = min(self.cloud.reservation_capacity(rid, self.now), nodes)
            if could <= 0:
                continue
            used = min(could, held.get(rid, 0))
            seen_used = rec.reserved_by.setdefault(rid, [0, 0])
            seen_used[0] += could
            seen_used[1] += used
            rec.reserved_seen += could
            rec.reserved_used += used
        self.after(UTILIZATION_EVERY_S, self.look_at_reservations)


def _kind(arrival: Arrival) -> str:
    if arrival.ray is not None:
        return "ray"
    task = arrival.task
    assert task is not None
    if task.compute_config is not None:
        return "machine_pool"
    if task.resources.resource_pool is not None or task.resources.slots is not None:
        return "determined"
    return "task" if arrival.duration_s is not None else "service"
