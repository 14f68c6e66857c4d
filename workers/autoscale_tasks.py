"""Autoscaling worker tasks (queue ``autoscale``)."""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime import autoscaling
from corral.services.runtime.deps import deps
from corral.workers.app import app


@app.task(name=dispatch.AUTOSCALE_TICK, acks_late=True, send_events=False)  # beat's
def tick() -> dict[str, Any]:
    """Beat's step: every cluster's tick, and the runtime's demand snapshot."""
    return autoscaling.tick(deps())


@app.task(name=dispatch.AUTOSCALE_TICK_CLUSTER, acks_late=True)
def tick_cluster(name: str) -> str:
    """One cluster's tick now (after `cluster up` or a new demand)."""
    return autoscaling.tick_cluster(deps(), name)
