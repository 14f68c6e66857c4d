"""Admission and zone attempts: plan a request's chain, try one candidate per attempt,
record every attempt, remember failed scopes, and never launch twice.

An attempt makes the cloud call, records its instances REQUESTED and returns: the boot watch
(:mod:`.boots`) sees them up (:func:`booted_all`) or not (:func:`boot_failed`), and the request
moves on from there, RUNNING or down its chain.

Each public function here is one Celery task's body (workers/ wraps them). Every one is
idempotent: run twice with the same arguments (a redelivered message), it does the work once.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from corral.services.agent import skypilot_env
from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_REQUEST,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.providers.registry import display_name
from corral.services.runtime import quotas
from corral.services.runtime.attempt_record import (
    attempt_id_for,
    attempt_line,
    blocked_reason,
    end_attempt,
    fail_request,
    finish_attempt,
    record_attempt,
    remember,
)
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.failover import (
    Walked,
    after_failure,
    capacity_freed,
    resume,
    send_attempt,
    walk,
)
from corral.services.runtime.launch import LaunchDeferred, boot_error, by_node, finish, start
from corral.services.runtime.planning import clouds_left_out, left_out_text, plan_launch
from corral.services.runtime.pooled import passes
from corral.services.runtime.termination import release_instances
from corral.services.runtime.typed_task import task_of
from corral.services.state.boots import Boot
from corral.services.state.bundles import scope_of
from corral.services.state.store import Together
from corral.shared.autoscaler.launcher import CLUSTER_LABEL
from corral.shared.blocking import Placed, is_blocked
from corral.shared.bundles import node_copied
from corral.shared.config.task import Task
from corral.shared.errors import ProviderError, Scope, ThrottledError
from corral.shared.failover import Within
from corral.shared.images import image_for_region
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.observe import Seen, observe
from corral.shared.ports import parse_ports
from corral.shared.readiness import PROBE_ENV
from corral.shared.records import ChainStep, Instance, LaunchRequest
from corral.shared.retry import retry_pause
from corral.shared.routing import DeterminedRoute, Direct, MachinePoolRoute
from corral.shared.serve.spec import REPLICA_ID_ENV, SERVICE_PORT_ENV

log = logging.getLogger("corral.provisioning")

JOB_EXITED_0 = "the job's run exited 0"


class RetryLater(Exception):
    """Run this step again after ``countdown_s`` with ``try_no`` (the Celery task retries);
    ``step``: the chain position to retry (an attempt task may have walked on to another
    zone of its cloud before it had to wait)."""

    def __init__(self, countdown_s: float, try_no: int, step: int | None = None) -> None:
        super().__init__(f"retry in {countdown_s:.1f}s")
        self.countdown_s = countdown_s
        self.try_no = try_no
        self.step = step


# ----------------------------------------------------------------------------------------------
# Admission (scheduling worker)


def admit(deps: Deps, request_id: str, cloud: str | None = None) -> str:
    """Plan the chain of a PENDING request and start its first attempt. With ``cloud`` (the
    task came on that cloud's provisioning queue), a first attempt on that cloud is run here,
    in the same task, instead of being published: one broker message per launch, not two."""
    remembered = None
    if cloud is None:
        req = deps.store.get_request(request_id)
    else:  # a direct request with its chain: its walk needs the blocks, read with it
        req, raw_blocks = deps.store.get_request_beside(request_id, deps.blocks.key)
        remembered = deps.blocks.active_in(raw_blocks, deps.now())
    if req is None:
        return "missing"
    if req.state == RequestState.PENDING and (refused := quotas.refusal_for(deps, req)):
        quotas.refuse(deps, request_id, refused)
        return "over quota"
    match req.route:
        case MachinePoolRoute() | DeterminedRoute():
            if req.is_terminal:
                return f"nothing to do ({req.state})"
            return passes.enqueue(deps, req)
        case Direct():
            pass
    if req.state == RequestState.PROVISIONING:
        resume(deps, req)  # a redelivery after a crash between commit and dispatch
        return "redispatched"
    if req.state != RequestState.PENDING:
        return f"nothing to do ({req.state})"
    now = deps.now()
    task = TypedTask().of(req)  # handed to the attempt run here: parsed once
    left_out = clouds_left_out(deps, task)
    # The chain planned at submit; planned here only for a request stored without one.
    chain = list(req.chain)
    planned = None if chain else plan_launch(deps, task)
    if planned is not None:
        chain = [ChainStep.of(c) for c in planned.candidates]
    if not chain:
        reason = "; ".join(planned.reasons if planned else ()) or "no launchable candidate"
        # Name the clouds that were not tried and why, so "no offering on local" is not read
        # as "no offering anywhere".
        reason += f" ({left_out_text(left_out)})" if left_out else ""
        fail_request(
            deps,
            request_id,
            f"nothing can be launched now: {reason}",
            expected={RequestState.PENDING},
        )
        return "failed"
    for cloud, why in left_out.items():  # only clouds the task could have used
        deps.store.append_event(request_id, f"notice: {cloud} is left out of the chain: {why}", now)
    # The chain, PROVISIONING, the first step and (run here) its attempt, in one write.
    walked = walk(deps, request_id, -1, Within.ANY, chain=chain, inline=cloud, current=req,
                  remembered=remembered)  # fmt: skip
    if walked.run_here is None:
        return walked.outcome
    step = walked.run_here
    try:
        return attempt(
            deps, request_id, step, carried=walked.written, task=task, claimed=walked.claimed
        )
    except RetryLater as later:  # the attempt waits its turn on its queue, as a retry would
        moved = deps.store.get_request(request_id)
        if moved is not None:
            at = step if later.step is None else later.step
            send_attempt(deps, moved, at, later.try_no, countdown=later.countdown_s)
        return "attempt deferred"


# ----------------------------------------------------------------------------------------------
# One zone attempt (provisioning worker)


def instance_id_for(attempt_id: str, node: int) -> str:
    """Corral's id of node ``node`` of an attempt: the same on every redelivery."""
    digest = hashlib.sha1(f"{attempt_id}/{node}".encode()).hexdigest()[:10]
    return f"i-{digest}"


def attempt(
    deps: Deps,
    request_id: str,
    step: int,
    try_no: int = 0,
    carried: LaunchRequest | None = None,
    task: Task | None = None,
    claimed: str | None = None,
) -> str:
    """Try candidate ``step`` of the request's chain; on failure, walk on to the next one. A
    next candidate on the same cloud is tried in this task (a refused call costs no broker
    message), up to ``INLINE_ATTEMPTS`` zones; one on another cloud is published on its
    cloud's queue. ``carried``: the request as the caller's walk just wrote it, with this
    attempt recorded (:func:`failover.walk`), so it is not read again. ``task``: the
    request's task as the caller parsed it (else it is parsed here, once for every zone this
    task tries). ``claimed``: the owner under which that write took the attempt's claim
    (else it is taken here)."""
    typed = TypedTask(task)
    for _ in range(INLINE_ATTEMPTS):
        try:
            walked = _attempt_once(deps, request_id, step, try_no, carried, typed, claimed)
        except RetryLater as later:
            later.step = step  # the zone this task had reached
            raise
        if walked.run_here is None:
            return walked.outcome
        step, try_no, carried, claimed = walked.run_here, 0, walked.written, walked.claimed
    req = deps.store.get_request(request_id)
    if req is not None:  # a long run of refusals: the rest waits its turn on the queue
        if claimed is not None:  # its task takes the claim the last walk took for this one
            deps.store.release(f"attempt:{attempt_id_for(req, step, 0)}", claimed)
        send_attempt(deps, req, step)
    return "failed over"


INLINE_ATTEMPTS = 16  # zones one attempt task tries before it hands the rest to the queue


class TypedTask:
    """A request's task, typed once per task run (an admission hands over the one it holds;
    the zones one attempt task walks share it): :func:`~.typed_task.task_of`, which parses the
    stored form only when this process holds no typed task for it."""

    __slots__ = ("_task",)

    def __init__(self, task: Task | None = None) -> None:
        self._task = task

    def of(self, req: LaunchRequest) -> Task:
        if self._task is None:
            self._task = task_of(req)
        return self._task


def _attempt_once(
    deps: Deps,
    request_id: str,
    step: int,
    try_no: int,
    held: LaunchRequest | None,
    typed: TypedTask,
    claimed: str | None = None,
) -> Walked:
    """``claimed``: the owner under which the write that left ``held`` took this attempt's
    claim (:func:`failover.walk`)."""
    req = held if held is not None else deps.store.get_request(request_id)
    if req is None or req.state != RequestState.PROVISIONING or req.next_step != step:
        return STALE  # already moved on: a duplicate delivery (a claim taken lapses)
    attempt_id = attempt_id_for(req, step, try_no)
    key = f"attempt:{attempt_id}"
    if claimed is not None and held is not None:
        owner = claimed  # taken by the write that started the attempt
    else:
        owner = uuid.uuid4().hex
        if not deps.store.claim(key, owner, deps.settings.timers.claim_ttl_s):
            # Another delivery is running this attempt, or died holding it: its claim lapses
            # within claim_ttl_s, because a live holder keeps renewing it.
            raise RetryLater(1.0, try_no)
    with hold_claim(deps, key, owner) as claim:
        # A record this task's walk just wrote, this attempt started in it, is current enough:
        # whoever moves the request on meanwhile (a cancel) is seen by the attempt's next
        # compare-and-set, which lets its machines go. Else: read it as it is now that no one
        # else runs the attempt.
        fresh = _started_in(held, attempt_id)
        if not fresh:
            req = deps.store.get_request(request_id)
            if req is None or req.state != RequestState.PROVISIONING or req.next_step != step:
                return STALE
        inline = req.chain[step].cloud
        walked = _attempt(deps, req, step, try_no, attempt_id, inline, typed, fresh=fresh)
        # Nobody waits to take this claim next, so it lapses instead of being released (a
        # release is a script of three Redis commands and a round trip): booting, its machines
        # are in the boot book and the watch finishes the attempt (a redelivery finds its boot
        # booked, after a retry of at most claim_ttl_s; reconcile leaves its machines alone as
        # long); failed, its outcome is written and the walk went on under the next attempt's
        # own claim (a redelivery finds it ended); landed, it is over. Only an attempt that
        # must run again (RetryLater, an error) releases its claim, for that run to take it.
        claim.lapse()
        return walked


STALE = Walked("stale")


def _started_in(req: LaunchRequest | None, attempt_id: str) -> bool:
    """Whether ``req`` holds attempt ``attempt_id`` started and not yet ended."""
    return req is not None and any(
        a.attempt_id == attempt_id and a.outcome is None for a in req.attempts
    )


def _attempt(
    deps: Deps,
    req: LaunchRequest,
    step: int,
    try_no: int,
    attempt_id: str,
    inline: str,
    typed: TypedTask,
    fresh: bool = False,
) -> Walked:
    """``fresh``: this task's own write started the attempt (no earlier delivery can have
    launched it: its boot is not looked up)."""
    cand = req.chain[step]
    now = deps.now()
    existing = next((a for a in req.attempts if a.attempt_id == attempt_id), None)
    if existing is not None and existing.outcome not in (None, "ok"):
        # This attempt failed before a crash; only the hand-over is left to do.
        return after_failure(deps, req, step, Scope.NONE, inline)
    if existing is None:  # recorded already: its walk checked the blocks when it chose it
        remembered = deps.blocks.active(now)
        hit = is_blocked(cand, [b.block for b in remembered])
        if hit is not None:
            why = next((b for b in remembered if b.block == hit), None)
            reason = blocked_reason(hit, why)
            record_attempt(deps, req.id, attempt_id, cand, now, outcome="blocked", error=reason)
            return after_failure(deps, req, step, Scope.NONE, inline)
        req = record_attempt(deps, req.id, attempt_id, cand, now, current=req) or req
        deps.store.append_event(req.id, attempt_line(req, step), now)
    task = typed.of(req)
    spec = _spec(req, task, cand, attempt_id, deps.settings.bundle_unpacked_max_bytes)
    # The deadline runs from the cloud call (a redelivered attempt keeps the first one).
    boot = Boot(
        kind="attempt", spec=spec, deadline=now + deps.settings.timers.attempt_deadline_s, step=step
    )

    # The instances are recorded before the boot is booked: a fresh attempt's rows are then
    # new for certain (the watch, which may finish a quick job first, sees the boot only after),
    # and the boot carries them as written, for the watch's compare-and-set to start from.
    def recorded(launched: list[ProviderInstance]) -> None:
        rows = _record_booting(deps, req.id, attempt_id, cand, launched, fresh=fresh)
        if fresh:  # else the boot may be an earlier delivery's: the watch reads the rows
            boot.rows = rows

    try:
        launched = start(deps, boot, fresh=fresh, recorded=recorded)
    except LaunchDeferred as full:
        raise RetryLater(full.wait_s, try_no) from None  # the same attempt, later
    except ThrottledError as exc:
        timers = deps.settings.timers
        finish_attempt(deps, req.id, attempt_id, "throttled", str(exc))
        pause = retry_pause(try_no, timers.throttle_retries + 1, timers.throttle_backoff_s)
        if pause is not None:
            deps.store.append_event(req.id, f"  throttled ({exc}); retrying in place", deps.now())
            raise RetryLater(pause, try_no + 1) from None
        return after_failure(deps, req, step, Scope.NONE, inline)
    except ProviderError as exc:
        return _failed(deps, req, step, attempt_id, cand, exc, inline, started_at=now)
    if len(launched) >= spec.count and all(p.state == "running" for p in launched):
        finish(deps, boot)  # up already: no need to wait for the watch
        found = by_node(launched)
        landing = _Landing(deps, req.id, step, attempt_id, cand, found, req, boot.rows)
        return Walked(landing.land())
    return BOOTING


BOOTING = Walked("booting")


def _failed(
    deps: Deps,
    req: LaunchRequest,
    step: int,
    attempt_id: str,
    cand: ChainStep,
    exc: ProviderError,
    inline: str | None = None,
    started_at: float | None = None,
) -> Walked:
    """A failed attempt: its scope remembered, its outcome written with the hand-over to the
    next candidate (one compare-and-set)."""
    started = next((a.started_at for a in req.attempts if a.attempt_id == attempt_id), started_at)
    # The blocks in force, read with the new one's write: the hand-over walks against them.
    remembered = remember(deps, cand, exc, started_at=started)
    ended = (attempt_id, exc.outcome, str(exc))
    # ``req`` is as just read or written: the hand-over's write starts from it. The failure's
    # progress line goes with the hand-over's own lines, in one command.
    return after_failure(deps, req, step, exc.scope, inline, ended=ended, current=req,
                         lines=[f"  {exc.outcome}: {exc}"], remembered=remembered)  # fmt: skip


def booted_all(
    deps: Deps,
    ups: list[tuple[Boot, list[ProviderInstance]]],
    freed: list[Placed] | None = None,
) -> list[str]:
    """The boot watch saw every machine of these attempts up: each request is RUNNING (or, if
    it moved on meanwhile, its machines are let go; ``freed``: see :func:`_let_go`). The
    records are read and written in a few round trips for all of them rather than a few for
    each (at the end of a burst, a look sees hundreds of launches up at once). One outcome
    per item, in order: "error" for one whose aftermath failed (logged; finishing it again is
    safe)."""
    reqs = {r.id: r for r in deps.store.load_requests({b.spec.request_id for b, _ in ups})}
    outcomes = ["missing"] * len(ups)
    landings: list[tuple[int, _Landing]] = []
    for n, (boot, found) in enumerate(ups):
        req = reqs.get(boot.spec.request_id)
        if req is None or not 0 <= boot.step < len(req.chain):
            continue
        cand = req.chain[boot.step]
        landing = _Landing(deps, req.id, boot.step, boot.key, cand, by_node(found), req, boot.rows)
        landings.append((n, landing))
    written = deps.store.update_together_many([land.together for _, land in landings])
    events = []
    ended: list[ProviderInstance] = []  # quick jobs' machines, let go together below
    for (n, land), result in zip(landings, written, strict=True):
        try:
            outcomes[n] = land.settle(result, freed, ended)
        except Exception:  # the others go on; the boot watch tries this one again
            log.exception("could not finish the boot of %s", land.attempt_id)
            outcomes[n] = "error"
        events.append((land.request_id, land.events))
    _terminate_ended(deps, ended)
    deps.store.append_events_many(events, deps.now())
    return outcomes


def boot_failed(deps: Deps, boot: Boot, verdict: str) -> str:
    """An attempt's machines did not all come up by the deadline, or one died on the way:
    what did come up is terminated, and the request goes down its chain as for any failed
    attempt."""
    exc = boot_error(verdict if verdict in ("lost", "silent", "unregistered") else "timeout")
    release_instances(deps, boot.spec.request_id, f"{exc.outcome}: {exc}", attempt_id=boot.key)
    req = deps.store.get_request(boot.spec.request_id)
    if req is None or not 0 <= boot.step < len(req.chain):
        return "missing"
    if req.state != RequestState.PROVISIONING or req.next_step != boot.step:
        finish_attempt(deps, req.id, boot.key, exc.outcome, str(exc))
        return "stale"
    return _failed(deps, req, boot.step, boot.key, req.chain[boot.step], exc).outcome


def _record_booting(
    deps: Deps,
    request_id: str,
    attempt_id: str,
    cand: ChainStep,
    launched: list[ProviderInstance],
    fresh: bool = False,
) -> list[Instance]:
    """The attempt's instances as the cloud accepted them: REQUESTED, on their way up; the
    rows this call created, as written.
    ``fresh``: the attempt was just started by this task's own write (no row can be there)."""
    now = deps.now()
    created = []
    for node, pi in enumerate(by_node(launched)):
        inst = _instance_of(request_id, attempt_id, cand, node, pi, now)
        if deps.store.create_instance(inst, fresh=fresh):
            created.append(inst)
    return created


def _instance_of(
    request_id: str,
    attempt_id: str,
    cand: ChainStep,
    node: int,
    pi: ProviderInstance,
    now: float,
) -> Instance:
    """Node ``node`` of an attempt as Corral records it, REQUESTED (the same id every time),
    priced as its candidate was planned."""
    return Instance.new(
        instance_id_for(attempt_id, node),
        request_id,
        node,
        now,
        f"launched by attempt {attempt_id}",
        provider_id=pi.provider_id,
        attempt_id=attempt_id,
        **pi.place.fields(),
        pid=pi.pid,
        address=pi.address,
        price_usd_per_hour=cand.price_usd_per_hour or None,
    )


def _spec(
    req: LaunchRequest, task: Task, cand: ChainStep, attempt_id: str, unpacked_max_bytes: int
) -> LaunchSpec:
    docker = image_for_region(task.resources.image_id, cand.region).docker
    return LaunchSpec(
        request_id=req.id,
        attempt_id=attempt_id,
        **cand.place.fields(),
        count=task.num_nodes,
        setup=task.setup,
        run=task.run,
        envs={**_envs(task), **_skypilot_envs(req, task, cand)},
        workdir=task.workdir if isinstance(task.workdir, str) else None,  # git: files["git"]
        image_id=image_for_region(task.resources.image_id, cand.region).machine,
        ports=parse_ports(task.resources.ports),
        files=task_files(task, docker, project=req.project, unpacked_max_bytes=unpacked_max_bytes),
        accelerators=dict(cand.accelerators),
        advanced_instance_config=_advanced_config(task, cand),
        tags={TAG_MANAGED: "true", TAG_REQUEST: req.id, TAG_ATTEMPT: attempt_id},
    )


def _envs(task: Task) -> dict[str, str]:
    """The task's envs and secrets, and a service's readiness probe for its node agent (on the
    first of its ports, on the node itself)."""
    envs = task.run_envs()
    probe = task.readiness_probe()
    port = task.service_port()
    if probe is not None and port is not None:
        envs[PROBE_ENV] = probe.for_agent(port)
    if task.service is not None and port is not None:
        envs[SERVICE_PORT_ENV] = str(port)  # a replica's own port (runtime/serving.py)
    spec = task.service_spec()
    if spec is not None and spec.replicated:
        envs.setdefault(REPLICA_ID_ENV, "1")  # the service's own request is replica 1
    return envs


def _skypilot_envs(req: LaunchRequest, task: Task, cand: ChainStep) -> dict[str, str]:
    """SkyPilot's launch-wide runtime variables (its task id and cluster info name the
    request); each node's agent adds its rank and its peers' addresses. They come after the
    task's own envs: a task cannot mistake its peers by setting them itself."""
    return skypilot_env.launch_envs(
        cluster=req.id,
        created_at=req.created_at,
        cloud=display_name(cand.cloud),
        region=cand.region,
        zone=cand.zone,
        num_nodes=task.num_nodes,
        gpus_per_node=sum(cand.accelerators.values()),
    )


def task_files(
    task: Task,
    docker: str | None = None,
    *,
    project: str | None = None,
    unpacked_max_bytes: int | None = None,
) -> dict[str, Any]:
    """What the node must put in place before setup: the bundle corral launch uploaded
    (workdir and file mounts; ``bundle_scope``, the request's project, is where it is kept,
    and the node refuses it past ``unpacked_max_bytes`` unpacked), a git workdir to clone;
    and the container image setup and run go into (``image_id: docker:<image>``)."""
    files: dict[str, Any] = {"docker": docker} if docker else {}
    if task.bundle is not None:
        files["bundle"] = task.bundle.model_dump()
        files["bundle_scope"] = scope_of(project)
        if unpacked_max_bytes is not None:
            files["unpacked_max_bytes"] = unpacked_max_bytes
    if copied := node_copied(task.file_mounts):
        files["copy"] = copied  # s3:// sources: the node copies them with its own credentials
    if task.workdir is not None and not isinstance(task.workdir, str):
        files["git"] = {"url": task.workdir.url, "ref": task.workdir.ref}
    return files


def _advanced_config(task: Task, cand: ChainStep) -> dict[str, Any]:
    """The task's own launch parameters, when it pins this candidate's cloud."""
    if task.advanced_instance_config and task.resources.cloud == cand.cloud:
        return dict(task.advanced_instance_config)
    return {}


def _instance_up(
    deps: Deps,
    request_id: str,
    attempt_id: str,
    cand: ChainStep,
    node: int,
    pi: ProviderInstance,
    now: float,
    done: bool = False,
) -> str:
    """Node ``node`` of the attempt reported in: its instance RUNNING (created if the attempt
    died before it recorded it); with ``done`` (its job's run is over already, exit code 0),
    RUNNING and TERMINATED in the same write. Returns the instance id."""
    up = _moved_up(pi, now, done)
    # Recorded REQUESTED by its attempt, as a rule: moved up; created only if it is missing.
    instance_id = instance_id_for(attempt_id, node)
    if deps.store.update_instance(instance_id, up) is not None:
        return instance_id
    inst = _instance_of(request_id, attempt_id, cand, node, pi, now)
    up(inst)  # REQUESTED as created: moved up as the stored one would be
    if not deps.store.create_instance(inst):  # created meanwhile: move that one up
        deps.store.update_instance(inst.id, up)
    return inst.id


def _moved_up(pi: ProviderInstance, now: float, done: bool) -> Callable[[Instance], bool]:
    """The change that moves a REQUESTED instance up as ``pi`` reports it (see
    :func:`_instance_up`), for a compare-and-set."""

    def up(i: Instance) -> bool:
        if i.state != InstanceState.REQUESTED:
            return False  # already up, or let go meanwhile
        i.pid = pi.pid
        i.address = pi.address or i.address
        i.move(InstanceState.RUNNING, now, "the provider reports it running")
        if done:
            i.exit_code = 0
            i.move(InstanceState.TERMINATED, now, "its job exited with code 0")
        return True

    return up


def _job_over(req: LaunchRequest, launched: list[ProviderInstance]) -> bool:
    """Whether the machines of a job, seen up for the first time, report its run over already,
    every node with exit code 0 (a quick job ends before the boot watch's first look): then
    it is RUNNING and SUCCEEDED in one write, as reconcile would have ended it a pass later.
    Anything else (a run still going, a non-zero exit that its ``job_recovery`` may restart,
    a cluster node, a service) takes the usual way, through reconcile."""
    if not req.task.get("run") or CLUSTER_LABEL in (req.task.get("labels") or {}):
        return False
    looks = [observe("running", pi) for pi in launched]
    return bool(looks) and all(o.seen == Seen.EXITED and o.exit_code == 0 for o in looks)


def _let_go(
    deps: Deps,
    req: LaunchRequest,
    launched: list[ProviderInstance],
    attempt_id: str,
    cand: ChainStep,
    freed: list[Placed] | None = None,
    ended: list[ProviderInstance] | None = None,
) -> None:
    """A job ended at its first look: its machines are let go (a cloud VM outlives the agent
    that reported the end), and whatever else of the request still runs: nothing, when no
    other attempt of it ever launched (its only instances are the ones just written ended;
    no list of them is read). ``freed`` and ``ended``: where a caller that lets several go at
    once (a boot watch's look) collects the places freed, to tell them in one go, and the
    machines, to terminate them in one call per cloud and zone; else both are done now
    (:func:`failover.capacity_freed`, :func:`_terminate_ended`)."""
    if ended is None:
        _terminate_ended(deps, launched)
    else:
        ended.extend(launched)
    if freed is None:
        capacity_freed(deps, [cand] * len(launched))
    else:
        freed.extend([cand] * len(launched))
    others = [a for a in req.attempts if a.attempt_id != attempt_id and a.outcome != "blocked"]
    if not others:
        return
    try:
        release_instances(deps, req.id, "the job ended", req=req, look_for_strays=False, frees=True)
    except ProviderError as exc:
        log.warning("could not let go of %s's machines: %s", req.id, exc)


def _terminate_ended(deps: Deps, machines: list[ProviderInstance]) -> None:
    """Terminate the machines of jobs that ended, one call per cloud and zone (a look's quick
    jobs together: the local cloud then removes their folders in one pass over its folder)."""
    by_place: dict[tuple[str, str | None], list[str]] = {}
    for pi in machines:
        by_place.setdefault((pi.cloud, pi.zone), []).append(pi.provider_id)
    for (cloud, zone), ids in by_place.items():
        try:
            deps.provider(cloud).terminate(ids, zone=zone)
        except ProviderError as exc:  # reconcile's stray cleaning ends them later
            log.warning("could not terminate %s after their jobs ended: %s", ", ".join(ids), exc)


class _Landing:
    """An attempt whose machines are all up, on its way to RUNNING: the change of its request
    and instances (:attr:`together`, one compare-and-set over all of them), then what follows
    the write (:meth:`settle`) and the progress lines it leaves (:attr:`events`)."""

    def __init__(
        self,
        deps: Deps,
        request_id: str,
        step: int,
        attempt_id: str,
        cand: ChainStep,
        launched: list[ProviderInstance],
        current: LaunchRequest | None,
        rows: Sequence[Instance] = (),
    ) -> None:
        """``current`` and ``rows``: the request and the attempt's instance rows as the caller
        holds them, for the compare-and-set to start from (a stale one is read again)."""
        self.deps, self.request_id, self.step, self.attempt_id = deps, request_id, step, attempt_id
        self.cand, self.launched = cand, launched
        self.now = now = deps.now()
        self.done = done = current is not None and _job_over(current, launched)
        self.ids = [instance_id_for(attempt_id, node) for node in range(len(launched))]
        self.events: list[str] = []
        ups = {iid: _moved_up(pi, now, done) for iid, pi in zip(self.ids, launched, strict=True)}
        held = {row.id: row for row in rows if row.id in ups}
        self.together = Together(request_id, self._run, ups, current, held or None)

    def _run(self, r: LaunchRequest) -> bool:
        ended = end_attempt(r, self.attempt_id, "ok", self.now)  # the attempt's outcome too
        if r.state != RequestState.PROVISIONING or r.next_step != self.step:
            return ended
        r.instance_ids = [*r.instance_ids, *self.ids]
        r.move(
            RequestState.RUNNING, self.now, f"{len(self.ids)} instance(s) up in {self.cand.zone}"
        )
        if self.done:
            r.exit_code = 0
            r.move(RequestState.SUCCEEDED, self.now, JOB_EXITED_0)
        return True

    def land(self) -> str:
        """This launch alone: its write, what follows it, its progress lines."""
        t = self.together
        written = self.deps.store.update_together(
            t.request_id, t.fn, t.instance_fns, current=t.current, instances=t.instances
        )
        outcome = self.settle(written, None)
        self.deps.store.append_events(self.request_id, self.events, self.deps.now())
        return outcome

    def settle(
        self,
        together: tuple[LaunchRequest, list[Instance]] | None,
        freed: list[Placed] | None,
        ended: list[ProviderInstance] | None = None,
    ) -> str:
        """After the compare-and-set (``together``: its result; None when an instance was
        missing, its attempt having died before it recorded it: then one by one, creating it
        before the request names it)."""
        deps, ids = self.deps, self.ids
        if together is not None:
            updated: LaunchRequest | None = together[0]
        else:
            for node, pi in enumerate(self.launched):
                _instance_up(
                    deps, self.request_id, self.attempt_id, self.cand, node, pi, self.now, self.done
                )
            updated = deps.store.update_request(self.request_id, self._run)
        target = RequestState.SUCCEEDED if self.done else RequestState.RUNNING
        if (
            updated is not None
            and updated.state == target
            and set(ids) <= set(updated.instance_ids)
        ):
            self.events = [f"state: RUNNING ({', '.join(ids)})"]
            self.events += [f"state: SUCCEEDED ({JOB_EXITED_0})"] * self.done
            if self.done:
                _let_go(deps, updated, self.launched, self.attempt_id, self.cand, freed, ended)
                return "ended"
            return "running"
        # Cancelled, or another attempt won, while we launched: what we got must not leak, and
        # nothing else of the request may be touched.
        release_instances(
            deps, self.request_id, "the request moved on while it launched",
            attempt_id=self.attempt_id,
        )  # fmt: skip
        return "released"
