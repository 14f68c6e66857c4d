"""Services with replicas (SkyServe's ``service.replicas`` / ``replica_policy``): beat's pass.

A replicated service is the user's request (replica 1) plus one launch request per further
replica (``<service id>-r<replica id>``), each an ordinary service request: it walks the task's
failover chain, relaunches after a lost machine and is probed by its node agent on its own.
One pass (:func:`tick`, beat's ``corral.provision.serve``) per service:

1. **Observe** every replica once (:func:`observe`): its request's state, and its head node
   agent's probe verdict (``ready`` in the heartbeat: True, False, or None within the
   probe's initial delay).
2. **Decide**: the count wanted (:func:`corral.shared.serve.autoscale.scale`, from the
   requests the load balancer relayed over the last minute, with ``target_qps_per_replica``;
   else ``min_replicas``), then :func:`corral.shared.serve.replicas.plan_replicas`.
3. **Write** what was seen on the service's request (``serving``: the live ids, the next id,
   the ready replicas' URLs, since when each probe fails) with one compare-and-set; the API's
   load balancer reads ``serving.ready``.
4. **Carry out** the plan: submit the new replicas' requests (an id already taken is a no-op,
   so a pass retried after a crash launches nothing twice) and cancel the retired ones.

A service whose request ended has its replicas cancelled and leaves the index. On a cloud whose
machines share one host's network (the local cloud) replica N serves on the service's port
plus N - 1, given to its run as ``CORRAL_SERVICE_PORT``.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import defaultdict
from typing import Any

from corral.services.providers.base import node_work_of
from corral.services.providers.registry import ProviderUnavailable
from corral.services.runtime import requests
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.typed_task import parse, task_of
from corral.services.state.serving import ServiceIndex
from corral.shared.config.task import Task
from corral.shared.lifecycle import TERMINAL_REQUEST_STATES, InstanceState, RequestState
from corral.shared.records import LaunchRequest, ServedReplica, Serving
from corral.shared.serve.autoscale import QPS_WINDOW_S, Scaling, scale
from corral.shared.serve.replicas import Replica, ReplicaPlan, plan_replicas
from corral.shared.serve.spec import REPLICA_ID_ENV, ServiceSpec, parse_service

log = logging.getLogger("corral.serving")

LABEL_SERVICE = "corral-service"  # on a replica's request: the service's request id
LABEL_REPLICA = "corral-replica"  # on a replica's request: its replica id
_PAUSED = frozenset({RequestState.STOPPED, RequestState.STARTING})
RESEND_CANCEL_S = 10.0  # a retired replica still up this long after its cancel: cancelled again


def replica_request_id(service_id: str, replica_id: int) -> str:
    """The launch request of a service's replica (replica 1 is the service's own)."""
    return service_id if replica_id == 1 else f"{service_id}-r{replica_id}"


def index(deps: Deps) -> ServiceIndex:
    return ServiceIndex(deps.redis, prefix=deps.settings.prefix)


def spec_of(req: LaunchRequest) -> ServiceSpec | None:
    """The request's service section when it has replicas (None: not a replicated service)."""
    # The section alone: the task was checked whole at submit, and this runs every pass.
    spec = parse_service(req.task.get("service"))
    return spec if spec is not None and spec.replicated else None


def tick(deps: Deps) -> dict[str, int]:
    """One pass over every replicated service; returns counts (for logs and tests)."""
    owner = uuid.uuid4().hex
    if not deps.store.claim("serve", owner, deps.settings.timers.claim_ttl_s):
        return {"skipped": 1}
    counts: dict[str, int] = defaultdict(int)
    with hold_claim(deps, "serve", owner):
        for service_id in index(deps).members():
            try:
                tick_service(deps, service_id, counts)
            except Exception:  # one service's trouble never stops the pass for the others
                log.exception("service %s: the pass failed", service_id)
                counts["errors"] += 1
    return dict(counts)


