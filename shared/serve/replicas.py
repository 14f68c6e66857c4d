"""How many replicas a service keeps, and which to launch or retire: a pure decision.

A service with ``service.replicas`` (or ``replica_policy``) is the user's request (replica 1)
plus one launch request per further replica, each walking the task's failover chain and
relaunching after a lost machine on its own. Each pass of beat's reconcile observes every
replica (:class:`Replica`), then :func:`plan_replicas` says what to do:

- a replica whose request ended (failed, cancelled, terminated) is replaced by a new one with
  the next replica id (SkyServe numbers replacements the same way);
- a replica whose readiness probe has failed for ``grace_s`` after it was up is out of rotation
  (the balancer sends only to ready ones) and is **retired** and replaced. Replica 1 is the
  service's own request and is never retired by the plan (retiring it would end the service):
  once it has failed for ``grace_s`` it no longer counts, so another replica is launched in its
  place, and the surplus is retired once it answers again;
- the count kept is ``min_replicas``, or with ``target_qps_per_replica`` what the
  request-rate autoscaler wants (:mod:`.autoscale`, between min and max); a surplus is
  retired in SkyServe's order (its ``_select_nonterminal_replicas_to_scale_down``):
  replicas not ready yet before ready ones, then the newest (highest id) first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .spec import ReplicaPolicy

# launching: its request is not RUNNING yet (pending, provisioning, waiting, relaunching);
# starting: RUNNING, its probe has no verdict yet (within initial_delay_seconds);
# ready: RUNNING and its probe answers (or it has no probe); not_ready: RUNNING, probe failing;
# ended: its request is over.
ReplicaState = Literal["launching", "starting", "ready", "not_ready", "ended"]
NOT_READY_GRACE_S = 10.0  # a probe failing this long after a verdict: the replica is replaced
_SCALE_DOWN_FIRST = {"launching": 0, "starting": 1, "not_ready": 2, "ready": 3, "ended": 4}


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica as observed now."""

    replica_id: int
    state: ReplicaState
    not_ready_since: float | None = None  # when its probe turned failing (not_ready only)
    pinned: bool = False  # replica 1, the service's own request: never retired by a plan

    def failed_for(self, now: float) -> float:
        """How long its probe has been failing (0 unless not_ready)."""
        if self.state != "not_ready" or self.not_ready_since is None:
            return 0.0
        return max(0.0, now - self.not_ready_since)


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """What one pass does: the count it aims at, replicas to launch (new ids) and to retire
    (id, why)."""

    target: int
    launch: tuple[int, ...] = ()
    retire: tuple[tuple[int, str], ...] = ()


def target_count(policy: ReplicaPolicy) -> int:
    """The replicas kept: min_replicas, within [min, max] (no QPS autoscaling)."""
    return max(policy.min_replicas, min(policy.max_replicas, policy.min_replicas))


def plan_replicas(
    policy: ReplicaPolicy,
    replicas: Sequence[Replica],
    now: float,
    *,
    next_id: int | None = None,
    target: int | None = None,
    grace_s: float = NOT_READY_GRACE_S,
) -> ReplicaPlan:
    """The launches and retirements that bring the service to its count of working replicas.
    ``next_id``: the id the next new replica gets (ids are never reused; by default one above
    the highest given); ``target``: the count the QPS autoscaler wants (by default
    :func:`target_count`)."""
    target = target_count(policy) if target is None else target
    live = [r for r in replicas if r.state != "ended"]
    retire: list[tuple[int, str]] = []
    counted: list[Replica] = []
    for r in live:
        failing = r.failed_for(now) >= grace_s and r.state == "not_ready"
        if failing and not r.pinned:
            retire.append((r.replica_id, f"its readiness probe failed for {grace_s:g} s"))
        elif not (failing and r.pinned):
            counted.append(r)
    highest = max((r.replica_id for r in replicas), default=0) + 1
    next_id = highest if next_id is None else max(next_id, highest)
    launch: tuple[int, ...] = ()
    if len(counted) < target:
        launch = tuple(range(next_id, next_id + target - len(counted)))
    elif len(counted) > target:
        spare = sorted(
            (r for r in counted if not r.pinned),
            key=lambda r: (_SCALE_DOWN_FIRST[r.state], -r.replica_id),
        )
        retire.extend(
            (r.replica_id, f"more replicas than the {target} kept")
            for r in spare[: len(counted) - target]
        )
    return ReplicaPlan(target=target, launch=launch, retire=tuple(retire))
