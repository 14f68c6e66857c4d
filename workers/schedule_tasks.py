"""Scheduling worker tasks (queue ``schedule``)."""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime import provisioning, requests
from corral.services.runtime.deps import deps
from corral.services.state.retention import sweep_for_settings
from corral.workers.app import app


@app.task(name=dispatch.ADMIT, acks_late=True)
def admit(request_id: str, cloud: str | None = None) -> str:
    # With a cloud: sent to that cloud's provisioning queue, and runs the first attempt too.
    return provisioning.admit(deps(), request_id, cloud)


@app.task(name=dispatch.SUBMIT, acks_late=True)
def submit(task: Any, idempotency_key: Any = None) -> dict[str, Any]:
    """A launch request from another application: ``task`` is the task document (a mapping,
    or its YAML text), checked exactly as ``POST /v1/requests`` checks it. Idempotent by the
    key: a duplicate creates nothing. The outcome is readable at ``/v1/submissions/<key>``."""
    return requests.submit_queued(deps(), task, idempotency_key)


@app.task(name=dispatch.RETENTION, acks_late=True)
def retention() -> dict[str, Any]:
    """Export, then delete, requests, events and submissions finished longer ago than
    ``CORRAL_RETENTION_DAYS``; idempotent (a repeat finds nothing more to do)."""
    d = deps()
    done = sweep_for_settings(d.store, d.settings)
    return {"requests": done.requests, "submissions": done.submissions}


@app.task(name=dispatch.PING, acks_late=True)
def ping() -> str:
    """Does nothing: a liveness check, and the baseline of the queue-path benchmark."""
    return "pong"
