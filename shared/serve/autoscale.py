"""How many replicas a service wants for the queries it gets: SkyServe's request-rate autoscaler.

With ``replica_policy.target_qps_per_replica``, SkyServe (``sky/serve/autoscalers.py``,
``docs/source/serving/autoscaling.rst``) sizes a service as::

    desired = min(max_replicas, max(min_replicas, ceil(qps / target_qps_per_replica)))

where ``qps`` is the requests its load balancer relayed over the last ``QPS_WINDOW_S`` (60 s)
divided by the window, and moves its target to ``desired`` only once ``desired`` has stayed
above the target for ``upscale_delay_seconds`` (default 300) or below it for
``downscale_delay_seconds`` (default 1200): the hysteresis that keeps a burst from launching
machines. SkyServe counts decision intervals for the delays; Corral keeps the time since which
``desired`` has been above (or below) the target, so the delay is measured in seconds whatever
the pass's interval. A mapping ``target_qps_per_replica: {A100: 10, L4: 2}`` (SkyServe's
instance-aware form) sizes with its smallest value: Corral does not know which accelerator the
next replica gets (a notice says so). Without a QPS target, the target is ``min_replicas``.
Pure: the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .spec import ReplicaPolicy

QPS_WINDOW_S = (
    60.0  # SkyServe's window of requests (its constants.AUTOSCALER_QPS_WINDOW_SIZE_SECONDS)
)


@dataclass(frozen=True, slots=True)
class Scaling:
    """The autoscaler's state between passes: the target, and since when ``desired`` has been
    above it or below it (None: it is not)."""

    target: int
    above_since: float | None = None
    below_since: float | None = None


def per_replica_qps(policy: ReplicaPolicy) -> float | None:
    """The QPS one replica is sized for (None: no QPS autoscaling)."""
    target = policy.target_qps_per_replica
    if target is None:
        return None
    if isinstance(target, dict):
        return min(target.values()) if target else None
    return float(target)


def desired_replicas(policy: ReplicaPolicy, qps: float) -> int:
    """SkyServe's formula: ceil(qps / target per replica), within [min, max]."""
    per = per_replica_qps(policy)
    if per is None or per <= 0:
        return policy.min_replicas
    wanted = math.ceil(qps / per - 1e-9) if qps > 0 else 0
    return min(policy.max_replicas, max(policy.min_replicas, wanted))


def scale(policy: ReplicaPolicy, state: Scaling | None, qps: float, now: float) -> Scaling:
    """The target after one look at the request rate (``state`` None: the service's first)."""
    if per_replica_qps(policy) is None:
        return Scaling(target=policy.min_replicas)
    current = policy.min_replicas if state is None else state.target
    current = min(policy.max_replicas, max(policy.min_replicas, current))
    desired = desired_replicas(policy, qps)
    if desired > current:
        since = state.above_since if state is not None and state.above_since is not None else now
        if now - since >= policy.upscale_delay_s:
            return Scaling(target=desired)
        return Scaling(target=current, above_since=since)
    if desired < current:
        since = state.below_since if state is not None and state.below_since is not None else now
        if now - since >= policy.downscale_delay_s:
            return Scaling(target=desired)
        return Scaling(target=current, below_since=since)
    return Scaling(target=current)
