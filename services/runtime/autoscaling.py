"""The autoscaling worker's step: run each cluster's decision and carry it out.

One tick of a cluster (:func:`tick_cluster`), safe with any number of autoscaling workers:

1. **Claim** a short per-cluster lock, so two workers rarely tick the same cluster at once
   (correctness does not rest on it: the commit below is a compare-and-set).
2. **Catch up** on what an earlier tick committed but may not have carried out (its worker
   died): nodes committed without a launch request are submitted, nodes marked for
   termination whose request still runs are cancelled again.
3. **Observe** every node: its launch request and instance give the state; its agent's
   heartbeat ``activity`` gives busy or idle (``idle_s`` counts from the last tick it was seen
   busy). A node whose request FAILED for capacity or quota cools its type down.
4. **Decide** with :func:`corral.shared.autoscaler.decide` (the standing demand is the
   cluster's requested resources); the head is launched when the cluster has none.
5. **Commit** the plan, with request ids derived from (cluster, record version, index), by a
   compare-and-set on the cluster record; a lost race starts over from 3.
6. **Execute**: submit one launch request per new node (through the normal provisioning chain)
   and cancel the requests of the nodes to terminate. A retried tick that commits the same
   plan reuses the same ids, and creating an existing request is a no-op: nothing launches twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from corral.services.providers.base import node_work_of
from corral.services.providers.registry import cluster_files
from corral.services.runtime import cluster_nodes, cluster_stops, requests
from corral.services.runtime.deps import Deps, new_id
from corral.services.runtime.typed_task import parse
from corral.services.state.clusters import (
    DECISIONS_KEPT,
    ClusterNode,
    ClusterRecord,
    ClusterStore,
    NodeKind,
)
from corral.shared.autoscaler import ClusterSpec, Demand, Node, launch_config, resolve_cluster
from corral.shared.autoscaler.launcher import CLUSTER_LABEL
from corral.shared.autoscaler.ray_report import RayNode
from corral.shared.config.cluster import Cluster
from corral.shared.config.task import Task
from corral.shared.lifecycle import TERMINAL_REQUEST_STATES, InstanceState, RequestState
from corral.shared.records import LaunchRequest

log = logging.getLogger("corral.autoscaling")

LABEL_CLUSTER = CLUSTER_LABEL
LABEL_NODE_TYPE = "corral-node-type"
LABEL_NODE_KIND = "corral-node-kind"
LABEL_LAUNCH_HASH = "corral-launch-hash"
# Attempt outcomes that say the type is sold out where it may run ("blocked": an earlier
# capacity error there is still remembered).
SOLD_OUT_OUTCOMES = frozenset({"capacity", "quota", "blocked"})
RACE_RETRIES = 20  # recomputations after losing the commit to another writer
RESEND_TERMINATE_S = 10.0  # a node still running this long after its cancel is cancelled again
# A node's request still PENDING (never admitted) this long after it was written: the submitter
# may have died between storing it and publishing its admission, which is handed on again
# (admission is idempotent). Reconcile's sweep would, but only after the attempt deadline + 30 s.
RESEND_ADMIT_S = 10.0
BUSY_ACTIVITIES = frozenset({"setup", "running"})  # the agent's activities that are not idle
PENDING_REQUEST_STATES = frozenset(
    {RequestState.PENDING, RequestState.PROVISIONING, RequestState.WAITING, RequestState.PREEMPTED}
)


def clusters(deps: Deps) -> ClusterStore:
    """The cluster records of this installation."""
    return ClusterStore(deps.redis, prefix=deps.settings.prefix)


# ---------------------------------------------------------------------------------- the spec
@lru_cache(maxsize=64)
def _resolved(uid: str, cluster_json: str, cloud: str, local_file: str) -> ClusterSpec:
    from corral.services.settings import installed_catalog
    from corral.shared.config.localcloud import load_local_cloud

    cluster = Cluster.model_validate(json.loads(cluster_json))
    stand_in = cluster_files(cloud).stand_in(lambda: load_local_cloud(local_file))
    return resolve_cluster(cluster, installed_catalog(), stand_in).spec


def cluster_spec(deps: Deps, rec: ClusterRecord) -> ClusterSpec:
    """The autoscaler's view of the cluster's file (resolved once per cluster and process)."""
    text = json.dumps(rec.cluster, sort_keys=True)
    return _resolved(rec.uid, text, record_cloud(rec), str(deps.settings.local_cloud_file))


def record_cloud(rec: ClusterRecord) -> str:
    """The cloud the cluster runs on: ``--cloud``'s, else its file's provider's (a record
    stored before the cloud was always written holds None for the latter)."""
    return (rec.cloud or str(rec.cluster.get("provider", {}).get("type", ""))).lower()


def node_task(
    deps: Deps, rec: ClusterRecord, node: ClusterNode, head_ip: str | None = None
) -> Task:
    """The launch request's task of one node: a service (no ``run``) pinned to the node type's
    cloud and instance type, running Ray's launcher steps (:mod:`.cluster_nodes`)."""
    cluster = Cluster.model_validate(rec.cluster)
    spec = cluster_spec(deps, rec).node_types[node.node_type]
    config = launch_config(cluster, node.node_type, head=node.kind == "head")
    setup, launcher_envs = cluster_nodes.launch_script(rec, node, head_ip)
    cloud = record_cloud(rec)
    labels = {
        LABEL_CLUSTER: rec.name,
        LABEL_NODE_TYPE: node.node_type,
        LABEL_NODE_KIND: node.kind,
        LABEL_LAUNCH_HASH: node.launch_hash,
    }
    rules = cluster_files(cloud)
    resources, node_config = rules.node_launch(
        cluster, config.node_config, labels, spec.instance_type
    )
    return parse(
        {
            "name": f"{rec.name}-{node.node_type}",
            "resources": {"cloud": cloud, **resources},
            # The node type's node_config goes to the cloud as written (a pod on Kubernetes;
            # none where another cloud plays the file): the cloud's ClusterFiles say.
            "advanced_instance_config": node_config,
            "setup": setup,
            "envs": {
                "CORRAL_CLUSTER": rec.name,
                "CORRAL_NODE_TYPE": node.node_type,
                **launcher_envs,
            },
            "labels": labels,
            # A sold-out node type fails its node at once: the autoscaler cools the type down
            # and picks another, as Ray's does; a node request waiting for capacity would
            # hold its place in the cluster instead.
            "retry_until_up": False,
        }
    )


