"""Scheduling worker tasks (queue ``schedule``)."""

from __future__ import annotations

from corral.services.queues import dispatch
from corral.services.runtime import provisioning
from corral.services.runtime.deps import deps
from corral.workers.app import app


@app.task(name=dispatch.ADMIT, acks_late=True)
def admit(request_id: str) -> str:
    return provisioning.admit(deps(), request_id)


@app.task(name=dispatch.PING, acks_late=True)
def ping() -> str:
    """Does nothing: a liveness check, and the baseline of the queue-path benchmark."""
    return "pong"
