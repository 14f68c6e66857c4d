"""Scheduling worker tasks (queue ``schedule``)."""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime import provisioning, requests
from corral.services.runtime.deps import deps
from corral.workers.app import app


@app.task(name=dispatch.ADMIT, acks_late=True)
def admit(request_id: str) -> str:
    return provisioning.admit(deps(), request_id)


@app.task(name=dispatch.SUBMIT, acks_late=True)
def submit(task: Any, idempotency_key: Any = None) -> dict[str, Any]:
    """A launch request from another application: ``task`` is the task document (a mapping,
    or its YAML text), checked exactly as ``POST /v1/requests`` checks it. Idempotent by the
    key: a duplicate creates nothing. The outcome is readable at ``/v1/submissions/<key>``."""
    return requests.submit_queued(deps(), task, idempotency_key)


@app.task(name=dispatch.PING, acks_late=True)
def ping() -> str:
    """Does nothing: a liveness check, and the baseline of the queue-path benchmark."""
    return "pong"