def is_ray(rec: ClusterRecord) -> bool:
    """Whether the cluster's nodes start Ray (its file has start commands)."""
    from corral.shared.autoscaler.launcher import runs_ray

    return runs_ray(Cluster.model_validate(rec.cluster))


RayView = dict[str, RayNode]  # Ray's nodes by the Corral node id they were started with


# ---------------------------------------------------------------------------------- observing
@dataclass
class Observed:
    """One node as the autoscaler sees it now."""

    node: ClusterNode
    request: LaunchRequest | None
    state: InstanceState | None  # None: the node has ended
    activity: str | None = None  # the local agent's: setup | running | idle | exited
    running_since: float | None = None

    def as_node(self, spec: ClusterSpec, now: float, ray: RayView | None = None) -> Node:
        """The decision core's row for this node. On a Ray cluster whose head reports
        (``ray``), Ray says what runs on the node and how long it has been idle; a node Ray
        does not list (yet) is neither idle nor using anything."""
        assert self.state is not None
        busy = self.activity == "running"
        type_spec = spec.node_types.get(self.node.node_type)
        used = dict(type_spec.resources) if busy and type_spec else {}
        idle_s = self.idle_s(now)
        if ray is not None:
            ray_node = ray.get(self.node.request_id)
            used = ray_node.used() if ray_node is not None else {}
            idle = ray_node is not None and ray_node.is_idle() and self.activity == "idle"
            idle_s = ray_node.idle_s if idle and ray_node is not None else 0.0
        return Node(
            id=self.node.request_id,
            node_type=self.node.node_type,
            state=self.state,
            idle_s=idle_s,
            used=used,
            kind=self.node.kind,
            launch_hash=self.node.launch_hash,
        )

    def idle_s(self, now: float) -> float:
        """How long the node has been idle: 0 while busy, starting or of unknown activity (a
        node without an agent's word is never taken for idle)."""
        if self.state is not InstanceState.RUNNING or self.activity != "idle":
            return 0.0
        since = max(self.node.last_busy_at or 0.0, self.running_since or 0.0)
        return max(0.0, now - since) if since else 0.0


