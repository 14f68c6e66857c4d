"""The task names and the queues they go to: the contract between services/ and workers/,
written here once (workers/app.py registers its tasks under exactly these names). Nothing but
the standard library: ``corral run worker`` reads its queues from here before it starts
Celery, without loading Celery itself (:mod:`.dispatch` publishes). Every cloud has a
provisioning queue of its own, named after it; which clouds there are is the registry's word
(``providers.registry.registered_clouds()``), handed in by the callers above it.
"""

from __future__ import annotations

from collections.abc import Iterable

# Task names (the workers register these) -> the queue each one goes to.
ADMIT = "corral.schedule.admit"  # plan a request's chain and start its first attempt
# Other applications' door: a task document and an idempotency key, checked as the API checks
# a POST /v1/requests (README: "Submitting from another Celery application").
SUBMIT = "corral.schedule.submit"
ATTEMPT = "corral.provision.attempt"  # one attempt: launch in one zone (queue per cloud)
RETRY_REGION = "corral.provision.retry_region"  # a zone failed: the rest of its region
RETRY_CLOUD = "corral.provision.retry_cloud"  # a region is exhausted: the cloud's other regions
NEXT_CLOUD = "corral.provision.next_cloud"  # a cloud is exhausted: the rest of the chain
TERMINATE = "corral.provision.terminate"  # terminate a request's or one instance's machines
STOP = "corral.provision.stop"  # stop a request's machines (corral stop): disks kept
START = "corral.provision.start"  # start a stopped request's machines again (corral start)
RECONCILE = "corral.provision.reconcile"  # beat: store vs providers, lost and stray instances
SERVE = "corral.provision.serve"  # beat: replicated services' replicas kept, probed, replaced
AUTOSCALE_TICK = "corral.autoscale.tick"  # beat: the autoscaler's periodic decision
AUTOSCALE_TICK_CLUSTER = "corral.autoscale.tick_cluster"  # one cluster now (new demand, up)
POOL_PASS = "corral.schedule.pool_pass"  # one scheduling pass over one pool, then carry it out
POOL_SYNC = "corral.schedule.pool_sync"  # carry a pool's state out (assign, stop, finish)
POOL_REBALANCE = "corral.schedule.pool_rebalance"  # beat: every pool's pass with replacement
POOL_MACHINE = "corral.provision.pool_machine"  # launch one pool machine (queue per cloud)
WATCH_BOOTS = "corral.provision.watch_boots"  # one look at a cloud's machines on their way up
RETENTION = "corral.schedule.retention"  # beat: export, then delete, what finished long ago
PING = "corral.schedule.ping"  # does nothing: liveness checks and the queue benchmark's baseline

SCHEDULE_QUEUE = "schedule"
PROVISION_QUEUE = "provision"
AUTOSCALE_QUEUE = "autoscale"


def provision_queue(cloud: str | None = None) -> str:
    """``provision.<cloud>`` for a launch on that cloud, ``provision`` for the rest."""
    return f"{PROVISION_QUEUE}.{cloud}" if cloud else PROVISION_QUEUE


def role_queues(clouds: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The queues each worker role consumes, with ``clouds`` (the registry's) registered:
    a provisioning worker takes every cloud's queue, by name, then the plain one."""
    return {
        "schedule": (SCHEDULE_QUEUE,),
        "provision": (*(provision_queue(c) for c in sorted(set(clouds))), PROVISION_QUEUE),
        "autoscale": (AUTOSCALE_QUEUE,),
    }
