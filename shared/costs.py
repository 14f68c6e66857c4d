"""What requests cost, line by line and summed by user, project and cloud: ``corral
cost-report`` (SkyPilot's ``sky cost-report``), the API's ``GET /v1/costs`` and the console's
spend. A request's cost is the sum of its runs (``corral.shared.recovery.runs_of``): the first
launch, each relaunch after a lost machine and each restart of a failed job, so what recovery
cost is in the figure. A run on another cloud than the first counts toward that cloud.

Pure: the records and the clock's reading are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .records import Instance, LaunchRequest
from .recovery import Run, runs_of, total_cost

NOBODY = "-"  # the user or project of a request stored without one


@dataclass(frozen=True)
class CostLine:
    """One request's spend."""

    request_id: str
    name: str | None
    user: str | None
    project: str | None
    state: str
    gpus: int
    runs: tuple[Run, ...]
    relaunches: int
    restarts: int
    created_at: float

    @property
    def cost_usd(self) -> float | None:
        """Every run's cost summed; None when a machine's price is unknown."""
        return total_cost(self.runs)

    def duration_s(self, now: float) -> float:
        """Machine time, wall clock: each run from its launch to its end (or ``now``)."""
        return sum(max(0.0, (r.ended_at or now) - r.started_at) for r in self.runs)

    def clouds(self) -> list[str]:
        """The clouds its runs were on, first run first."""
        return list(dict.fromkeys(r.place.cloud for r in self.runs))

    def to_dict(self, now: float) -> dict[str, Any]:
        cost = self.cost_usd
        return {
            "id": self.request_id,
            "name": self.name,
            "user": self.user,
            "project": self.project,
            "state": self.state,
            "gpus": self.gpus,
            "clouds": self.clouds(),
            "runs": len(self.runs),
            "relaunches": self.relaunches,
            "restarts": self.restarts,
            "created_at": self.created_at,
            "duration_s": round(self.duration_s(now), 3),
            "cost_usd": None if cost is None else round(cost, 6),
        }


def cost_line(req: LaunchRequest, instances: Sequence[Instance], now: float) -> CostLine:
    """The spend of ``req`` from its instances."""
    return CostLine(
        request_id=req.id,
        name=req.task.get("name"),
        user=req.user,
        project=req.project,
        state=req.state.value,
        gpus=req.gpus,
        runs=tuple(runs_of(instances, now)),
        relaunches=req.recoveries,
        restarts=req.restarts,
        created_at=req.created_at,
    )


@dataclass
class Totals:
    """Spend summed by user, project and cloud; runs whose price is unknown are counted
    apart (``unpriced_runs``), never as free."""

    by_user: dict[str, float] = field(default_factory=dict)
    by_project: dict[str, float] = field(default_factory=dict)
    by_cloud: dict[str, float] = field(default_factory=dict)
    total_usd: float = 0.0
    unpriced_runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        def rounded(d: dict[str, float]) -> dict[str, float]:
            return {k: round(v, 6) for k, v in sorted(d.items(), key=lambda kv: -kv[1])}

        return {
            "by_user": rounded(self.by_user),
            "by_project": rounded(self.by_project),
            "by_cloud": rounded(self.by_cloud),
            "total_usd": round(self.total_usd, 6),
            "unpriced_runs": self.unpriced_runs,
        }


def totals(lines: Iterable[CostLine]) -> Totals:
    """Sum ``lines`` run by run, so a recovery run on another cloud counts toward that one."""
    sums = Totals()
    for line in lines:
        for run in line.runs:
            if run.cost_usd is None:
                sums.unpriced_runs += 1
                continue
            for bucket, key in (
                (sums.by_user, line.user or NOBODY),
                (sums.by_project, line.project or NOBODY),
                (sums.by_cloud, run.place.cloud),
            ):
                bucket[key] = bucket.get(key, 0.0) + run.cost_usd
            sums.total_usd += run.cost_usd
    return sums