def _request_state(deps: Deps, req: LaunchRequest) -> tuple[InstanceState, str | None, float]:
    """(state, activity, running since) of a node whose request is alive."""
    if req.state != RequestState.RUNNING:
        return InstanceState.REQUESTED, None, 0.0
    running = [
        i for i in deps.store.list_instances(request_id=req.id) if i.state is InstanceState.RUNNING
    ]
    if not running:
        return InstanceState.REQUESTED, None, 0.0  # being relaunched
    inst = running[-1]
    since = next(
        (t.at for t in reversed(inst.history) if t.to_state == InstanceState.RUNNING.value),
        inst.updated_at,
    )
    return InstanceState.RUNNING, _activity(deps, inst.cloud, inst.provider_id), since


def _report(deps: Deps, cloud: str, provider_id: str | None) -> dict[str, Any] | None:
    """The node's agent's last heartbeat (None when silent, or on a cloud without agents)."""
    agents = node_work_of(deps.provider(cloud)) if provider_id else None
    return agents.report(provider_id) if agents is not None and provider_id else None


def _activity(deps: Deps, cloud: str, provider_id: str | None) -> str | None:
    """The node's agent's last reported activity (None without a word from one)."""
    beat = _report(deps, cloud, provider_id)
    activity = beat.get("activity") if beat else None
    return str(activity) if activity else None


def queued_work(deps: Deps, rec: ClusterRecord) -> Demand:
    """The work the cluster's nodes report queued (their agents' heartbeats), as one pending
    demand packed against the free capacity, as Ray's pending tasks are."""
    bundles: list[Any] = []
    groups: list[Any] = []
    for node in rec.live_nodes():
        req = deps.store.get_request(node.request_id)
        if req is None or req.state != RequestState.RUNNING:
            continue
        for inst in deps.store.list_instances(request_id=req.id):
            if inst.state is not InstanceState.RUNNING:
                continue
            beat = _report(deps, inst.cloud, inst.provider_id)
            queued = beat.get("queued") if beat else None
            if not queued:
                continue
            queued = {k: v for k, v in queued.items() if k != "ray"}  # the head's Ray report
            if not queued:
                continue
            try:
                part = Demand.model_validate(queued)
            except ValueError as exc:
                log.warning("node %s reports queued work that is not a demand: %s", inst.id, exc)
                continue
            bundles += part.bundles
            groups += part.placement_groups
    return Demand(bundles=bundles, placement_groups=groups)


def observe(deps: Deps, rec: ClusterRecord) -> list[Observed]:
    """Every live node of the cluster with its state now (stopped workers aside: they neither
    count as capacity nor as a launch in flight)."""
    out = []
    for node in rec.running_nodes():
        req = deps.store.get_request(node.request_id)
        if req is None:
            out.append(Observed(node, None, InstanceState.REQUESTED))  # committed, not submitted
        elif req.state in TERMINAL_REQUEST_STATES:
            out.append(Observed(node, req, None))
        else:
            state, activity, since = _request_state(deps, req)
            out.append(Observed(node, req, state, activity, since or None))
    return out


