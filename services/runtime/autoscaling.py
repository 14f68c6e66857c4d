"""The autoscaling worker's periodic step.

For now it measures the standing demand (requests waiting or provisioning) against the
instances running, and keeps that snapshot in Redis for the API and Flower. Cluster
autoscaling decisions plug in here.
"""

from __future__ import annotations

import json
from collections import Counter

from corral.services.runtime.deps import Deps
from corral.shared.lifecycle import InstanceState, RequestState


def tick(deps: Deps) -> dict[str, int]:
    pending = len(deps.store.list_requests(state=RequestState.PENDING, limit=100_000))
    provisioning = len(deps.store.list_requests(state=RequestState.PROVISIONING, limit=100_000))
    running = Counter(
        i.instance_type for i in deps.store.list_instances(states={InstanceState.RUNNING})
    )
    snapshot = {
        "pending_requests": pending,
        "provisioning_requests": provisioning,
        "running_instances": sum(running.values()),
    }
    deps.redis.set(
        f"{deps.settings.prefix}:autoscale:last",
        json.dumps({**snapshot, "by_instance_type": dict(running), "at": deps.now()}),
    )
    return snapshot
