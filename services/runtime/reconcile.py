"""Reconcile (beat): compare what the store believes with what the providers report.

- an instance whose machine is gone or silent, or that the cloud is about to reclaim (its
  agent relayed a spot interruption or preemption notice), is LOST, and its request is
  relaunched through its chain (up to ``relaunch_limit`` times; the zone is remembered as
  unreliable);
- an instance whose job finished is TERMINATED, and a job whose nodes all finished ends
  SUCCEEDED or FAILED by its exit code;
- a machine tagged by Corral that no live request owns is terminated (a stray);
- a request stuck PENDING or PROVISIONING with no progress is handed to its step again, and a
  RUNNING request whose machines are all gone (a pass that died half way) is finished or
  relaunched;
- a pool's work that ended (its job's exit) or whose machine died wakes its pool's pass at
  once (runtime/pooled/ends.py), rather than waiting for beat's rebalancing;
- a STARTING request whose machines' agents reported again is RUNNING, and a service idle
  past its ``resources.autostop`` is stopped or torn down (runtime/stopping.py).

One cloud's failure to answer leaves that cloud's instances alone for this pass; it never
stops the pass for the others.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from typing import Any

from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MACHINE,
    TAG_POOL,
    TAG_REQUEST,
    ProviderInstance,
)
from corral.services.queues import dispatch
from corral.services.runtime import failover, launch, stopping, termination
from corral.services.runtime.attempt_record import move_instance_from, move_request_from
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import plan_launch
from corral.services.runtime.pooled import ends, passes
from corral.services.runtime.typed_task import task_of
from corral.shared.autoscaler.launcher import CLUSTER_LABEL
from corral.shared.blocking import Block
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import (
    INSTANCE_STATES,
    INSTANCE_TRANSITIONS,
    TERMINAL_REQUEST_STATES,
    InstanceState,
    RequestState,
    is_transition,
)
from corral.shared.observe import Seen, Stored, observe
from corral.shared.records import ChainStep, Instance, LaunchRequest
from corral.shared.recovery import (
    Loss,
    Relaunch,
    Restart,
    recovery_chain,
    relaunch_after_loss,
    restart_after,
)
from corral.shared.routing import DeterminedRoute, Direct, MachinePoolRoute

log = logging.getLogger("corral.reconcile")

LIVE = (InstanceState.REQUESTED, InstanceState.RUNNING, InstanceState.TERMINATING)
_NOT_ENDED = frozenset(INSTANCE_STATES) - {InstanceState.TERMINATED, InstanceState.FAILED}
_UP = frozenset({InstanceState.RUNNING, InstanceState.TERMINATING})  # what a pass checks


def reconcile(deps: Deps) -> dict[str, int]:
    """One pass; returns counts of what it did (for logs and tests)."""
    owner = uuid.uuid4().hex
    if not deps.store.claim("reconcile", owner, deps.settings.timers.claim_ttl_s):
        return {"skipped": 1}
    with hold_claim(deps, "reconcile", owner):  # renewed while the pass runs
        counts: dict[str, int] = defaultdict(int)
        now = deps.now()
        counts["blocks_expired"] = deps.blocks.expire(now)
        # The store first, then the clouds: every machine the store holds as up was launched
        # before the look, so one missing from the clouds' answers is gone. Read the other
        # way round, a machine launched and up between the two (a quick job under load) read
        # as "its process is gone": LOST, its zone blocked, its request relaunched.
        up = deps.store.list_instances(states=_UP)
        pooled = ends.pool_rows(deps)  # the pools' machines, read before the clouds too
        by_cloud = _observed(deps, counts)
        checked = _check_instances(deps, up, by_cloud, counts)
        _clean_strays(deps, by_cloud, counts, checked)
        _unstick(deps, counts)
        failover.wake_due(deps, counts)  # WAITING requests whose retry is due
        _recheck_running(deps, counts)
        # Started machines whose agents are back, at the address their cloud gives them now.
        stopping.watch_starting(deps, counts, lambda c, p: by_cloud.get(c, {}).get(p))
        stopping.stop_again(deps, lambda c, p: _runs(by_cloud, c, p), counts)
        stopping.autostop(deps, counts)  # idle services past their resources.autostop
        counts["boot_watches"] = launch.rewatch(deps)
        ends.notice(deps, pooled, by_cloud, counts)  # pooled work ended, machines died
        return dict(counts)


def _observed(deps: Deps, counts: dict[str, int]) -> dict[str, dict[str, ProviderInstance]]:
    out: dict[str, dict[str, ProviderInstance]] = {}
    for cloud in deps.launchable_clouds():
        try:
            out[cloud] = {p.provider_id: p for p in deps.provider(cloud).describe()}
        except ProviderError as exc:
            counts[f"unanswered_{cloud}"] += 1
            log.warning("%s did not answer describe (%s); its instances wait a pass", cloud, exc)
    return out


def _check_instances(
    deps: Deps,
    read: list[Instance],
    by_cloud: dict[str, dict[str, ProviderInstance]],
    counts: dict[str, int],
) -> list[Instance]:
    """The RUNNING and TERMINATING instances (``read`` before the clouds were asked) checked
    against what their clouds report (a REQUESTED one is booting: the boot watch finishes
    it, up or failed, runtime/boots.py, so it is not read here); returns them as read. A
    write starts from the instance as read and is a compare-and-set: one that moved on
    meanwhile (a terminate, its job's end) is decided afresh, or left alone."""
    for inst in read:
        if inst.machine_type is not None:
            continue  # a pool workload's node: its machine is the pool's (runtime/pooled/)
        seen = by_cloud.get(inst.cloud)
        if seen is None:
            continue  # no provider to ask in this process
        pi = seen.get(inst.provider_id or "")
        stored: Stored = "terminating" if inst.state == InstanceState.TERMINATING else "running"
        look = observe(stored, pi)  # the one observer (corral.shared.observe)
        match look.seen:
            case Seen.ENDED:
                _move(deps, inst, InstanceState.TERMINATED, look.why)
            case Seen.STILL_UP if inst.provider_id:
                # A terminate that failed (throttled, a 5xx) is sent again, never forgotten.
                counts["terminate_retried"] += 1
                _try(deps.provider(inst.cloud).terminate, [inst.provider_id], zone=inst.zone)
            case Seen.EXITED:
                counts["exited"] += 1
                _exited(deps, inst, look.exit_code)
            case Seen.RECLAIMING:
                # The cloud warned (a spot interruption notice, a preemption): recover now,
                # while the machine still runs, rather than once it is gone.
                counts["reclaimed"] += 1
                _lost(deps, inst, look.why)
            case Seen.GONE | Seen.DIED | Seen.SILENT:
                counts["lost"] += 1
                # A silence is the control plane's inference, not the cloud's word: no block.
                _lost(deps, inst, look.why, block=look.clouds_word)
    return read


def _move(
    deps: Deps, inst: Instance, to: InstanceState, reason: str, exit_code: int | None = None
) -> Instance | None:
    """Move ``inst`` (as this pass read it) to ``to`` if it is still in a live state that may
    (someone may have moved it meanwhile: a terminate, another pass)."""
    frm = [s for s in LIVE if is_transition(INSTANCE_TRANSITIONS, s, to)]
    return move_instance_from(deps, inst, frm, to, reason, exit_code=exit_code)


def _try(fn: Any, *args: Any, **kwargs: Any) -> bool:
    """Call a provider; a failure is logged and left for the next pass."""
    try:
        fn(*args, **kwargs)
    except ProviderError as exc:
        log.warning("%s failed (%s); the next pass tries again", getattr(fn, "__name__", fn), exc)
        return False
    return True


def _exited(deps: Deps, inst: Instance, exit_code: int | None) -> None:
    req = deps.store.get_request(inst.request_id)
    is_job = bool(req and req.task.get("run"))
    # A cluster node whose launcher steps failed (a setup or `ray start` command exited
    # non-zero) fails, as Ray's launcher fails the node: the user's command, not the cloud,
    # is at fault, so no zone is blocked and the autoscaler decides whether to launch again.
    labels = (req.task.get("labels") or {}) if req else {}
    setup_failed = CLUSTER_LABEL in labels and exit_code not in (None, 0)
    if not is_job and not setup_failed:
        _lost(deps, inst, f"its service exited (code {exit_code})")
        return
    what = "its launcher steps" if setup_failed else "its job"
    moved = _move(
        deps,
        inst,
        InstanceState.TERMINATED,
        f"{what} exited with code {exit_code}",
        exit_code=exit_code,
    )
    if moved and inst.provider_id:
        # A job's end releases its machine: a cloud VM outlives the agent that reported it.
        _try(deps.provider(inst.cloud).terminate, [inst.provider_id], zone=inst.zone)
    assert req is not None
    _finish_job(deps, req, inst.attempt_id, {moved.id: moved} if moved else {})


def _finish_job(
    deps: Deps,
    req: LaunchRequest,
    attempt_id: str | None,
    known: dict[str, Instance] | None = None,
) -> None:
    """End a RUNNING job once every node of its attempt has exited, by their exit codes (or
    restart it, as its ``job_recovery`` says). ``known``: instances as this pass just wrote
    them (not read again)."""
    known = known or {}
    nodes = [known.get(i) or deps.store.get_instance(i) for i in req.instance_ids]
    current = [n for n in nodes if n is not None and n.attempt_id == attempt_id]
    if not current:
        # The attempt's machines are not linked to the request yet (its launch is recording
        # them right now): nothing of this attempt is known to have ended. The next pass sees.
        return
    if any(n.state in LIVE for n in current):
        return  # other nodes still run their part
    ids = {n.id for n in current}
    codes = [n.exit_code for n in current if n.exit_code is not None]
    failed = next((c for c in codes if c != 0), None)
    if failed is not None:
        policy = task_of(req).recovery()
        again = restart_after(policy, failed, req.restarts_on_errors)
        if again is not None:
            region = current[0].region
            relaunch(deps, req.id, again.reason, restart=again, last_region=region, of=ids)
            return
    now = deps.now()
    target = RequestState.SUCCEEDED if failed is None else RequestState.FAILED
    why = "the job's run exited 0" if failed is None else f"the job's run exited {failed}"

    def finish(r: LaunchRequest) -> bool:
        if r.state != RequestState.RUNNING or not r.instance_ids or r.instance_ids[-1] not in ids:
            return False  # ended, or running another attempt (relaunched or restarted) now
        r.exit_code = failed if failed is not None else 0
        if failed is not None:
            r.error = why
        r.move(target, now, why)
        return True

    updated = deps.store.update_request(req.id, finish, current=req)
    if updated is not None and updated.state == target:
        deps.store.append_event(req.id, f"state: {target} ({why})", now)
        # Whatever of it still runs is let go (its ended request stays as it is). A machine it
        # never recorded is a stray of an ended request: the pass's stray cleaning ends it.
        _try(
            termination.release_instances,
            deps,
            req.id,
            "the job ended",
            req=updated,
            look_for_strays=False,
            frees=True,
        )


def _lost(deps: Deps, inst: Instance, why: str, block: bool = True) -> None:
    """Mark ``inst`` LOST, relaunch its request, and (``block``: the cloud said the machine
    is gone) remember its zone as unreliable. A silence is not the cloud's word: it blocks
    nothing, so a control-plane fault can never close a zone."""
    if not _move(deps, inst, InstanceState.LOST, why):
        return
    now = deps.now()
    timers = deps.settings.timers
    if block:
        p = inst.place
        scope = Block(p.cloud, p.region, p.zone, p.instance_type, p.market)  # there, that type
        reason = f"{inst.id} lost: {why}"
        deps.blocks.add(scope, now=now, ttl_s=timers.blocked_ttl_s, reason=reason, outcome="lost")
    req = deps.store.get_request(inst.request_id)
    if req is None or req.state != RequestState.RUNNING:
        return
    deps.store.append_event(req.id, f"instance {inst.id} LOST ({why})", now)
    _relaunch_without(deps, req.id, inst, why)


def _relaunch_without(deps: Deps, request_id: str, inst: Instance, why: str) -> None:
    """Relaunch the request first (so it never stays RUNNING on nothing), then release the
    lost node's attempt-mates: it is relaunched whole, in one zone."""
    relaunch(
        deps,
        request_id,
        f"instance {inst.id} lost: {why}",
        loss=Loss(inst.cloud, inst.region, inst.zone, ran_s=deps.now() - inst.created_at),
    )
    _try(
        termination.release_instances,
        deps,
        request_id,
        f"{inst.id} was lost",
        attempt_id=inst.attempt_id,
    )


def relaunch(
    deps: Deps,
    request_id: str,
    why: str,
    *,
    restart: Restart | None = None,
    last_region: str | None = None,
    of: set[str] | None = None,
    loss: Loss | None = None,
) -> str:
    """Send a RUNNING request back through its chain (re-planned around what just failed):
    after a lost machine (``loss``; unknown when None), as
    :func:`corral.shared.recovery.relaunch_after_loss` decides (``relaunch_limit`` losses in
    a row unless the task has a ``job_recovery``; the zones it lost machines in tried last),
    or to ``restart`` a failed job (its ``job_recovery`` strategy orders the chain from
    ``last_region``). ``of``: the instances whose end this answers; nothing happens unless
    the request still runs on them."""
    req = deps.store.get_request(request_id)
    if req is None:
        return "missing"
    now = deps.now()
    task = task_of(req)
    policy = task.recovery()
    planned = [ChainStep.of(c) for c in plan_launch(deps, task).candidates]
    timers = deps.settings.timers
    lost = Loss("", last_region, "", ran_s=0.0) if loss is None else loss
    lost_zones = _lost_zones(deps, req) if restart is None else []

    def back(r: LaunchRequest) -> bool:
        if r.state != RequestState.RUNNING:
            return False  # ended or already relaunching
        if of is not None and (not r.instance_ids or r.instance_ids[-1] not in of):
            return False  # it runs another attempt already: that end is old news
        if restart is not None:
            chain = recovery_chain(planned, policy, last_region)
            decided: Relaunch[ChainStep] | str = (
                Relaunch(chain, r.lost_in_a_row) if chain else "no candidate left"
            )
        else:
            decided = relaunch_after_loss(
                planned,
                policy,
                lost,
                lost_zones=lost_zones,
                in_a_row=r.lost_in_a_row,
                limit=timers.relaunch_limit,
                reset_s=timers.relaunch_reset_s,
            )
        if isinstance(decided, str):
            r.error = f"{why}; {decided}"
            r.move(RequestState.FAILED, now, r.error)
            return True
        r.relaunches += 1  # a new launch generation: new attempt ids
        r.lost_in_a_row = decided.in_a_row
        if restart is None:
            reason = f"relaunch {r.recoveries}: {why}"
        else:
            r.restarts += 1
            r.restarts_on_errors += int(restart.counted)
            reason = f"restart {r.restarts}: {why}"
        r.chain, r.next_step = decided.chain, -1
        r.move(RequestState.PROVISIONING, now, reason)
        return True

    updated = deps.store.update_request(request_id, back)
    if updated is None:
        return "missing"
    if updated.state == RequestState.PROVISIONING:
        deps.store.append_event(
            request_id, f"state: PROVISIONING ({updated.history[-1].reason})", now
        )
        failover.resume(deps, updated)
        return "relaunched"
    if updated.state == RequestState.FAILED:
        deps.store.append_event(request_id, f"state: FAILED ({updated.error})", now)
    return str(updated.state)


def _lost_zones(deps: Deps, req: LaunchRequest) -> list[tuple[str, str]]:
    """(cloud, zone) of every machine the request lost so far: its relaunch tries them last."""
    found = (deps.store.get_instance(i) for i in req.instance_ids)
    return [(i.cloud, i.zone) for i in found if i is not None and i.state == InstanceState.LOST]


def _runs(by_cloud: dict[str, dict[str, ProviderInstance]], cloud: str, provider_id: str) -> bool:
    """Whether this pass saw the cloud run the machine (a stop that did not happen)."""
    seen = by_cloud.get(cloud, {}).get(provider_id)
    return seen is not None and seen.state == "running"


def _clean_strays(
    deps: Deps,
    by_cloud: dict[str, dict[str, ProviderInstance]],
    counts: dict[str, int],
    checked: list[Instance],
) -> None:
    """``checked``: the RUNNING and TERMINATING instances this pass read already."""
    up = {
        c: [p for p in seen.values() if p.state in ("pending", "running")]
        for c, seen in by_cloud.items()
    }
    if not any(up.values()):
        return
    # The machines of instances that have not ended (a lost one may still run: it is known,
    # and its relaunch cleans it up); an ended instance's machine still up is judged by its
    # request (_is_stray), so a pass reads what lives, not every instance ever recorded. A
    # booting machine is known by its launch in the boot book (one read per cloud), not by
    # its REQUESTED instance (one read each); one not booked is judged by its attempt.
    rest = deps.store.list_instances(states=_NOT_ENDED - _UP - {InstanceState.REQUESTED})
    known = {i.provider_id for i in [*checked, *rest] if i.provider_id}
    for cloud, machines in up.items():
        unknown = [p for p in machines if p.provider_id not in known]
        booking = deps.boots.keys(cloud) if any(p.tags.get(TAG_ATTEMPT) for p in unknown) else ()
        strays = [
            p for p in unknown if p.tags.get(TAG_ATTEMPT) not in booking and _is_stray(deps, p)
        ]
        if strays:
            counts["strays"] += len(strays)
            log.warning(
                "terminating %d stray instance(s) on %s: %s",
                len(strays),
                cloud,
                ", ".join(p.provider_id for p in strays),
            )
            deps.provider(cloud).terminate([p.provider_id for p in strays])


def _is_stray(deps: Deps, pi: ProviderInstance) -> bool:
    """Tagged by Corral, and no request is (or could still be) recording it."""
    pool = pi.tags.get(TAG_POOL)
    if pool is not None:  # a pool's machine: stray once its pool no longer knows it
        machine_id = pi.tags.get(TAG_MACHINE, "")
        if deps.store.is_claimed(f"pool-machine:{machine_id}"):
            return False  # its launch is still running
        return not passes.knows_machine(deps, pool, machine_id)
    attempt_id = pi.tags.get(TAG_ATTEMPT)
    request_id = pi.tags.get(TAG_REQUEST)
    if not attempt_id or not request_id:
        return False  # not ours
    if deps.store.is_claimed(f"attempt:{attempt_id}"):
        return False  # its attempt is still running
    req = deps.store.get_request(request_id)
    if req is None or req.state in TERMINAL_REQUEST_STATES:
        return True
    this = next((a for a in req.attempts if a.attempt_id == attempt_id), None)
    return this is None or this.outcome not in (None, "ok")


def _unstick(deps: Deps, counts: dict[str, int]) -> None:
    """Hand requests that made no progress for a while to their step again (a lost message).

    A Redis outage can lose a message (one a worker took off its queue as Redis died, or a
    publish that outlived ``redis_patience_s``), so a request whose last progress predates the
    control plane's last outage is handed on again a few passes after Redis is back, without
    waiting the usual patience. Every step is idempotent, so one sent twice does its work once.
    """
    now = deps.now()
    timers = deps.settings.timers
    patience_s = timers.attempt_deadline_s + 30
    outage_end = deps.outage.pulse()
    settle_s = 3 * timers.reconcile_interval_s  # let work that survived the outage go on first
    # Only a request created before both cut-offs can be due (updated_at >= created_at): the
    # young ones are not read at all.
    before = now - patience_s
    if outage_end <= now - settle_s:
        before = max(before, outage_end)
    for state in (RequestState.PENDING, RequestState.PROVISIONING):
        for req in deps.store.list_requests(state=state, limit=1000, created_before=before):
            cut_off = req.updated_at < outage_end <= now - settle_s
            if now - req.updated_at < patience_s and not cut_off:
                continue
            if cut_off and not _mark_redriven(deps, req.id, outage_end, now):
                continue  # progressed meanwhile
            counts["unstuck"] += 1
            match req.route:
                case MachinePoolRoute() | DeterminedRoute() as pooled:
                    if state == RequestState.PENDING and not passes.is_queued(deps, req, pooled):
                        dispatch.admit(req.id, settings=deps.settings)  # its admission was lost
                    # else queued or placed: its pool's passes and syncs carry it
                case Direct() if state == RequestState.PENDING:
                    dispatch.admit(req.id, settings=deps.settings)
                case Direct():
                    failover.resume(deps, req)


def _mark_redriven(deps: Deps, request_id: str, outage_end: float, now: float) -> bool:
    """Note on the request that it is handed on again after an outage (so the next pass does
    not do it again); False if it made progress since the outage."""

    def touch(r: LaunchRequest) -> bool:
        if r.updated_at >= outage_end or r.state not in _REDRIVEN:
            return False
        r.updated_at = now
        return True

    updated = deps.store.update_request(request_id, touch)
    if updated is None or updated.updated_at != now:
        return False
    deps.store.append_event(request_id, "handed on again after a control-plane outage", now)
    return True


_REDRIVEN = (RequestState.PENDING, RequestState.PROVISIONING)


def _recheck_running(deps: Deps, counts: dict[str, int]) -> None:
    """A RUNNING request whose current machines have all ended (a pass that died between the
    instance's write and the request's) is finished or relaunched now."""
    now = deps.now()
    patience_s = deps.settings.timers.reconcile_interval_s * 3
    before = now - patience_s  # a younger request was updated within the patience
    for req in deps.store.list_requests(
        state=RequestState.RUNNING, limit=1000, created_before=before
    ):
        pooled = not isinstance(req.route, Direct)  # its pool's syncs carry it
        if now - req.updated_at < patience_s or not req.instance_ids or pooled:
            continue
        last = deps.store.get_instance(req.instance_ids[-1])
        if last is None:
            continue
        mates = [deps.store.get_instance(i) for i in req.instance_ids]
        current = [m for m in mates if m is not None and m.attempt_id == last.attempt_id]
        if any(m.state in LIVE for m in current):
            continue
        counts["rechecked"] += 1
        exited = all(m.state == InstanceState.TERMINATED for m in current)
        if all(_terminated_on_purpose(m) for m in current):
            # A terminate (the user's) ended the machines and has not ended the request yet:
            # relaunching would start a machine nobody wants.
            ended = "its machines were terminated"
            move_request_from(deps, req.id, {RequestState.RUNNING}, RequestState.TERMINATED, ended)
        elif req.task.get("run") and exited:
            _finish_job(deps, req, last.attempt_id)
        else:
            relaunch(deps, req.id, "its machines ended while it was running")


def _terminated_on_purpose(inst: Instance) -> bool:
    """Ended by the control plane's terminate (it went TERMINATING), not by its job's exit."""
    stopped = any(t.to_state == InstanceState.TERMINATING for t in inst.history)
    return inst.state == InstanceState.TERMINATED and inst.exit_code is None and stopped