def sold_out(req: LaunchRequest) -> bool:
    """Whether a FAILED request failed for want of capacity (or could never be planned)."""
    if req.state != RequestState.FAILED:
        return False
    outcomes = {a.outcome for a in req.attempts}
    return not outcomes or bool(outcomes & SOLD_OUT_OUTCOMES)


def node_rows(deps: Deps, rec: ClusterRecord) -> list[dict[str, Any]]:
    """``cluster status``'s NODES rows: ``{id, node_type, kind, state, idle_s, used}``."""
    spec, now = cluster_spec(deps, rec), deps.now()
    report = cluster_nodes.head_report(deps, rec) if is_ray(rec) else None
    ray = report.by_instance() if report is not None else ({} if is_ray(rec) else None)
    rows = []
    for seen in observe(deps, rec):
        if seen.state is None:
            continue
        node = seen.as_node(spec, now, ray)
        row = node.model_dump(mode="json", exclude={"launch_hash"})
        if seen.node.terminate_sent_at is not None:
            row["state"] = InstanceState.TERMINATING.value
        row["idle_s"] = round(node.idle_s, 1)
        rows.append(row)
    for stopped in rec.stopped_nodes():
        rows.append(
            {
                "id": stopped.request_id,
                "node_type": stopped.node_type,
                "state": InstanceState.STOPPED.value,
                "idle_s": 0.0,
                "used": {},
                "kind": stopped.kind,
            }
        )
    return rows


# ---------------------------------------------------------------------------------- the tick
def tick(deps: Deps) -> dict[str, Any]:
    """Beat's step: every cluster's tick, and a snapshot of the runtime's demand in Redis."""
    results: dict[str, Any] = {}
    for name in clusters(deps).names():
        try:
            results[name] = tick_cluster(deps, name)
        except Exception:  # one broken cluster must not stop the others
            log.exception("autoscaling tick of cluster %s failed", name)
            results[name] = "error"
    snapshot = _snapshot(deps)
    return {**snapshot, "clusters": results}


def _snapshot(deps: Deps) -> dict[str, int]:
    pending = deps.store.count_requests(RequestState.PENDING)
    provisioning = deps.store.count_requests(RequestState.PROVISIONING)
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


def tick_cluster(deps: Deps, name: str) -> str:
    """One tick of cluster ``name`` (see the module docstring); returns what it did."""
    owner, key = new_id("tick"), f"autoscale:{name}"
    ttl_s = max(deps.settings.timers.claim_ttl_s, 5.0)
    if not deps.store.claim(key, owner, ttl_s):
        return "skipped: another worker is ticking it"
    try:
        return _tick(deps, name)
    finally:
        deps.store.release(key, owner)


def _tick(deps: Deps, name: str) -> str:
    store = clusters(deps)
    for _ in range(RACE_RETRIES):
        rec = store.get(name)
        if rec is None:
            return "gone"
        if rec.state == "down":
            return wind_down(deps, rec)
        catch_up(deps, rec)
        decided = decide_full(deps, rec)
        if store.write(decided.record, rec.version) == 1:
            execute(deps, decided.record, decided.launched, decided.terminated, decided.stops)
            said = f"launched {len(decided.launched)}, terminating {len(decided.terminated)}"
            if decided.stops.stop or decided.stops.start:
                said += f", stopping {len(decided.stops.stop)}"
                said += f", starting {len(decided.stops.start)}"
            return said
    return "raced: another writer kept changing the cluster"


@dataclass
class Decided:
    """One tick's decision as committed: the record, the new nodes, the nodes to terminate,
    and what it does to stopped workers (cache_stopped_nodes)."""

    record: ClusterRecord
    launched: list[ClusterNode]
    terminated: list[str]
    stops: cluster_stops.Changes


