"""Project quotas at admission: the project's usage read from the store, the pure rule of
:mod:`corral.shared.quotas` applied, and a refusal recorded on the request (FAILED, with the
quota and its numbers, which ``corral why`` shows)."""

from __future__ import annotations

from collections.abc import Callable

from corral.services.runtime.deps import Deps
from corral.shared.lifecycle import RequestState
from corral.shared.quotas import (
    Quota,
    QuotaRefusal,
    Usage,
    check,
    counts_against,
    period_start,
    spent_usd,
)
from corral.shared.records import Instance, LaunchRequest

# A machine is billed until one of these (the first such move in its history).


def usage_of(deps: Deps, req: LaunchRequest, quota: Quota, now: float) -> Usage:
    """What ``req``'s project holds and spent, as the quota rule counts it for ``req``."""
    assert req.project is not None

    def counts(o: LaunchRequest) -> bool:
        admitted = o.state != RequestState.PENDING
        return counts_against(o.created_at, admitted, req.created_at, o.id, req.id)

    return _usage(deps, req.project, quota, now, counts, spend=quota.usd_per_period is not None)


def project_usage(deps: Deps, project: str, quota: Quota, now: float) -> Usage:
    """What a project holds (every live request) and spent this period, for ``projects list``."""
    return _usage(deps, project, quota, now, lambda _o: True, spend=True)


def _usage(
    deps: Deps,
    project: str,
    quota: Quota,
    now: float,
    counts: Callable[[LaunchRequest], bool],
    *,
    spend: bool,
) -> Usage:
    others = deps.store.load_requests(deps.store.project_request_ids(project))
    gpus = sum(o.gpus for o in others if not o.is_terminal and counts(o))
    start = period_start(now, quota.period_s)
    bills: list[tuple[float, float | None, float | None]] = []
    for other in others if spend else ():
        if other.is_terminal and other.updated_at < start:
            continue  # ended before this period: nothing of it is billed in it
        bills.extend(_bill(i) for i in deps.store.list_instances(request_id=other.id))
    return Usage(
        gpus_in_use=gpus, spent_usd=spent_usd(bills, start, now), period_start=start, now=now
    )


def _bill(inst: Instance) -> tuple[float, float | None, float | None]:
    return inst.created_at, inst.billed_until(), inst.price_usd_per_hour


def refusal_for(deps: Deps, req: LaunchRequest) -> QuotaRefusal | None:
    """The project quota refusing ``req`` now, or None (no project, no quota, or room)."""
    if req.project is None:
        return None
    project = deps.access.project(req.project)
    if project is None or project.quota.is_empty():
        return None
    now = deps.now()
    return check(req.project, project.quota, usage_of(deps, req, project.quota, now), req.gpus)


def refuse(deps: Deps, request_id: str, refusal: QuotaRefusal) -> bool:
    """Fail a PENDING request for its quota, the refusal kept on it; True when this call did."""
    now = deps.now()

    def fail(r: LaunchRequest) -> tuple[bool, bool]:
        if r.state != RequestState.PENDING:
            return False, False
        r.error = refusal.reason
        r.quota_refusal = refusal.to_dict()
        r.move(RequestState.FAILED, now, refusal.reason)
        return True, True

    done = bool(deps.store.decide_request(request_id, fail)[1])
    if done:
        deps.store.append_event(request_id, f"state: FAILED ({refusal.reason})", now)
    return done
