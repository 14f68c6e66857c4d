"""What a simulated day is measured by: per request, over time, and the figures that compare
policies (:func:`summary`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cloud import Cost


@dataclass
class ReqStat:
    """One request's day."""

    rid: str
    arrival_s: float
    duration_s: float | None
    kind: str
    gpus: int = 0
    first_up_s: float | None = None  # when it first had all its capacity
    done_s: float | None = None
    failed: str | None = None
    spot_preemptions: int = 0  # the cloud took its machines back
    evictions: int = 0  # a scheduler preempted it for higher work
    recoveries: int = 0  # relaunches after a loss
    useful_gpu_s: float = 0.0  # GPU-seconds of work kept


@dataclass
class Recorder:
    """Everything measured during one policy's run."""

    requests: dict[str, ReqStat] = field(default_factory=dict)
    times_s: list[float] = field(default_factory=list)
    markets: dict[str, list[int]] = field(
        default_factory=lambda: {"reserved": [], "spot": [], "on_demand": []}
    )
    queue: list[int] = field(default_factory=list)
    cost_usd: list[float] = field(default_factory=list)
    # Reserved machines that demand could fill, summed over looks (Sim.look_at_reservations)
    reserved_seen: int = 0
    reserved_used: int = 0  # of which launched in the reservation
    reserved_by: dict[str, list[int]] = field(default_factory=dict)  # per reservation: both
    spot_preemptions: int = 0
    scheduler_preemptions: int = 0
    replacements: int = 0
    launch_calls: int = 0
    cost: Cost = field(default_factory=Cost)

    def sample(self, t: float, markets: dict[str, int], queue: int, cost_usd: float) -> None:
        self.times_s.append(t)
        for market, series in self.markets.items():
            series.append(markets.get(market, 0))
        self.queue.append(queue)
        self.cost_usd.append(round(cost_usd, 4))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def time_to_capacity_s(rec: Recorder) -> list[float]:
    """Arrival to first full capacity, per request that got it."""
    return [s.first_up_s - s.arrival_s for s in rec.requests.values() if s.first_up_s is not None]


def by_template(rec: Recorder, template_of: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Per template (a task's name, or ``ray:<cluster>``): requests, completed, failed, never
    served, the USD of their machines and per completed request."""
    out: dict[str, dict[str, Any]] = {}
    for s in rec.requests.values():
        row = out.setdefault(
            template_of.get(s.rid, "?"),
            {"requests": 0, "completed": 0, "failed": 0, "never_served": 0, "cost_usd": 0.0},
        )
        row["requests"] += 1
        row["completed"] += s.done_s is not None
        row["failed"] += s.failed is not None
        row["never_served"] += s.first_up_s is None and s.failed is None
        row["cost_usd"] += rec.cost.by_owner.get(s.rid, 0.0)
    for row in out.values():
        done = row["completed"]
        row["cost_per_completed_usd"] = _r(row["cost_usd"] / done if done else None)
        row["cost_usd"] = _r(row["cost_usd"])
    return dict(sorted(out.items()))


def summary(
    policy: str, rec: Recorder, template_of: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The figures of one policy's day (JSON-ready; money in USD, times in seconds)."""
    stats = list(rec.requests.values())
    ttc = time_to_capacity_s(rec)
    useful_h = sum(s.useful_gpu_s for s in stats) / 3600.0
    total = rec.cost.instances_usd + rec.cost.reservations_usd
    per_request = [rec.cost.by_owner.get(s.rid, 0.0) for s in stats]
    return {
        "policy": policy,
        "requests": len(stats),
        "completed": sum(s.done_s is not None for s in stats),
        "failed": sum(s.failed is not None for s in stats),
        "never_got_capacity": sum(s.first_up_s is None and s.failed is None for s in stats),
        "total_cost_usd": _r(total),
        "instance_cost_usd": _r(rec.cost.instances_usd),
        "reservation_cost_usd": _r(rec.cost.reservations_usd),
        "useful_gpu_hours": _r(useful_h),
        "cost_per_gpu_hour_usd": _r(total / useful_h if useful_h else None, 4),
        "reservation_utilization": _r(
            rec.reserved_used / rec.reserved_seen if rec.reserved_seen else None, 4
        ),
        "reservations": {
            rid: {"utilization": _r(used / seen if seen else None, 4)}
            for rid, (seen, used) in sorted(rec.reserved_by.items())
        },
        "time_to_capacity_s": {
            "p50": _r(percentile(ttc, 50), 1),
            "p95": _r(percentile(ttc, 95), 1),
            "count": len(ttc),
        },
        "preemptions": {
            "spot": rec.spot_preemptions,
            "scheduler": rec.scheduler_preemptions,
        },
        "requests_failed": sum(s.failed is not None for s in stats),
        "replacements": rec.replacements,
        "recoveries": sum(s.recoveries for s in stats),
        "cost_per_request_usd": {
            "mean": _r(sum(per_request) / len(per_request) if per_request else None),
            "p50": _r(percentile(per_request, 50)),
            "p95": _r(percentile(per_request, 95)),
            "max": _r(max(per_request) if per_request else None),
        },
        "launch_calls": rec.launch_calls,
        "cost_per_completed_usd": _r(
            total / completed if (completed := sum(s.done_s is not None for s in stats)) else None
        ),
        "by_template": by_template(rec, template_of or {}),
    }


def series(rec: Recorder) -> dict[str, Any]:
    """The time series the plots draw (and ``--json`` carries)."""
    return {
        "t_s": rec.times_s,
        "instances_by_market": rec.markets,
        "queue_depth": rec.queue,
        "cost_usd": rec.cost_usd,
        "time_to_capacity_s": sorted(round(v, 1) for v in time_to_capacity_s(rec)),
    }