def decide_once(
    deps: Deps, rec: ClusterRecord
) -> tuple[ClusterRecord, list[ClusterNode], list[str]]:
    """The next version of the record: nodes updated from what was observed, the decision,
    the new nodes (with their deterministic request ids) and the nodes to terminate (stopped
    ones included)."""
    decided = decide_full(deps, rec)
    gone = decided.terminated + decided.stops.terminate
    return decided.record, decided.launched, gone


def decide_full(deps: Deps, rec: ClusterRecord) -> Decided:
    """:func:`decide_once` with what the decision does to stopped workers."""
    from corral.shared.autoscaler import decide

    now, cooldown_s = deps.now(), deps.settings.timers.autoscale_cooldown_s
    spec = cluster_spec(deps, rec)
    new = rec.model_copy(deep=True)
    new.updated_at = now
    new.cooldowns = {t: until for t, until in new.cooldowns.items() if until > now}
    nodes: list[Node] = []
    report = cluster_nodes.head_report(deps, rec) if is_ray(rec) else None
    ray = report.by_instance() if report is not None else ({} if is_ray(rec) else None)
    for seen in observe(deps, rec):
        mine = new.nodes[seen.node.request_id]
        if seen.state is None:
            assert seen.request is not None
            mine.ended = f"request {seen.request.state.value}"
            if seen.request.state == RequestState.FAILED:
                mine.failure = cluster_nodes.failure_of(deps, mine.request_id)
            if sold_out(seen.request):
                until = seen.request.updated_at + cooldown_s
                if until > now:
                    new.cooldowns[mine.node_type] = max(until, new.cooldowns.get(mine.node_type, 0))
            continue
        if seen.activity in BUSY_ACTIVITIES:
            mine.last_busy_at = now
        if mine.terminate_sent_at is not None:
            continue  # leaving: neither capacity nor a node to decide on
        nodes.append(seen.as_node(spec, now, ray))
    demand = Demand.model_validate(rec.demand) if rec.demand else None
    queued = queued_work(deps, rec)
    if report is not None:
        # Ray's own demand: pending tasks and actors, placement groups, request_resources.
        from_ray = report.queued()
        queued = Demand(
            bundles=[*queued.bundles, *from_ray.bundles],
            placement_groups=[*queued.placement_groups, *from_ray.placement_groups],
        )
        asked = report.requested()
        if asked.bundles:
            base = demand.bundles if demand is not None else []
            placement = demand.placement_groups if demand is not None else []
            demand = Demand(bundles=[*base, *asked.bundles], placement_groups=placement)
    plan = decide(spec, nodes, queued, now=now, cooldowns=new.cooldowns, requested=demand)
    # cache_stopped_nodes: stopped workers are started again before new ones are launched, and
    # the workers removed are stopped rather than terminated.
    rule = cluster_stops.policy(deps, rec, record_cloud(rec))
    ready = cluster_stops.settle(deps, new)
    up = {n.id for n in nodes if n.state is InstanceState.RUNNING}
    launch, stops = cluster_stops.decide(
        new, spec, rule, ready, dict(plan.launch), list(plan.terminate), up, now
    )
    launches = list(launch.items())
    reasons = list(plan.reasons) + stops.reasons
    terminated = [n for n in plan.terminate if n not in stops.stop]
    # A head that cannot be launched now (its type cooled down) is not retried every tick.
    head_needed = not any(n.kind == "head" for n in nodes) and (
        spec.head_node_type not in new.cooldowns
    )
    if head_needed:
        reasons.insert(0, f"launch the head ({spec.head_node_type}): the cluster has none")
    launched = _new_nodes(new, spec, launches, now, head_needed)
    launch_counts = Counter(n.node_type for n in launched)
    new.last_decision = {
        "launch": {t: launch_counts[t] for t in spec.node_types if launch_counts[t]},
        "terminate": terminated + stops.terminate,
        "stop": list(stops.stop),
        "start": list(stops.start),
        "reasons": reasons,
        "in_flight_cap": plan.in_flight_cap,
        "at": now,
        "version": rec.version + 1,
    }
    if launched or plan.terminate or stops.start or stops.terminate:
        new.decisions = [*new.decisions, new.last_decision][-DECISIONS_KEPT:]
    _forget_old_ended(new)
    return Decided(new, launched, terminated, stops)


