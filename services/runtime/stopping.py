"""Stopping and starting a request's machines (``corral stop`` / ``corral start``), and
autostop: a service idle past its ``resources.autostop`` is stopped, or torn down.

- :func:`refusal` says, before anything is published, why a request cannot be stopped or
  started (a cloud that cannot stop a machine: the local cloud, Kubernetes), for the API.
- :func:`stop` moves the request RUNNING -> STOPPED and its machines RUNNING -> STOPPED first
  (so no look at the machines takes a stopping one for lost), then asks the cloud.
- :func:`start` moves it STOPPED -> STARTING and asks the cloud to start the machines;
  :func:`watch_starting` (beat's reconcile) moves each machine RUNNING again once its agent
  has reported since the start, and the request RUNNING once all have.
- :func:`autostop` (beat's reconcile) reads each RUNNING service's agents' idle reports and
  carries out :func:`corral.shared.autostop.decide`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from corral.services.providers.base import ProviderInstance, can_stop, node_work_of
from corral.services.runtime import termination
from corral.services.runtime.attempt_record import move_instance_from, move_request_from
from corral.services.runtime.deps import Deps
from corral.services.runtime.typed_task import task_of
from corral.shared.autostop import Action, Autostop, decide, idle_since_of
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import TERMINAL_REQUEST_STATES, InstanceState, RequestState
from corral.shared.records import Instance, LaunchRequest
from corral.shared.routing import Direct

log = logging.getLogger("corral.stopping")


def _current(deps: Deps, req: LaunchRequest) -> list[Instance]:
    """The machines of the request's current (last) attempt."""
    if not req.instance_ids:
        return []
    last = deps.store.get_instance(req.instance_ids[-1])
    if last is None:
        return []
    found = [deps.store.get_instance(i) for i in req.instance_ids]
    return [i for i in found if i is not None and i.attempt_id == last.attempt_id]


def current_nodes(deps: Deps, req: LaunchRequest, state: InstanceState) -> list[Instance]:
    """The machines of the request's current attempt that are in ``state``."""
    return [i for i in _current(deps, req) if i.state == state]


def refusal(deps: Deps, req: LaunchRequest, action: str) -> str | None:
    """Why ``action`` (stop | start) cannot be done to the request now; None if it can."""
    if not isinstance(req.route, Direct):
        return f"request {req.id} runs on a pool's machines: a pool's machines are not stopped"
    clouds = {i.cloud for i in _current(deps, req)}
    for cloud in sorted(clouds):
        if not can_stop(deps.provider(cloud)):
            return (
                f"the {cloud} cloud cannot stop a machine and start it again; "
                f"`corral terminate {req.id}` ends it"
            )
    wanted = RequestState.RUNNING if action == "stop" else RequestState.STOPPED
    if req.state != wanted:
        return f"request {req.id} is {req.state.value}: only a {wanted.value} request can {action}"
    nodes = current_nodes(
        deps, req, InstanceState.RUNNING if action == "stop" else InstanceState.STOPPED
    )
    if not nodes:
        return f"request {req.id} has no machine to {action}"
    return None


