"""Publishes work to the workers by task name: the API and CLI load no task code.

The task names and their queues are the contract between services/ and workers/, written
once in :mod:`.task_names` and read from here as well.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from celery import Celery

from corral.services.queues.redis_conn import broker_options, broker_url, parse_redis_url
from corral.services.queues.sent_events import GatheredSentEvents
from corral.services.queues.task_names import (
    ADMIT,
    ATTEMPT,
    AUTOSCALE_QUEUE,
    AUTOSCALE_TICK,
    AUTOSCALE_TICK_CLUSTER,
    NEXT_CLOUD,
    PING,
    POOL_MACHINE,
    POOL_PASS,
    POOL_REBALANCE,
    POOL_SYNC,
    PROVISION_QUEUE,
    RECONCILE,
    RETENTION,
    RETRY_CLOUD,
    RETRY_REGION,
    SCHEDULE_QUEUE,
    SERVE,
    START,
    STOP,
    SUBMIT,
    TERMINATE,
    WATCH_BOOTS,
    provision_queue,
    role_queues,
)
from corral.services.queues.transport import transport_for
from corral.services.settings import Settings, get_settings

# The task names and queues are this module's too: callers read them as dispatch.ADMIT, ...
__all__ = [
    "ADMIT",
    "ATTEMPT",
    "AUTOSCALE_QUEUE",
    "AUTOSCALE_TICK",
    "AUTOSCALE_TICK_CLUSTER",
    "NEXT_CLOUD",
    "PING",
    "POOL_MACHINE",
    "POOL_PASS",
    "POOL_REBALANCE",
    "POOL_SYNC",
    "PROVISION_QUEUE",
    "RECONCILE",
    "RETENTION",
    "RETRY_CLOUD",
    "RETRY_REGION",
    "SCHEDULE_QUEUE",
    "SERVE",
    "START",
    "STOP",
    "SUBMIT",
    "TERMINATE",
    "WATCH_BOOTS",
    "admit",
    "broker_transport_options",
    "celery_config",
    "pool_machine",
    "pool_pass",
    "pool_sync",
    "provision_queue",
    "publish_retry_policy",
    "role_queues",
    "send",
    "start",
    "stop",
    "terminate",
    "tick_cluster",
    "warm_up",
    "watch_boots",
]


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    timers = settings.timers
    target = parse_redis_url(settings.redis_url or "")
    return {
        **broker_options(target),  # a Sentinel URL's master name
        "visibility_timeout": int(timers.visibility_timeout_s),
        "unacked_restore_interval": max(1, int(timers.unacked_restore_interval_s)),
        "unacked_restore_throttle": 1,
        # The sweep takes a lock; a worker killed while holding it would stall every sweep for
        # kombu's default 300 s. A sweep takes milliseconds, so a short lock is safe.
        "unacked_mutex_expire": max(5, int(timers.unacked_restore_interval_s * 3)),
        "socket_timeout": 30,
        "socket_connect_timeout": 2,
        "health_check_interval": 10,
        # One list per queue. Corral sends no message priorities (the order of its work is
        # the schedulers' decision, made in Redis records), and kombu's default steps
        # (0, 3, 6, 9) keep four lists per queue: every BRPOP named four keys per queue, and
        # each queue's length was four LLENs. A message sent with a priority still lands in
        # the one list.
        "priority_steps": [0],
    }


def publish_retry_policy(settings: Settings) -> dict[str, float]:
    """kombu's retry of a publish that meets a dead connection: reconnect and send again, every
    second at most, for about ``redis_patience_s`` (then the publish fails)."""
    interval_max_s = 1.0
    return {
        "max_retries": max(3, math.ceil(settings.timers.redis_patience_s / interval_max_s)),
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": interval_max_s,
    }


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings both sides share (the producer needs the same broker options)."""
    if not settings.redis_url:
        raise RuntimeError("CORRAL_REDIS_URL is not set (start the system with `corral up`)")
    transport = broker_transport_options(settings)
    target = parse_redis_url(settings.redis_url)
    return {
        "broker_url": broker_url(target),
        "broker_transport": transport_for(target.is_sentinel),
        "broker_transport_options": transport,
        # Ride through a Redis restart or failover: reconnect for as long as it takes, and
        # retry a publish for about redis_patience_s (kombu reconnects in between).
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        "task_publish_retry": True,
        "task_publish_retry_policy": publish_retry_policy(settings),
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": PROVISION_QUEUE,
        "task_create_missing_queues": True,
        # At-least-once: ack after the task ran; a killed worker's task is re-queued.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # Flower: events on, so all three roles and their tasks show up.
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_hijack_root_logger": False,
        "visibility_timeout": transport["visibility_timeout"],
    }


@lru_cache(maxsize=4)
def _producer(redis_url: str, prefix: str) -> Celery:
    settings = get_settings()
    app = Celery("corral-dispatch", set_as_current=False)
    app.conf.update(
        celery_config(settings.model_copy(update={"redis_url": redis_url, "prefix": prefix}))
    )
    return app


@lru_cache(maxsize=4)
def _sent_events(redis_url: str, prefix: str) -> GatheredSentEvents:
    """The "task-sent" events of this process's sends, gathered (:mod:`.sent_events`)."""
    return GatheredSentEvents(_producer(redis_url, prefix))


def sending_queues(clouds: Iterable[str]) -> tuple[str, ...]:
    """The queues the API and the workers send to, with these clouds launchable: scheduling,
    and each cloud's provisioning (what their warm-ups declare)."""
    return (SCHEDULE_QUEUE, *(provision_queue(cloud) for cloud in clouds))