ENDED_NODES_KEPT = 200  # ended nodes kept in the record (for status); older ones are dropped


def _forget_old_ended(rec: ClusterRecord) -> None:
    """Keep the record from growing without bound: only the newest ended nodes stay."""
    ended = sorted((n for n in rec.nodes.values() if n.ended), key=lambda n: n.committed_at)
    for node in ended[: max(0, len(ended) - ENDED_NODES_KEPT)]:
        del rec.nodes[node.request_id]


def _new_nodes(
    new: ClusterRecord,
    spec: ClusterSpec,
    launches: list[tuple[str, int]],
    now: float,
    head_needed: bool,
) -> list[ClusterNode]:
    """Add the launches (and the head, first, when needed) to the record as nodes; ids from
    (cluster, version, index), so a retried commit of the same plan names the same requests."""
    out: list[ClusterNode] = []
    version = new.version + 1
    kinds: list[tuple[str, NodeKind]] = [(spec.head_node_type, "head")] if head_needed else []
    kinds += [(t, "worker") for t, count in launches for _ in range(count)]
    for node_type, kind in kinds:
        node = ClusterNode(
            request_id=f"c-{new.name}-{new.uid}-v{version}-{len(out)}",
            node_type=node_type,
            kind=kind,
            launch_hash=spec.node_types[node_type].launch_hash,
            committed_at=now,
        )
        new.nodes[node.request_id] = node
        out.append(node)
    return out


# ---------------------------------------------------------------------------------- execution
def execute(
    deps: Deps,
    rec: ClusterRecord,
    launched: list[ClusterNode],
    terminated: list[str],
    stops: cluster_stops.Changes | None = None,
) -> None:
    """Carry out a committed decision: start stopped workers again, submit the new nodes,
    cancel the leaving ones, stop the ones cached (a worker the cloud would not start again
    is terminated: a later tick launches a new one in its place)."""
    stops = stops or cluster_stops.Changes()
    for node_id in stops.start:
        if not cluster_stops.start_node(deps, node_id):
            cancel_node(deps, node_id)
    for node in launched:
        submit_node(deps, rec, node)
    for node_id in [*terminated, *stops.terminate]:
        cancel_node(deps, node_id)
    for node_id in stops.stop:
        cluster_stops.stop_node(deps, node_id)


def submit_node(deps: Deps, rec: ClusterRecord, node: ClusterNode) -> None:
    """Submit the node's launch request (a no-op if it exists). A node that can never be
    planned here ends at once and cools its type down."""
    if deps.store.get_request(node.request_id) is not None:
        return
    head_ip = None
    if node.kind == "worker" and is_ray(rec):
        # A Ray worker joins the head at RAY_HEAD_IP: it waits (committed, counted as
        # pending) until the head's Ray reports; a later tick's catch-up submits it.
        report = cluster_nodes.head_report(deps, rec)
        if report is None or not report.head_ip:
            return
        head_ip = report.head_ip
    try:
        requests.submit(deps, node_task(deps, rec, node, head_ip), request_id=node.request_id)
    except requests.Impossible as exc:
        _end_unlaunchable(deps, rec.name, node, "; ".join(exc.reasons))
        return
    # A slow tick may submit after the cluster went down (and was forgotten): nothing would
    # ever cancel this node then, so look again and cancel it ourselves.
    now_rec = clusters(deps).get(rec.name)
    if now_rec is None or now_rec.uid != rec.uid or now_rec.state == "down":
        cancel_node(deps, node.request_id)


