"""Provisioning worker tasks (queues ``provision.<cloud>`` and ``provision``)."""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime import boots, failover, provisioning, serving, stopping, termination
from corral.services.runtime import reconcile as reconciling
from corral.services.runtime.deps import deps
from corral.shared.failover import Within
from corral.workers.app import app


@app.task(name=dispatch.ATTEMPT, bind=True, acks_late=True, max_retries=None)
def attempt(self: Any, request_id: str, step: int, try_no: int = 0) -> str:
    try:
        return provisioning.attempt(deps(), request_id, step, try_no)
    except provisioning.RetryLater as later:
        raise self.retry(
            args=[request_id, step if later.step is None else later.step, later.try_no],
            countdown=later.countdown_s,
        ) from None


@app.task(name=dispatch.WATCH_BOOTS, acks_late=True)
def watch_boots(cloud: str) -> dict[str, int]:
    return boots.watch(deps(), cloud)


@app.task(name=dispatch.RETRY_REGION, acks_late=True)
def retry_region(request_id: str, after: int) -> str:
    return failover.advance(deps(), request_id, after, Within.REGION)


@app.task(name=dispatch.RETRY_CLOUD, acks_late=True)
def retry_cloud(request_id: str, after: int) -> str:
    return failover.advance(deps(), request_id, after, Within.CLOUD)


@app.task(name=dispatch.NEXT_CLOUD, acks_late=True)
def next_cloud(request_id: str, after: int) -> str:
    return failover.advance(deps(), request_id, after, Within.ANY)


@app.task(name=dispatch.TERMINATE, acks_late=True)
def terminate(request_id: str, instance_id: str | None = None, reason: str = "user") -> str:
    # Published by the API and CLI only: the user asked for it.
    return termination.terminate(deps(), request_id, instance_id, reason, by_user=True)


@app.task(name=dispatch.STOP, acks_late=True)
def stop(request_id: str) -> str:
    return stopping.stop(deps(), request_id)


@app.task(name=dispatch.START, acks_late=True)
def start(request_id: str) -> str:
    return stopping.start(deps(), request_id)


@app.task(name=dispatch.RECONCILE, acks_late=True, send_events=False)  # beat's: not in Flower
def reconcile() -> dict[str, int]:
    return reconciling.reconcile(deps())


@app.task(name=dispatch.SERVE, acks_late=True, send_events=False)  # beat's: not in Flower
def serve() -> dict[str, int]:
    return serving.tick(deps())