def _by_cloud(nodes: list[Instance]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for n in nodes:
        if n.provider_id:
            out.setdefault((n.cloud, n.zone), []).append(n.provider_id)
    return out


def _stop_machines(deps: Deps, nodes: list[Instance], request_id: str | None = None) -> None:
    """Stop the machines of ``nodes``, recorded STOPPED already: one call per cloud and zone;
    a failure is logged (and told in ``request_id``'s events), reconcile asks again."""
    for (cloud, zone), ids in _by_cloud(nodes).items():
        try:
            deps.provider(cloud).stop(ids, zone=zone)  # type: ignore[attr-defined]
        except ProviderError as exc:
            log.warning("stopping %s on %s failed (%s); reconcile asks again", ids, cloud, exc)
            if request_id is not None:
                deps.store.append_event(
                    request_id, f"stop of {', '.join(ids)} failed: {exc}", deps.now()
                )


def stop(deps: Deps, request_id: str, why: str = "stopped by the user") -> str:
    """Stop a RUNNING request's machines (idempotent: a request no longer RUNNING is left)."""
    req = deps.store.get_request(request_id)
    if req is None:
        return "missing"
    nodes = current_nodes(deps, req, InstanceState.RUNNING)
    if refusal(deps, req, "stop") is not None:
        return "refused"
    updated = move_request_from(deps, request_id, {RequestState.RUNNING}, RequestState.STOPPED, why)
    if updated is None:
        return str(req.state)
    for n in nodes:
        move_instance_from(deps, n, {InstanceState.RUNNING}, InstanceState.STOPPED, why)
    _stop_machines(deps, nodes, request_id)
    return "stopped"


def stop_again(deps: Deps, running: Callable[[str, str], bool], counts: dict[str, int]) -> None:
    """A STOPPED request's machine that its cloud still runs (a stop that failed: throttled,
    a 5xx) is stopped again. ``running(cloud, provider_id)``: what this pass observed."""
    for req in deps.store.list_requests(state=RequestState.STOPPED, limit=1000):
        nodes = [
            n
            for n in current_nodes(deps, req, InstanceState.STOPPED)
            if n.provider_id and running(n.cloud, n.provider_id)
        ]
        counts["stop_retried"] += len(nodes)
        _stop_machines(deps, nodes)


def start(deps: Deps, request_id: str) -> str:
    """Start a STOPPED request's machines; RUNNING once their agents report again."""
    req = deps.store.get_request(request_id)
    if req is None:
        return "missing"
    if refusal(deps, req, "start") is not None:
        return "refused"
    nodes = current_nodes(deps, req, InstanceState.STOPPED)
    why = "started by the user"
    if (
        move_request_from(deps, request_id, {RequestState.STOPPED}, RequestState.STARTING, why)
        is None
    ):
        return str(req.state)
    for (cloud, zone), ids in _by_cloud(nodes).items():
        try:
            deps.provider(cloud).start(ids, zone=zone)  # type: ignore[attr-defined]
        except ProviderError as exc:
            # No capacity to start it again (InsufficientInstanceCapacity, a zone's stockout):
            # it stays stopped; the user starts it again later.
            move_request_from(
                deps,
                request_id,
                {RequestState.STARTING},
                RequestState.STOPPED,
                f"the cloud did not start it: {exc}",
            )
            return "refused by the cloud"
    return "starting"


def watch_starting(
    deps: Deps,
    counts: dict[str, int],
    seen: Callable[[str, str], ProviderInstance | None] = lambda _c, _p: None,
) -> None:
    """Each STARTING request: a machine whose agent reported since the start is RUNNING
    again, at the address its cloud reports now (``seen``: this pass's look; a started
    machine may get a new public IP); all of them, and the request is RUNNING."""
    for req in deps.store.list_requests(state=RequestState.STARTING, limit=1000):
        started_at = req.history[-1].at if req.history else req.updated_at
        for n in current_nodes(deps, req, InstanceState.STOPPED):
            beat = _beat(deps, n)
            ts = beat.get("ts") if beat else None
            if not isinstance(ts, int | float) or ts < started_at:
                continue
            now_at = seen(n.cloud, n.provider_id or "")
            address = now_at.address if now_at is not None and now_at.address else None
            why = "its agent reported again"
            move_instance_from(
                deps, n, {InstanceState.STOPPED}, InstanceState.RUNNING, why, address=address
            )
        silent = current_nodes(deps, req, InstanceState.STOPPED)
        if not silent:
            why = "every machine's agent reported again"
            if move_request_from(deps, req.id, {RequestState.STARTING}, RequestState.RUNNING, why):
                counts["started"] += 1
        elif deps.now() - started_at > start_deadline_s(deps):
            _start_failed(deps, req.id, silent, counts)


def start_deadline_s(deps: Deps) -> float:
    """How long a started machine's agents have to report again: ``start_deadline_s``, or
    ``attempt_deadline_s`` when that is unset (a start is a boot)."""
    timers = deps.settings.timers
    return timers.start_deadline_s or timers.attempt_deadline_s


def _start_failed(
    deps: Deps, request_id: str, silent: list[Instance], counts: dict[str, int]
) -> None:
    """Machines started but whose agents did not report within ``start_deadline_s``: the
    request is STOPPED again and those machines stopped (not left billing unseen); a machine
    that did report goes back to STOPPED with them (the request is stopped whole)."""
    deadline_s = start_deadline_s(deps)
    why = f"its machines' agents did not report within {deadline_s:g} s of the start"
    req = move_request_from(deps, request_id, {RequestState.STARTING}, RequestState.STOPPED, why)
    if req is None:
        return
    counts["start_timed_out"] += 1
    back = current_nodes(deps, req, InstanceState.RUNNING)
    for n in back:
        move_instance_from(deps, n, {InstanceState.RUNNING}, InstanceState.STOPPED, why)
    _stop_machines(deps, [*silent, *back])


def _beat(deps: Deps, inst: Instance) -> dict[str, Any] | None:
    if not inst.provider_id:
        return None
    work = node_work_of(deps.provider(inst.cloud))
    return None if work is None else work.report(inst.provider_id)


def autostop(deps: Deps, counts: dict[str, int]) -> None:
    """Every RUNNING direct request with ``resources.autostop``: stopped, or torn down, once
    every node's agent has reported idle for the set time (:func:`decide`)."""
    now = deps.now()
    for req in deps.store.list_requests(state=RequestState.RUNNING, limit=1000):
        resources = req.task.get("resources")
        if not isinstance(resources, dict) or resources.get("autostop") in (None, False):
            continue  # no autostop: skip the task's validation
        if not isinstance(req.route, Direct):
            continue
        policy = task_of(req).autostop()
        if policy is None:
            continue
        nodes = current_nodes(deps, req, InstanceState.RUNNING)
        if not nodes or len(nodes) < int(req.task.get("num_nodes") or 1):
            continue  # not all up (or being relaunched)
        since = idle_since_of([_beat(deps, n) for n in nodes], wait_for=policy.wait_for)
        # Idle counts from when the request last ran (a start resets it), not from before, nor
        # from before `corral autostop` set the policy (SkyPilot resets its timer there too).
        running_since = next(
            (t.at for t in reversed(req.history) if t.to_state == RequestState.RUNNING.value),
            req.updated_at,
        )
        if since is not None:
            since = max(since, running_since, req.autostop_set_at or 0.0)
        stoppable = all(can_stop(deps.provider(c)) for c in {n.cloud for n in nodes})
        decision = decide(since, policy, now, can_stop=stoppable)
        if decision.action is Action.NONE:
            continue
        log.info("request %s: %s", req.id, decision.why)
        deps.store.append_event(req.id, decision.why, now)
        try:
            if decision.action is Action.STOP:
                counts["autostopped"] += 1
                stop(deps, req.id, decision.why)
            else:
                counts["autodowned"] += 1
                termination.terminate(deps, req.id, None, decision.why)
        except ProviderError as exc:
            log.warning("autostop of %s failed (%s); the next pass tries again", req.id, exc)


class AutostopRefused(Exception):
    """``corral autostop`` cannot apply to this request; the message says why."""


def set_autostop(deps: Deps, request_id: str, policy: Autostop | None) -> LaunchRequest:
    """Set (or, ``policy`` None, cancel) a live request's autostop, as ``sky autostop`` does
    for a running cluster: the task's ``resources.autostop`` is rewritten in one versioned
    write, and idle time counts from now. Raises AutostopRefused for an ended request or one
    whose machines are a pool's (the pool decides when they go), LookupError for no request."""
    now = deps.now()

    def rewrite(req: LaunchRequest) -> tuple[bool, str | None]:  # -> (write, refused because)
        if req.state in TERMINAL_REQUEST_STATES:
            return False, f"request {req.id} has ended ({req.state.value})"
        if not isinstance(req.route, Direct):
            return False, f"request {req.id} runs on a pool's machines: the pool stops them"
        resources = dict(req.task.get("resources") or {})
        resources["autostop"] = False if policy is None else policy.to_json()
        req.task = {**req.task, "resources": resources}
        req.autostop_set_at = now
        return True, None

    updated, refused = deps.store.decide_request(request_id, rewrite)
    if updated is None:
        raise LookupError(request_id)
    if refused:
        raise AutostopRefused(refused)
    if policy is None:
        said = "cancelled"
    else:
        then = "terminate" if policy.down else "stop"
        said = f"set: {then} after {policy.idle_minutes:g} idle min"
    deps.store.append_event(request_id, f"autostop {said} (corral autostop)", now)
    return updated