def _end_unlaunchable(deps: Deps, name: str, node: ClusterNode, why: str) -> None:
    now = deps.now()
    until = now + deps.settings.timers.autoscale_cooldown_s

    def end(r: ClusterRecord) -> bool:
        mine = r.nodes.get(node.request_id)
        if mine is None or mine.ended is not None:
            return False
        mine.ended = f"cannot be launched: {why}"
        r.cooldowns[node.node_type] = max(until, r.cooldowns.get(node.node_type, 0))
        return True

    clusters(deps).update(name, end)


def cancel_node(deps: Deps, request_id: str) -> None:
    """Terminate one node: cancel its launch request (a node never submitted has nothing)."""
    with contextlib.suppress(requests.RequestNotFound):  # never submitted: nothing runs
        requests.cancel(deps, request_id)


def catch_up(deps: Deps, rec: ClusterRecord) -> None:
    """Carry out what an earlier, interrupted tick committed: submit committed nodes that have
    no request yet, admit again those whose request was stored but never admitted, cancel
    again leaving nodes whose cancel has not taken effect."""
    now = deps.now()
    for node in rec.live_nodes():
        sent = node.terminate_sent_at
        req = deps.store.get_request(node.request_id)
        undone = cluster_stops.catch_up(deps, node, req.state, now) if req is not None else None
        if undone == "stop":
            cluster_stops.stop_node(deps, node.request_id)
        elif undone == "start":
            if not cluster_stops.start_node(deps, node.request_id):
                cancel_node(deps, node.request_id)
        elif undone == "terminate":
            cancel_node(deps, node.request_id)
        elif node.stopped_at is not None:
            continue  # stopped: nothing to submit, admit or cancel
        elif sent is None and req is None:
            submit_node(deps, rec, node)
        elif (
            sent is None
            and req is not None
            and req.state == RequestState.PENDING
            and now - req.updated_at > RESEND_ADMIT_S
        ):
            _admit_again(deps, req, now)
        elif (
            sent is not None
            and req is not None
            and not req.is_terminal
            and (now - sent > RESEND_TERMINATE_S or req.state in PENDING_REQUEST_STATES)
        ):
            cancel_node(deps, node.request_id)


def _admit_again(deps: Deps, req: LaunchRequest, now: float) -> None:
    """Hand a node's long-PENDING request to admission again, at most once per
    :data:`RESEND_ADMIT_S` (its ``updated_at`` moved with a compare-and-set first: a backlog
    of admissions already queued is not doubled at every tick)."""
    seen = req.updated_at

    def touch(r: LaunchRequest) -> bool:
        if r.state != RequestState.PENDING or r.updated_at != seen:
            return False
        r.updated_at = now
        return True

    updated = deps.store.update_request(req.id, touch)
    if updated is None or updated.updated_at != now:
        return  # admitted or changed meanwhile
    deps.store.append_event(
        req.id, f"still PENDING after {RESEND_ADMIT_S:g} s: admitted again", now
    )
    requests.admit_if_pending(deps, updated)


def wind_down(deps: Deps, rec: ClusterRecord) -> str:
    """A cluster being taken down: cancel what still runs; delete the record once every node's
    request has ended (a node committed but never submitted is given a grace period, in case
    an interrupted tick still submits it)."""
    now = deps.now()
    grace_s = max(deps.settings.timers.claim_ttl_s, 5.0) * 2
    left = 0
    for node in rec.live_nodes():
        req = deps.store.get_request(node.request_id)
        if req is None:
            left += int(now - node.committed_at < grace_s)
        elif not req.is_terminal:
            left += 1
            # The API cancelled it already; again when a launch still pends or it lingers.
            lingers = now - (rec.down_at or now) > RESEND_TERMINATE_S
            if lingers or req.state in PENDING_REQUEST_STATES:
                cancel_node(deps, node.request_id)
    if left:
        return f"taking down: {left} nodes left"
    clusters(deps).delete(rec.name, rec.version)
    return "deleted"
