"""`corral why`: the scheduler's own word on a request, by its route: where it runs, or why it
waits (a plain request's account otherwise)."""

from __future__ import annotations

from typing import Any

from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled.kinds import kind_of_route
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest
from corral.shared.routing import DeterminedRoute, Direct, MachinePoolRoute, pool_of


def why(deps: Deps, request_id: str) -> dict[str, Any]:
    """The scheduler's word on a request (LookupError for an unknown id)."""
    req = deps.store.get_request(request_id)
    if req is None:
        raise LookupError(f"no launch request {request_id!r}")
    match req.route:
        case MachinePoolRoute() | DeterminedRoute() as pooled:
            kind = kind_of_route(pooled)
            return kind.why(deps, req, kind.ledgers(deps).get(pool_of(pooled) or ""))
        case Direct():
            return {
                "id": req.id,
                "state": req.state.value,
                "pool": None,
                "code": "not_pooled",
                "reason": "it does not run on a pool: " + _plain(req),
            }


def _plain(req: LaunchRequest) -> str:
    if req.state == RequestState.PENDING:
        return "it waits for the scheduling worker to plan its failover chain"
    if req.error:
        return req.error
    return f"it is {req.state.value}"