def warm_up(queues: Iterable[str], settings: Settings | None = None) -> None:
    """Build the publishing side now: the Celery app, its result backend, a broker connection,
    and these queues declared on it. Else the first task sent to each queue pays for them
    (milliseconds each, once per process). Declaring a queue that exists changes nothing."""
    settings = settings or get_settings()
    if not settings.redis_url:
        return
    app = _producer(settings.redis_url, settings.prefix)
    app.backend  # noqa: B018 (a cached property: built here, not in the first send)
    with app.producer_or_acquire() as producer:
        for queue in queues:
            producer.maybe_declare(app.amqp.queues[queue])


def send(
    name: str,
    args: list[Any] | tuple[Any, ...] = (),
    *,
    queue: str,
    countdown: float | None = None,
    settings: Settings | None = None,
) -> str:
    """Publish task ``name`` with JSON ``args`` to ``queue``; returns the Celery task id."""
    settings = settings or get_settings()
    if not settings.redis_url:
        raise RuntimeError("CORRAL_REDIS_URL is not set (start the system with `corral up`)")
    app = _producer(settings.redis_url, settings.prefix)
    # Not declared at each send (Celery would, once per broker connection: a few Redis
    # commands for every connection a burst of concurrent sends opens): on Redis a message to
    # a queue, sent by the default exchange, is pushed onto the queue's list whether or not
    # anyone declared it; the workers declare the queues they consume, and warm_up those a
    # process sends to.
    args = list(args)
    result = app.send_task(
        name,
        args=args,
        queue=queue,
        countdown=countdown,
        declare=[],
        event_dispatcher=_sent_events(settings.redis_url, settings.prefix),
        argsrepr=plain_repr(args),
        kwargsrepr="{}",  # no keyword arguments, as Celery would show them
    )
    return str(result.id)


_PLAIN_TEXT = re.compile(r"[A-Za-z0-9 ._:/@+=,-]*")
_REPR_MAX = 1000  # under Celery's cut of an argsrepr (1,024 characters)


def plain_repr(args: list[Any]) -> str | None:
    """The text Celery shows a task's arguments by (Flower, the worker's log), as its
    ``saferepr`` writes it, for arguments it would write as ``repr`` does: ids, names, numbers,
    None (most of what Corral sends). Written here with ``repr``: ``saferepr``, pure Python,
    was about a tenth of the CPU of a send. None for anything else (Celery then writes it)."""
    for arg in args:
        if isinstance(arg, str):
            if not _PLAIN_TEXT.fullmatch(arg):
                return None
        elif arg is not None and type(arg) not in (int, float, bool):
            return None
    text = repr(args)
    return text if len(text) <= _REPR_MAX else None


def admit(request_id: str, settings: Settings | None = None, cloud: str | None = None) -> str:
    """Admit a request. With ``cloud`` (a direct request whose chain was planned at submit:
    the cloud of its first step), on that cloud's provisioning queue, where the same task
    runs the first attempt itself (no second broker message); else on ``schedule``."""
    if cloud is None:
        return send(ADMIT, [request_id], queue=SCHEDULE_QUEUE, settings=settings)
    return send(ADMIT, [request_id, cloud], queue=provision_queue(cloud), settings=settings)


def terminate(
    request_id: str,
    instance_id: str | None = None,
    reason: str = "user",
    settings: Settings | None = None,
) -> str:
    return send(
        TERMINATE, [request_id, instance_id, reason], queue=PROVISION_QUEUE, settings=settings
    )


def stop(request_id: str, settings: Settings | None = None) -> str:
    """Stop a running request's machines (the cloud keeps their disks)."""
    return send(STOP, [request_id], queue=PROVISION_QUEUE, settings=settings)


def start(request_id: str, settings: Settings | None = None) -> str:
    """Start a stopped request's machines again."""
    return send(START, [request_id], queue=PROVISION_QUEUE, settings=settings)


def pool_pass(
    pool: str,
    settings: Settings | None = None,
    countdown: float | None = None,
    *,
    woken: bool = False,
) -> str:
    """Run a scheduling pass over machine pool (or the Determined master) ``pool`` now, or in
    ``countdown`` seconds. ``woken``: sent by a wake (runtime/pooled/passes.wake), which the
    pass frees for the next one as it starts."""
    args: list[Any] = [pool, True] if woken else [pool]
    return send(POOL_PASS, args, queue=SCHEDULE_QUEUE, countdown=countdown, settings=settings)


def pool_sync(pool: str, settings: Settings | None = None) -> str:
    """Carry out what a pool's state asks for (assignments, stops, finished work)."""
    return send(POOL_SYNC, [pool], queue=SCHEDULE_QUEUE, settings=settings)


def pool_machine(
    pool: str,
    machine_id: str,
    cloud: str,
    countdown: float | None = None,
    settings: Settings | None = None,
) -> str:
    """Launch one machine of a pool (on its cloud's provisioning queue)."""
    return send(
        POOL_MACHINE,
        [pool, machine_id],
        queue=provision_queue(cloud),
        countdown=countdown,
        settings=settings,
    )


def watch_boots(cloud: str, countdown: float, settings: Settings | None = None) -> str:
    """Look at ``cloud``'s machines on their way up in ``countdown`` seconds."""
    return send(
        WATCH_BOOTS, [cloud], queue=provision_queue(cloud), countdown=countdown, settings=settings
    )


def tick_cluster(name: str, settings: Settings | None = None) -> str:
    """Run the autoscaler for cluster ``name`` now (after ``cluster up`` or a new demand)."""
    return send(AUTOSCALE_TICK_CLUSTER, [name], queue=AUTOSCALE_QUEUE, settings=settings)
