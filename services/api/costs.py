"""``GET /v1/costs``: what the caller's visible requests cost, each with its runs (recoveries
included), and summed by user, project and cloud (``corral.shared.costs``). A member or viewer
sees its projects' requests only, as in ``GET /v1/requests``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from corral.services.api.auth import Principal, caller
from corral.services.api.routes import MAX_LIST, get_deps
from corral.services.runtime.deps import Deps
from corral.shared.costs import cost_line, totals

router = APIRouter()


class CostLineView(BaseModel):
    id: str
    name: str | None = None
    user: str | None = None
    project: str | None = None
    state: str
    gpus: int = 0
    clouds: list[str] = Field(default_factory=list, description="its runs' clouds, first first")
    runs: int = Field(description="launches that came up: the first, relaunches, restarts")
    relaunches: int = 0
    restarts: int = 0
    created_at: float
    duration_s: float = Field(description="machine time, wall clock, over every run")
    cost_usd: float | None = Field(None, description="every run's cost; null if a price is unknown")


class CostTotals(BaseModel):
    by_user: dict[str, float]
    by_project: dict[str, float]
    by_cloud: dict[str, float]
    total_usd: float
    unpriced_runs: int = Field(description="runs whose machine price is unknown (not summed)")


class CostReport(BaseModel):
    requests: list[CostLineView]
    count: int
    totals: CostTotals
    at: float = Field(description="when the running requests' costs were read (epoch seconds)")


@router.get("/v1/costs", response_model=CostReport, summary="What requests cost, and totals")
def cost_report(
    limit: int = Query(200, ge=1, le=MAX_LIST),
    project: str | None = Query(None, max_length=63, description="only this project's"),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    now = deps.now()
    if project is not None and not who.sees(project):
        records = []
    else:
        projects = [project] if project is not None else None
        if projects is None and not who.is_admin:
            projects = list(who.projects)
        records = deps.store.list_requests(limit=limit, projects=projects)
    lines = [cost_line(r, deps.store.list_instances(request_id=r.id), now) for r in records]
    return {
        "requests": [line.to_dict(now) for line in lines],
        "count": len(lines),
        "totals": totals(lines).to_dict(),
        "at": now,
    }
