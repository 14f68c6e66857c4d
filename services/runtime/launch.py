"""The one launch path: every machine Corral starts goes through here, whoever asks for it
(a direct request's zone attempt, a machine pool's machine, a Determined agent, an autoscaled
cluster node, which is launched as an ordinary request).

Launch, record, return: :func:`start` takes a place under the cloud's launch limits, makes the
cloud call (idempotent by the attempt id), hands the machines to the boot watch
(:class:`~corral.services.state.boots.Boot`) and returns; no worker waits for a boot. The watch
(:mod:`corral.services.runtime.boots`) looks at each cloud's booting machines with one
describe per cloud and region, and finishes each launch as
:func:`corral.shared.observe.boot_verdict` says.

- :func:`zones_for`: where a launch template's type is offered, for a pooled machine's walk
  (:func:`corral.services.runtime.pooled.launching.launch_pooled`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from corral.services.providers.base import TAG_NODE, LaunchSpec, ProviderInstance
from corral.services.queues import dispatch
from corral.services.runtime.deps import Deps
from corral.services.state.boots import Boot
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.errors import LaunchTimeoutError, ProviderError, Scope, UnregisteredError
from corral.shared.reservations import reservation_of  # one reading, shared with the simulator

log = logging.getLogger("corral.launch")


class LaunchDeferred(Exception):
    """The cloud's launch limits are full: ask again in ``wait_s`` (nothing was launched)."""

    def __init__(self, cloud: str, wait_s: float) -> None:
        super().__init__(f"{cloud}'s launch limits are full; again in {wait_s:.1f}s")
        self.wait_s = wait_s


def start(
    deps: Deps,
    boot: Boot,
    fresh: bool = False,
    recorded: Callable[[list[ProviderInstance]], object] | None = None,
) -> list[ProviderInstance]:
    """Launch ``boot.spec`` and hand its machines to the boot watch; returns what the cloud
    answered (machines usually still booting). Raises the provider's error, or
    :class:`LaunchDeferred` when the cloud's limits are full. Called again for the same
    attempt (a redelivered task), it launches nothing more and keeps the first deadline.
    ``fresh``: the caller's own write just started this attempt, so no earlier call can have
    booked its boot (the book is not read). ``recorded``: called with what the cloud answered
    before the boot is booked, so what it writes is there before the watch can see the boot."""
    spec = boot.spec
    if not fresh:
        boot = deps.boots.get(spec.cloud, boot.key) or boot
    now = deps.now()
    # The in-flight place lapses a minute past the deadline even if every watch died.
    wait = deps.limits.admit(
        spec.cloud, spec.region, spec.attempt_id, now=now, until=boot.deadline + 60
    )
    if wait > 0:
        raise LaunchDeferred(spec.cloud, wait)
    try:
        launched = _launch_by_deadline(
            deps.provider(spec.cloud), spec, time.monotonic() + max(1.0, boot.deadline - now)
        )
    except ProviderError:
        deps.limits.release(spec.cloud, spec.region, spec.attempt_id)
        raise
    if recorded is not None:
        recorded(launched)
    # Watched, and a watch of the cloud scheduled if none is, in one round trip.
    interval = watch_interval(deps, spec.cloud)
    if deps.boots.add(boot, watch_ttl_s=_watch_mark_ttl(interval)):
        dispatch.watch_boots(spec.cloud, countdown=interval, settings=deps.settings)
    return launched


def finish(deps: Deps, boot: Boot) -> None:
    """The launch is over (up, failed or given up): stop watching it, free its place."""
    deps.limits.release(boot.spec.cloud, boot.spec.region, boot.key)
    deps.boots.remove(boot)


def finish_all(deps: Deps, boots: Sequence[Boot]) -> None:
    """:func:`finish` for several launches at once (a boot watch's look): their places freed,
    and they leave the book in one command per cloud."""
    for boot in boots:
        deps.limits.release(boot.spec.cloud, boot.spec.region, boot.key)
    deps.boots.remove_all(boots)


def watch_interval(deps: Deps, cloud: str) -> float:
    provider = deps.provider(cloud)
    return max(deps.settings.timers.boot_watch_interval_s, float(provider.poll_interval_s))


def _watch_mark_ttl(interval_s: float) -> float:
    # The mark outlives a watch that died (its task is redelivered, or beat schedules again).
    return interval_s * 4 + 5