def tick_service(deps: Deps, service_id: str, counts: dict[str, int]) -> None:
    req = deps.store.get_request(service_id)
    spec = spec_of(req) if req is not None else None
    if req is None or spec is None:
        index(deps).remove(service_id)
        return
    serving = req.serving or Serving()
    now = deps.now()
    if req.state in TERMINAL_REQUEST_STATES:
        if not _end_replicas(deps, req, serving, now):
            index(deps).remove(service_id)  # every replica has ended: nothing left to watch
        return
    if req.state in _PAUSED:
        return
    seen = {rid: observe(deps, req, rid, serving) for rid in serving.replicas}
    # A replica being retired is out of rotation and of the plan until its request has ended.
    going = {
        r.replica_id: serving.retiring[str(r.replica_id)]
        for r, _ in seen.values()
        if str(r.replica_id) in serving.retiring and r.state != "ended"
    }
    replicas = [r for r, _ in seen.values() if r.replica_id not in going]
    qps = index(deps).requests_since(service_id, now - QPS_WINDOW_S) / QPS_WINDOW_S
    before = (
        None
        if req.serving is None
        else Scaling(serving.target, serving.above_since, serving.below_since)
    )
    scaling = scale(spec.policy, before, qps, now)
    plan = plan_replicas(spec.policy, replicas, now, next_id=serving.next_id, target=scaling.target)
    ready = [
        served
        for r, served in seen.values()
        if served is not None and r.state == "ready" and r.replica_id not in going
    ]
    failing = {
        str(r.replica_id): r.not_ready_since
        for r in replicas
        if r.state == "not_ready" and r.not_ready_since is not None
    }
    retired = {rid for rid, _ in plan.retire}
    resend = [rid for rid, sent in going.items() if now - sent >= RESEND_CANCEL_S]
    written = Serving(
        replicas=sorted(
            {r.replica_id for r in replicas if r.state != "ended"} | set(going) | set(plan.launch)
        ),
        next_id=max([serving.next_id, *(i + 1 for i in plan.launch)]),
        ready=[s for s in ready if s.replica not in retired],
        failing=failing,
        retiring={
            **{str(rid): sent for rid, sent in going.items()},
            **{str(rid): now for rid in (*retired, *resend)},
        },
        target=plan.target,
        at=now,
        qps=round(qps, 3),
        above_since=scaling.above_since,
        below_since=scaling.below_since,
    )
    if not _write(deps, req, serving, written):
        return  # another pass wrote first: it carries its own plan out
    _carry_out(deps, req, plan, counts)
    for replica_id in resend:  # a retirement whose request has not ended yet: sent again
        with contextlib.suppress(requests.RequestNotFound):
            requests.cancel(deps, replica_request_id(req.id, replica_id))


def observe(
    deps: Deps, service: LaunchRequest, replica_id: int, serving: Serving
) -> tuple[Replica, ServedReplica | None]:
    """One replica as it is now, and how the balancer reaches it when it is up."""
    pinned = replica_id == 1
    rid = replica_request_id(service.id, replica_id)
    req = service if pinned else deps.store.get_request(rid)
    if req is None or req.state in TERMINAL_REQUEST_STATES:
        return Replica(replica_id, "ended", pinned=pinned), None
    if req.state != RequestState.RUNNING:
        return Replica(replica_id, "launching", pinned=pinned), None
    head = next(
        (
            i
            for i in deps.store.list_instances(request_id=rid)
            if i.state is InstanceState.RUNNING and i.node_index == 0
        ),
        None,
    )
    task = task_of(req)
    port = task.service_port()
    if head is None or not head.address or not head.provider_id or port is None:
        return Replica(replica_id, "launching", pinned=pinned), None
    host = f"[{head.address}]" if ":" in head.address else head.address
    served = ServedReplica(
        replica=replica_id,
        request_id=rid,
        url=f"http://{host}:{port}",
        accelerator=_accelerator(req, head.instance_type),
    )
    verdict = _probe_verdict(deps, head.cloud, head.provider_id, task)
    if verdict is True:
        return Replica(replica_id, "ready", pinned=pinned), served
    if verdict is None:
        return Replica(replica_id, "starting", pinned=pinned), served
    since = serving.failing.get(str(replica_id), deps.now())
    return Replica(replica_id, "not_ready", not_ready_since=since, pinned=pinned), served


def _probe_verdict(deps: Deps, cloud: str, provider_id: str, task: Task) -> bool | None:
    """The node agent's last verdict: True (answers, or no probe), False, None (no verdict)."""
    if task.readiness_probe() is None:
        return True
    work = node_work_of(deps.provider(cloud))
    beat = work.report(provider_id) if work is not None else None
    ready = beat.get("ready") if beat else None
    return ready if isinstance(ready, bool) else None


