"""Autoscaling worker tasks (queue ``autoscale``)."""

from __future__ import annotations

from corral.services import dispatch
from corral.services.runtime import autoscaling
from corral.services.runtime.deps import deps
from corral.workers.app import app


@app.task(name=dispatch.AUTOSCALE_TICK, acks_late=True)
def tick() -> dict[str, int]:
    return autoscaling.tick(deps())
