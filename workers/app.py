"""The one Celery app. Each role's worker consumes its own queues:

- ``schedule``   the scheduling worker   (admission of a request without a planned chain; a
                 direct request is admitted on its first cloud's provisioning queue)
- ``provision.<cloud>`` (one per registered cloud: ``provision.aws``, ``provision.gcp``,
                 ``provision.kubernetes``, ``provision.local``), ``provision``
                 the provisioning worker (attempts, termination, reconcile)
- ``autoscale``  the autoscaling worker

Machine pools: passes and syncs on ``schedule``, machine launches on ``provision.<cloud>``.

Start one with ``corral run worker --role schedule`` (or ``celery -A corral.workers.app worker
-Q schedule``); run as many per role as the load needs. Beat (``corral run beat``) uses
celery-redbeat: its lock in Redis means two beat processes never both fire. Workers and beat
ride through Redis outages (:mod:`corral.workers.resilience`).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_init

from corral.services.observability import worker_hooks
from corral.services.observability.events import EventMetrics
from corral.services.providers.registry import registered_clouds
from corral.services.queues import dispatch
from corral.services.runtime.deps import wire_store_listener
from corral.services.runtime.heap import freeze_loaded
from corral.services.settings import Settings, get_settings

ROLE_QUEUES = dispatch.role_queues(registered_clouds())
# The store's writes counted as event metrics in every worker process (the runtime, below
# observability, does not import them).
wire_store_listener(EventMetrics())


def _every(task: str, interval_s: float, queue: str) -> dict[str, Any]:
    """A beat entry: ``task`` on ``queue`` every ``interval_s``; a copy not started within two
    intervals expires (the next one is on its way)."""
    return {
        "task": task,
        "schedule": timedelta(seconds=interval_s),
        "options": {"queue": queue, "expires": interval_s * 2},
    }


# Named, not imported: the worker and beat load these after the app (see resilience.py).
CONSUMER = "corral.workers.resilience:Consumer"
TASK_CLASS = "corral.workers.resilience:Task"
BEAT_SCHEDULER = "corral.workers.resilience:BeatScheduler"


def make_app(settings: Settings) -> Celery:
    app = Celery("corral", task_cls=TASK_CLASS)
    app.conf.update(dispatch.celery_config(settings))
    timers = settings.timers
    app.conf.update(
        task_routes={
            "corral.schedule.*": {"queue": dispatch.SCHEDULE_QUEUE},
            "corral.autoscale.*": {"queue": dispatch.AUTOSCALE_QUEUE},
            "corral.provision.*": {"queue": dispatch.PROVISION_QUEUE},
        },
        worker_consumer=CONSUMER,
        beat_scheduler=BEAT_SCHEDULER,
        # Beat's Redis client is Corral's own (BeatScheduler sets it): retries, Sentinel.
        # (redbeat only prints this one, and its URL parser takes no `;` list of sentinels)
        redbeat_redis_url=(settings.redis_url or "").split(";")[0],
        redbeat_redis_options={},
        redbeat_key_prefix=f"{settings.prefix}:redbeat:",
        redbeat_lock_timeout=int(timers.beat_lock_timeout_s),
        beat_max_loop_interval=timers.beat_max_loop_interval_s,
        beat_schedule={
            "reconcile": _every(
                dispatch.RECONCILE, timers.reconcile_interval_s, dispatch.PROVISION_QUEUE
            ),
            "serve": _every(dispatch.SERVE, timers.reconcile_interval_s, dispatch.PROVISION_QUEUE),
            "pool-rebalance": _every(
                dispatch.POOL_REBALANCE, timers.pool_rebalance_interval_s, dispatch.SCHEDULE_QUEUE
            ),
            "autoscale-tick": _every(
                dispatch.AUTOSCALE_TICK, timers.reconcile_interval_s, dispatch.AUTOSCALE_QUEUE
            ),
            "retention": _every(dispatch.RETENTION, 3600.0, dispatch.SCHEDULE_QUEUE),
        },
        include=[
            "corral.workers.schedule_tasks",
            "corral.workers.provision_tasks",
            "corral.workers.autoscale_tasks",
            "corral.workers.pool_tasks",
        ],
    )
    return app


app = make_app(get_settings())
worker_hooks.connect()  # /metrics, task counts and log context in every worker process


@worker_init.connect
def _freeze_before_forking(**_: Any) -> None:
    """What the worker loaded before it forks its pool, out of the collector's sight
    (:mod:`corral.services.runtime.heap`)."""
    freeze_loaded(collect=True)


@worker_process_init.connect
def _warm_up(**_: Any) -> None:
    """A pool process loads the clouds' SDKs, their credentials and the catalog in the
    background as it starts: its first task (an admission after a worker restarted) need not
    wait seconds for them. It opens its connections too: the store's, and the publishing
    side's (the dispatcher's app, its broker channel and the queues a task sends to), which
    the first task that sends a message (a launch scheduling its boot watch) would otherwise
    build: about 20 ms of CPU, once per process."""

    def warm() -> None:
        # Imported here: beat and Flower need none of it.
        from corral.services.runtime.deps import deps
        from corral.services.runtime.planning import warm_up

        try:
            found = deps()
            warm_up(found)
            clouds = found.launchable_clouds()
            dispatch.warm_up(dispatch.sending_queues(clouds), found.settings)
            found.redis.ping()
        except Exception:  # only a warm-up: the first task builds whatever is missing
            logging.getLogger("corral.workers").exception("warm-up failed")
        freeze_loaded()  # what the warm-up loaded (the SDKs, the catalog) lives as long

    threading.Thread(target=warm, name="warm-up", daemon=True).start()
