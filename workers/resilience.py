"""How the workers and beat ride through a Redis outage (a restart, a Sentinel failover, a
pause). Named in the app's settings (``worker_consumer``, ``task_cls``) and on beat's command
line (``-S corral.workers.resilience:BeatScheduler``).

- :class:`Consumer`: a worker reconnects to the broker every second at most (Celery's default
  backs off to 30 s), for as long as it takes; and the messages it had taken but not finished
  when the connection died are put back on their queues as soon as it is back, instead of a
  visibility timeout later (a closed channel no longer kills it: see
  :mod:`corral.services.queues.transport`).
  It also sends its task events (Flower's view of the tasks) in one message per
  ``EVENTS_FLUSH_S`` at most, not one per event (see :meth:`Consumer.on_send_event_buffered`).
- :class:`Task`: a task that meets Redis unreachable for longer than ``redis_patience_s`` is
  retried later (with backoff) rather than dropped as failed.
- :class:`BeatScheduler`: beat keeps ticking through an outage (an error backs its tick off
  instead of killing the process), takes its lock again when the outage outlived it, and
  pulses the control plane's clock (:mod:`corral.services.state.outage`) on every tick.
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from typing import Any

import celery
import redis
from celery.exceptions import CPendingDeprecationWarning
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu.exceptions import OperationalError
from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT, REDBEAT_REDIS_KEY, RedBeatScheduler
from redis.exceptions import LockError

from corral.services.queues.redis_conn import connect
from corral.services.settings import get_settings
from corral.services.state.outage import OutageBook, outage_book
from corral.shared.backoff import backoff_s

log = logging.getLogger("corral.resilience")

# What an unreachable Redis raises, through redis-py or kombu.
UNREACHABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OperationalError,
)
RECONNECT = {"interval_start": 0.2, "interval_step": 0.4, "interval_max": 1.0}
# How long a worker's task events wait to go out together (Flower shows them this much later).
EVENTS_FLUSH_S = 0.1


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer with a quick reconnect and a prompt restore of its unfinished
    messages (see the module's docstring)."""

    def ensure_connected(self, conn: Any) -> Any:
        original = conn.ensure_connection

        def quickly(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **{**kwargs, **RECONNECT})

        conn.ensure_connection = quickly
        conn = super().ensure_connected(conn)
        self._restore_orphans(conn)
        return conn

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        self._orphans().update(_delivered_tags(self.connection))
        with warnings.catch_warnings():
            # Celery warns that running tasks are not cancelled on a connection loss: ours
            # are idempotent and their messages are put back, so that is intended.
            warnings.simplefilter("ignore", CPendingDeprecationWarning)
            super().on_connection_error_after_connected(exc)

    def on_send_event_buffered(self) -> None:
        """Celery buffers a worker's task events and sends the buffer on the event loop's
        next turn: on a busy worker nearly every event (received, started, succeeded) went
        out alone, one PUBLISH each, about three per launch. Sent at most every
        ``EVENTS_FLUSH_S`` instead, a task's events, and a burst's, share one message (a full
        buffer still goes out at once: Celery's own limit)."""
        if self.hub is None:
            return
        if getattr(self, "_events_flush_due", False):
            return
        self._events_flush_due = True
        # Armed on the loop's own thread, as Celery hands it the flush (the timer is the loop's).
        self.hub.call_soon(self._arm_events_flush)

    def _arm_events_flush(self) -> None:
        self.hub.call_later(EVENTS_FLUSH_S, self._flush_events_due)

    def _flush_events_due(self) -> None:
        self._events_flush_due = False
        self._flush_events()

    def shutdown(self) -> None:
        try:  # what is still buffered goes out before the connection closes
            self._flush_events()
        except Exception:  # events are Flower's view: never block a shutdown
            log.debug("could not send the last task events", exc_info=True)
        super().shutdown()

    def _orphans(self) -> set[str]:
        if not hasattr(self, "_orphan_tags"):
            self._orphan_tags: set[str] = set()
        return self._orphan_tags

    def _restore_orphans(self, conn: Any) -> None:
        """Put the messages this worker had taken when its connection died back on their
        queues (each only if it is still unacknowledged: the restore is idempotent)."""
        orphans = self._orphans()
        if not orphans:
            return
        qos = conn.default_channel.qos
        for tag in sorted(orphans):
            try:
                qos.restore_by_tag(tag)
            except UNREACHABLE:
                return  # the next connection tries the rest
            orphans.discard(tag)
        log.info("put back the messages taken before the broker connection was lost")


