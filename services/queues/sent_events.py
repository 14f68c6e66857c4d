"""Celery's "task-sent" events, gathered and published together.

Flower lists a task from the moment it is sent because whoever sends it also sends a
"task-sent" event. Celery publishes that event as a message of its own right after the task.
On the API's busiest route (a submit publishes one admission) that second message was about a
fifth of the API's CPU per submit: 0.3-0.4 ms of 1.7-2.0 in the 1,000-launch benchmark.

Here a process's "task-sent" events are gathered and published as one message, a list of
events routed ``task.multi``. A worker sends its own task events the same way. Celery's event
receiver, which Flower uses, takes such a message as the events in it. The batch goes out
:data:`FLUSH_S` after the first event in it, or at once when :data:`LIMIT` are waiting.
An event that reaches Flower after the worker's "task-received" for the same task is merged
into what Flower knows (events carry their clock), as Celery merges events that arrive out
of order.

The tasks themselves are published at once, never held back. What can be lost is only
monitoring: the events of a process killed within :data:`FLUSH_S` of sending them (an orderly
exit publishes what is waiting), and a batch that meets a broker outage (the warning says so).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

from celery import Celery
from celery.events.dispatcher import EventDispatcher
from celery.events.event import Event

log = logging.getLogger("corral.dispatch")

FLUSH_S = 0.05  # the longest an event waits for others to go with it
LIMIT = 64  # events in one message at most (a burst sends several)


class GatheredSentEvents(EventDispatcher):  # type: ignore[misc]
    """An event dispatcher for the publishing side (``send_task(event_dispatcher=...)``): its
    :meth:`publish`, which Celery calls with each task's "task-sent" event, keeps the event;
    a thread of its own publishes what was kept, :data:`FLUSH_S` after the first event of a
    batch. Safe across threads, and across a fork (a child gathers its own)."""

    def __init__(self, app: Celery, flush_s: float = FLUSH_S, limit: int = LIMIT) -> None:
        # Not enabled: Celery's own publishing (its producer and connection) is never used.
        super().__init__(app=app, enabled=False)
        self.flush_s = flush_s
        self.limit = limit
        self._reset()
        atexit.register(self.flush_gathered)

    def _reset(self) -> None:
        self._owner = self.pid = os.getpid()  # the events name their sender's pid
        self._lock = threading.Lock()
        # Held from taking a batch to its publishing done: an exit's flush waits for the
        # flushing thread's batch in flight (a daemon thread dies with the interpreter).
        self._publishing = threading.Lock()
        self._kept: list[dict[str, Any]] = []
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None
        self._warned = False

    def publish(
        self,
        type: str,
        fields: dict[str, Any],
        producer: Any,
        blind: bool = False,
        Event: Any = Event,
        **_: Any,
    ) -> None:
        """Keep one event (Celery passes its task's producer, its retry and its policy: the
        batch is published on a producer of its own)."""
        if self._owner != os.getpid():
            self._reset()  # a forked child: the parent's lock, thread and events are not its own
        event = self._prepare_event(type, fields, blind=blind, Event=Event)
        with self._lock:
            self._kept.append(event)
            full = len(self._kept) >= self.limit
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._run, name="task-sent-events", daemon=True
                )
                self._flusher.start()
        if full:
            self.flush_gathered()
        else:
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            time.sleep(self.flush_s)  # let the batch gather
            self.flush_gathered()

    def flush_gathered(self) -> None:
        """Publish the events kept so far, as one message."""
        if self._owner != os.getpid():
            return  # at a forked child's exit: the events are its parent's
        with self._publishing:
            with self._lock:
                batch, self._kept = self._kept, []
            if batch:
                self._publish(batch)

    def _publish(self, batch: list[dict[str, Any]]) -> None:
        try:
            with self.app.producer_or_acquire() as producer:
                producer.publish(
                    batch,
                    routing_key="task.multi",
                    exchange=self.exchange.name,
                    declare=[self.exchange],
                    serializer=self.serializer,
                    headers=self.headers,
                    delivery_mode=self.delivery_mode,
                    retry=False,
                )
        except Exception as exc:  # monitoring only: the tasks went out
            if not self._warned:  # once per outage
                log.warning(
                    "%d task-sent events not published (%s): Flower misses them", len(batch), exc
                )
            self._warned = True
        else:
            self._warned = False