def watch_soon(deps: Deps, cloud: str) -> None:
    """Make sure a boot watch of ``cloud`` is scheduled (one for a burst of launches)."""
    interval = watch_interval(deps, cloud)
    if deps.boots.schedule_watch(cloud, ttl_s=_watch_mark_ttl(interval)):
        dispatch.watch_boots(cloud, countdown=interval, settings=deps.settings)


def rewatch(deps: Deps) -> int:
    """Beat's safety net: a watch for every cloud with boots and none scheduled (its worker
    died with the watch's message unacknowledged, or between a look and the next)."""
    clouds = [c for c in deps.settings.clouds if deps.boots.in_flight(c)]
    for cloud in clouds:
        watch_soon(deps, cloud)
    return len(clouds)


def boot_error(verdict: str) -> ProviderError:
    """The error a failed boot counts as (the attempt's outcome and the scope it blocks). A
    silent machine blocks nothing: only the cloud's own answers may (corral.shared.liveness)."""
    if verdict == "lost":
        return ProviderError("an instance died while starting", code="InstanceLost")
    if verdict == "silent":
        return ProviderError(
            "an instance never reported while starting", code="InstanceSilent", scope=Scope.NONE
        )
    if verdict == "unregistered":
        return UnregisteredError(
            "the cloud started the instances but their agents never registered within the "
            "attempt deadline",
            code="AgentNeverRegistered",
        )
    return LaunchTimeoutError("instances did not come up within the attempt deadline")


def by_node(found: Sequence[ProviderInstance]) -> list[ProviderInstance]:
    return sorted(found, key=lambda p: int(p.tags.get(TAG_NODE, "0")))


def _launch_by_deadline(provider: Any, spec: LaunchSpec, deadline: float) -> list[ProviderInstance]:
    """Call ``provider.launch`` but stop waiting at the deadline: a hung region must not hold
    the chain. What a late launch creates is found by its attempt tag and cleaned up. A
    provider whose launch cannot hang (``Features.bounded_launch``: the local cloud's calls end
    on timeouts of their own) is called directly: a hand-over to another thread is two waits for
    the scheduler, a visible share of a launch on a loaded machine."""
    if provider.features.bounded_launch:
        return list(provider.launch(spec))
    future = _CALLERS.submit(provider.launch, spec)
    try:
        return list(future.result(timeout=max(0.0, deadline - time.monotonic())))
    except concurrent.futures.TimeoutError:
        raise LaunchTimeoutError(f"no answer within the attempt deadline in {spec.zone}") from None


class _Callers:
    """Daemon threads that make cloud calls for callers waiting with a deadline, kept between
    calls (a thread and an executor started per launch were a measurable share of an
    attempt). A thread stuck in a hung call is simply not idle: the next call gets another."""

    def __init__(self) -> None:
        self._reset()
        # A forked process has none of its parent's threads: it starts its own.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Any]] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            caller = threading.Thread(target=self._serve, args=(inbox,), daemon=True)
            caller.start()
        inbox.put((future, fn, args))
        return future

    def _serve(self, inbox: queue.SimpleQueue[Any]) -> None:
        while True:
            future, fn, args = inbox.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # the caller's to handle, as an executor would
                    future.set_exception(exc)
            del future, fn, args  # nothing of a finished call is kept while idle
            with self._lock:
                self._idle.append(inbox)


_CALLERS = _Callers()


# ----------------------------------------------------------------------------------------------
# Pooled machines: where a template may launch, and the market a launched one is billed in


def zones_for(deps: Deps, cloud: str, template: LaunchTemplate) -> list[tuple[str, str]]:
    """(zone, region) pairs that offer a template's type (a reservation's zone alone, where
    the cloud knows it); the walk keeps the template's own ``zones`` of them."""
    rid = reservation_of(template.advanced_instance_config)
    return deps.provider(cloud).zones_of(template.instance_type, rid)


def market_of(spec: LaunchSpec, got: ProviderInstance) -> str:
    """The market a launched machine is billed in: ``reserved`` when its spec draws on a
    reservation, else what the cloud reports."""
    if spec.reservation_id or reservation_of(spec.advanced_instance_config) is not None:
        return "reserved"
    return got.market