def _delivered_tags(connection: Any) -> set[str]:
    """The delivery tags of the messages taken on ``connection`` and not yet acknowledged."""
    tags: set[str] = set()
    transport = getattr(connection, "_transport", None)
    for channel in getattr(transport, "channels", None) or ():
        qos = getattr(channel, "_qos", None)
        delivered = getattr(qos, "_delivered", None)
        if delivered:
            tags.update(str(tag) for tag in delivered)
    return tags


class Task(celery.Task):  # type: ignore[misc]
    """Every Corral task: Redis unreachable past the patience is retried, not failed."""

    autoretry_for = UNREACHABLE
    retry_backoff = 1
    retry_backoff_max = 5
    retry_jitter = True
    max_retries = None


class BeatScheduler(RedBeatScheduler):  # type: ignore[misc]
    """redbeat's scheduler, riding through Redis outages (see the module's docstring)."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        settings = get_settings()
        if getattr(app, REDBEAT_REDIS_KEY, None) is None:
            # redbeat's own client has no retry and speaks no Corral URL: give it ours.
            patience_s = settings.timers.redis_patience_s
            client = connect(settings.redis_url or "", patience_s=patience_s, decode_responses=True)
            setattr(app, REDBEAT_REDIS_KEY, client)
        self._outage: OutageBook = outage_book(getattr(app, REDBEAT_REDIS_KEY), settings)
        self._failures = 0
        # Beat publishes only the periodic ticks: no "task-sent" events for them, so Flower's
        # task list is the work users caused (the workers send none for these tasks either:
        # send_events=False on each; the README, "Flower").
        app.conf.task_send_sent_event = False
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        while True:
            try:
                super().setup_schedule()
                return
            except UNREACHABLE as exc:
                log.warning("beat: Redis unreachable at start (%s); trying again", exc)
                time.sleep(self._backoff())

    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            if self.lock_key and not self._leading():
                return float(self.max_interval)  # another beat leads: stand by
            interval = float(super().tick(*args, **kwargs))
            self._outage.pulse()
        except LockError as exc:
            log.warning("beat: lost the beat lock (%s); taking it again", exc)
            self.lock = None
            return self._backoff()
        except UNREACHABLE as exc:
            log.warning("beat: Redis unreachable (%s); ticking again shortly", exc)
            return self._backoff()
        if self._failures:
            log.info("beat: Redis is reachable again")
        self._failures = 0
        return interval

    def close(self) -> None:
        """Release the lock and stop, Redis or not: beat's SIGTERM handler closes the scheduler
        before it exits, and an unreachable Redis raised from there into the tick loop, which
        rode it out as an outage, so a beat told to stop during an outage never stopped. The
        lock it could not release expires after ``beat_lock_timeout_s``."""
        try:
            super().close()
        except UNREACHABLE as exc:
            log.warning("beat: Redis unreachable while stopping (%s); the lock will expire", exc)
            self.lock = None

    def _leading(self) -> bool:
        """Whether this beat holds the lock, taking it if it is free (never waiting: a beat
        that lost its lock in an outage must not block its ticks)."""
        if self.lock is not None:
            return True
        client = getattr(self.app, REDBEAT_REDIS_KEY)
        lock = client.lock(self.lock_key, timeout=self.lock_timeout, sleep=self.max_interval)
        lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
        if not lock.acquire(blocking=False):
            return False
        log.info("beat: Acquired lock")
        self.lock = lock
        return True

    def _backoff(self) -> float:
        self._failures += 1
        return backoff_s(0.1, min(self._failures, 4), cap_s=1.0) * random.uniform(0.5, 1.0)
