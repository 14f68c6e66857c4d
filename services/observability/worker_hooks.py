"""Celery worker signals that give every worker process its metrics and log context.

:func:`connect` is called once by the Celery app (workers/app.py). Then:

- the worker's main process serves /metrics on ``CORRAL_METRICS_PORT`` once it is ready
  (``corral run worker --metrics-port N``), and removes its metric folder when it stops;
- each task run is counted and timed (:mod:`.events`), and while it runs its log lines carry
  the task's name and id and the request (pool, cloud, cluster) its arguments name;
- a pool child that exits marks itself dead for the multiprocess sum;
- with ``CORRAL_LOG_FORMAT=json`` every process (workers and beat) logs JSON lines.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from celery import signals

from corral.services.observability import events, exposition, logs
from corral.services.queues import dispatch
from corral.services.settings import Settings, get_settings

log = logging.getLogger("corral.metrics")

# What each task's positional arguments are, for the log context. A task not named here logs
# with its name and id only (beat's reconcile and ticks concern many requests at once).
TASK_ARGS: dict[str, tuple[str, ...]] = {
    dispatch.ADMIT: ("request_id",),
    dispatch.ATTEMPT: ("request_id",),
    dispatch.RETRY_REGION: ("request_id",),
    dispatch.RETRY_CLOUD: ("request_id",),
    dispatch.NEXT_CLOUD: ("request_id",),
    dispatch.TERMINATE: ("request_id", "instance_id"),
    dispatch.POOL_PASS: ("pool",),
    dispatch.POOL_SYNC: ("pool",),
    dispatch.POOL_MACHINE: ("pool", "machine_id"),
    dispatch.WATCH_BOOTS: ("cloud",),
    dispatch.AUTOSCALE_TICK_CLUSTER: ("cluster",),
}

_OUTCOMES = {"SUCCESS": "success", "FAILURE": "failure", "RETRY": "retry"}
_started: dict[str, float] = {}  # task id -> when its body started (this process)
_server: exposition.MetricsServer | None = None
_connected = False


def connect(settings: Settings | None = None) -> None:
    """Connect the signal receivers (once per process)."""
    global _connected
    if _connected:
        return
    _connected = True
    settings = settings or get_settings()
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    signals.worker_ready.connect(_worker_ready, weak=False)
    signals.worker_shutdown.connect(_worker_stopped, weak=False)
    signals.worker_process_shutdown.connect(_child_exits, weak=False)
    if settings.log_format == "json":
        # A receiver here means Celery leaves logging alone: JSON lines to stderr, nothing else,
        # from now on (what Celery warns about before it sets logging up included).
        signals.setup_logging.connect(_json_logging, weak=False)
        logs.configure_json_root()


def ids_of(task_name: str, args: Sequence[Any] | None, task_id: str | None) -> dict[str, str]:
    """The log ids of one task run: its name and id, and what its arguments name."""
    ids = {"task": task_name}
    if task_id:
        ids["task_id"] = task_id
    for field, value in zip(TASK_ARGS.get(task_name, ()), args or (), strict=False):
        if value is not None:
            ids[field] = str(value)
    return ids


def _task_started(task_id: str, task: Any, args: Any = None, **_: Any) -> None:
    logs.bind(**ids_of(task.name, args, task_id))
    _started[task_id] = time.perf_counter()
    events.TASKS_RUNNING.labels(task=task.name).inc()


def _task_ended(task_id: str, task: Any, state: str | None = None, **_: Any) -> None:
    began = _started.pop(task_id, None)
    events.TASKS_RUNNING.labels(task=task.name).dec()
    if began is not None:
        events.TASK_SECONDS.labels(task=task.name).observe(time.perf_counter() - began)
    outcome = _OUTCOMES.get(state or "", (state or "unknown").lower())
    events.TASKS.labels(task=task.name, outcome=outcome).inc()
    logs.unbind()


def _worker_ready(**_: Any) -> None:
    global _server
    settings = get_settings()
    if settings.metrics_port is None:
        return
    if settings.prometheus_multiproc_dir is None:
        log.warning(
            "metrics: PROMETHEUS_MULTIPROC_DIR is not set, so a prefork worker's /metrics "
            "shows only its main process; start workers with `corral run worker`"
        )
    _server = exposition.MetricsServer(settings)
    _server.start()


def _worker_stopped(**_: Any) -> None:
    if _server is not None:
        _server.stop()
    exposition.remove_folder(get_settings())


def _child_exits(pid: int | None = None, **_: Any) -> None:
    exposition.mark_dead(get_settings(), pid or os.getpid())


def _json_logging(loglevel: int | str | None = None, **_: Any) -> None:
    from celery.utils.log import get_multiprocessing_logger

    logs.configure_json_root(loglevel or logging.INFO)
    # The pool's own logger ("a child exited") does not propagate to the root: JSON it too.
    pool_logger = get_multiprocessing_logger()
    pool_logger.handlers = [logs.json_handler()]
    pool_logger.setLevel(logging.WARNING)
