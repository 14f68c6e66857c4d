"""Launch requests from the user's side: submit, cancel/terminate, view, logs.

The API calls these; so could any other front end. Work is handed to the workers by task name.
"""

from __future__ import annotations

from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime.deps import Deps, new_id
from corral.services.runtime.pooled.registry import registry_view
from corral.services.state.nodes import NodeName
from corral.shared.config.task import Task
from corral.shared.lifecycle import TERMINAL_REQUEST_STATES, RequestState
from corral.shared.records import LaunchRequest
from corral.shared.recovery import runs_of, total_cost
from corral.shared.routing import Refusal, route


class RequestNotFound(LookupError):
    def __init__(self, request_id: str) -> None:
        super().__init__(f"no launch request {request_id!r}")
        self.request_id = request_id


class Impossible(ValueError):
    """Nothing could ever be planned for this task here (not a passing shortage)."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons) or "no candidate can be planned")
        self.reasons = reasons


def submit(deps: Deps, task: Task, *, request_id: str | None = None) -> LaunchRequest:
    """Accept a launch request: route it (:func:`corral.shared.routing.route`), refuse the
    impossible, store it PENDING with its route, hand it to scheduling."""
    decided = route(task, registry_view(deps))
    if isinstance(decided, Refusal):
        raise Impossible(list(decided.reasons))
    now = deps.now()
    req = LaunchRequest(
        id=request_id or new_id("r"),
        task=task.model_dump(mode="json", exclude_none=True, by_alias=True),
        state=RequestState.PENDING,
        created_at=now,
        updated_at=now,
        labels=dict(task.labels),
        priority=task.priority,
        route=decided,
    )
    req.history.append(_first_transition(now))
    if deps.store.create_request(req):
        deps.store.append_event(req.id, f"accepted: {task.name or 'unnamed task'}", now)
    stored = deps.store.get_request(req.id)
    assert stored is not None
    dispatch.admit(stored.id, settings=deps.settings)
    return stored


def _first_transition(now: float) -> Any:
    from corral.shared.records import Transition

    return Transition(from_state=None, to_state=RequestState.PENDING, at=now, reason="submitted")


def cancel(deps: Deps, request_id: str, *, instance_id: str | None = None) -> LaunchRequest:
    """Stop a request: before it runs it is CANCELLED; a running one has its instances
    terminated (the provisioning worker marks it TERMINATED). Finished ones stay as they are."""
    req = deps.store.get_request(request_id)
    if req is None:
        raise RequestNotFound(request_id)
    if instance_id is not None:
        dispatch.terminate(
            request_id, instance_id, "terminated by the user", settings=deps.settings
        )
        return req
    now = deps.now()

    def to_cancelled(r: LaunchRequest) -> bool:
        if r.state in (RequestState.PENDING, RequestState.PROVISIONING, RequestState.PREEMPTED):
            r.move(RequestState.CANCELLED, now, "cancelled by the user")
            return True
        return False

    updated = deps.store.update_request(request_id, to_cancelled)
    assert updated is not None
    if updated.state == RequestState.CANCELLED and req.state != RequestState.CANCELLED:
        deps.store.append_event(request_id, "state: CANCELLED (cancelled by the user)", now)
    if updated.state not in TERMINAL_REQUEST_STATES or updated.state == RequestState.CANCELLED:
        # Running: terminate its machines. Cancelled: a launch may be in flight; terminating
        # by request finds whatever it created, so nothing leaks.
        dispatch.terminate(request_id, None, "terminated by the user", settings=deps.settings)
    return updated


def public_view(deps: Deps, request_id: str) -> dict[str, Any] | None:
    """The request as the API shows it, with its runs (one per launch that came up: the first,
    then each relaunch after a loss and each restart of a failed job) and their summed cost."""
    req = deps.store.get_request(request_id)
    if req is None:
        return None
    instances = deps.store.list_instances(request_id=request_id)
    runs = runs_of(instances, deps.now())
    cost = total_cost(runs)
    return {
        **req.to_public(instances),
        "relaunches": req.recoveries,
        "restarts": req.restarts,
        "runs": [r.to_public() for r in runs],
        "cost_usd": None if cost is None else round(cost, 6),
    }


def read_logs(
    deps: Deps, request_id: str, *, instance_id: str | None = None, tail_bytes: int = 256_000
) -> str:
    """The output of the request's instances: the local cloud's agents' log files, or what
    cloud machines' agents shipped to the node book."""
    if deps.store.get_request(request_id) is None:
        raise RequestNotFound(request_id)
    parts: list[str] = []
    for inst in deps.store.list_instances(request_id=request_id):
        if instance_id and inst.id != instance_id:
            continue
        if not inst.provider_id:
            continue
        if inst.cloud != "local" and inst.attempt_id:
            # A pooled machine's node is known by the cloud's id (its log holds what it ran).
            node = deps.nodes.node_of(inst.cloud, inst.provider_id) or NodeName(
                inst.cloud, inst.attempt_id, inst.node_index
            )
            data = deps.nodes.log(node)[-tail_bytes:]
            if data:
                text = data.decode("utf-8", errors="replace")
                parts.append(f"==> {inst.id} ({inst.provider_id}) <==\n{text}")
            continue
        path = deps.settings.logs / f"{inst.provider_id}.log"
        if not path.exists():
            continue
        with path.open("rb") as fh:
            size = path.stat().st_size
            fh.seek(max(0, size - tail_bytes))
            text = fh.read().decode("utf-8", errors="replace")
        parts.append(f"==> {inst.id} ({inst.provider_id}) <==\n{text}")
    return "\n".join(parts)