def _accelerator(req: LaunchRequest, instance_type: str) -> str | None:
    """The accelerator of the chain step the replica runs on (instance_aware_least_load)."""
    for step in req.chain:
        if step.instance_type == instance_type and step.accelerators:
            return next(iter(step.accelerators))
    return None


def _write(deps: Deps, req: LaunchRequest, seen: Serving, written: Serving) -> bool:
    """Store what the pass saw, if the service's record still holds what it read."""
    before = seen.model_dump()

    def put(r: LaunchRequest) -> bool:
        if (r.serving or Serving()).model_dump() != before:
            raise _Moved
        if r.serving is not None and r.serving.model_dump() == written.model_dump():
            return False
        r.serving = written
        return True

    try:
        deps.store.update_request(req.id, put, current=req)
    except _Moved:
        return False
    return True


class _Moved(Exception):
    """The service's record changed under the pass (another pass, a newer look)."""


def _carry_out(deps: Deps, req: LaunchRequest, plan: ReplicaPlan, counts: dict[str, int]) -> None:
    for replica_id, why in plan.retire:
        rid = replica_request_id(req.id, replica_id)
        deps.store.append_event(req.id, f"replica {replica_id} retired: {why}", deps.now())
        with contextlib.suppress(requests.RequestNotFound):
            requests.cancel(deps, rid)
        counts["retired"] += 1
    for replica_id in plan.launch:
        launch_replica(deps, req, replica_id)
        counts["launched"] += 1


def replica_task(deps: Deps, service: LaunchRequest, replica_id: int) -> Task:
    """A replica's task: the service's, as one plain service (its probe, its port), labelled
    with the service and its replica id, SkyServe's ``SKYPILOT_SERVE_REPLICA_ID`` in its envs."""
    task: dict[str, Any] = {k: v for k, v in service.task.items() if k != "service"}
    section = service.task.get("service") or {}
    parent = task_of(service)
    port = parent.service_port()
    if port is not None and _shares_network(deps, service):
        port += replica_id - 1
    task["service"] = {k: v for k, v in section.items() if k == "readiness_probe"}
    if port is not None:
        task["resources"] = {**task.get("resources", {}), "ports": port}
    task["envs"] = {**task.get("envs", {}), REPLICA_ID_ENV: str(replica_id)}
    task["labels"] = {
        **task.get("labels", {}),
        LABEL_SERVICE: service.id,
        LABEL_REPLICA: str(replica_id),
    }
    task["name"] = f"{service.task.get('name') or 'service'}-replica-{replica_id}"
    return parse(task)


def _shares_network(deps: Deps, service: LaunchRequest) -> bool:
    """Whether the service's cloud runs its machines on one host's network (the local
    cloud), read from the cloud of its first planned step."""
    cloud = requests.first_cloud(service)
    if cloud is None:
        return False
    try:
        return deps.provider(cloud).features.shared_network
    except ProviderUnavailable:  # not enabled here: its replicas fail over as the service does
        return False


def launch_replica(deps: Deps, service: LaunchRequest, replica_id: int) -> LaunchRequest:
    """Submit a replica's launch request (an id already taken: the request it holds)."""
    rid = replica_request_id(service.id, replica_id)
    owner = requests.Owner(user=service.user, project=service.project, admin=True)
    made = requests.submit(
        deps, replica_task(deps, service, replica_id), request_id=rid, owner=owner
    )
    deps.store.append_event(service.id, f"replica {replica_id} launched: {rid}", deps.now())
    return made


def _end_replicas(deps: Deps, service: LaunchRequest, serving: Serving, now: float) -> bool:
    """Cancel every replica of an ended service (again after ``RESEND_CANCEL_S`` while one has
    not ended); True while some has not ended yet."""
    live: dict[int, float] = {}
    for replica_id in serving.replicas:
        req = deps.store.get_request(replica_request_id(service.id, replica_id))
        if replica_id == 1 or req is None or req.state in TERMINAL_REQUEST_STATES:
            continue
        sent = serving.retiring.get(str(replica_id))
        if sent is None or now - sent >= RESEND_CANCEL_S:
            requests.cancel(deps, req.id)
            sent = now
        live[replica_id] = sent
    after = serving.model_copy(
        update={"replicas": [1, *live], "retiring": {str(k): v for k, v in live.items()}}
    )
    _write(deps, service, serving, after)
    return bool(live)
