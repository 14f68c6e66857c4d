"""``corral simulate``'s work: read the files, play each policy with the runtime's timers,
time it, and gather what to print, write and draw."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral.services.settings import Settings
from corral.shared.budgets import load_budgets
from corral.shared.sim.engine import SimTimers
from corral.shared.sim.run import run_policy
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import Workload, load_workload


def load(
    scenario_file: Path,
    workload_file: Path,
    *,
    generate_n: int | None = None,
    seed: int | None = None,
    budgets_file: Path | None = None,
) -> tuple[Any, Workload]:
    """The scenario and the workload (``generate_n``: that many arrivals drawn from the
    workload's templates and arrivals instead). Raises ConfigError for a wrong file."""
    scenario = load_scenario(scenario_file)
    workload = load_workload(workload_file)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
        workload = workload.with_seed(seed)  # its drawn arrivals drawn again
    if generate_n is not None:
        drawn = (generate_n, 14.0, 3.0, scenario.duration_s)  # generate()'s default curve
        workload = replace(workload, fixed=[], drawn=drawn).with_seed(workload.seed)
    if budgets_file is not None:
        workload.budgets = load_budgets(budgets_file)
    return scenario, workload


def simulate(
    scenario: Any, workload: Workload, policies: list[str], settings: Settings
) -> dict[str, Any]:
    """Every policy's day: figures, series and the wall time each took."""
    timers = SimTimers.of(settings.timers)
    out: list[dict[str, Any]] = []
    for name in policies:
        started = time.perf_counter()
        run = run_policy(scenario, workload, name, timers)
        wall_s = time.perf_counter() - started
        out.append(
            {
                "policy": name,
                "figures": run.figures,
                "series": run.series,
                "events": run.events,
                "wall_s": round(wall_s, 3),
                "simulated_s_per_wall_s": round(scenario.duration_s / wall_s, 1),
            }
        )
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "requests": len(workload.arrivals),
        "budgets": [b.name for b in workload.budgets],
        "policies": out,
    }


# Figures whose mean and spread over seeds the table and --json give.
SPREAD_KEYS = (
    "total_cost_usd",
    "cost_per_gpu_hour_usd",
    "reservation_utilization",
    "completed",
    "failed",
    "never_got_capacity",
    "cost_per_completed_usd",
)


def simulate_seeds(
    scenario: Any, workload: Workload, policies: list[str], settings: Settings, seeds: list[int]
) -> dict[str, Any]:
    """:func:`simulate` once per seed (scenario and drawn arrivals both reseeded), and per
    policy the mean and the (population) standard deviation of :data:`SPREAD_KEYS`."""
    runs = []
    for seed in seeds:
        day = workload.with_seed(seed)
        runs.append(simulate(scenario.model_copy(update={"seed": seed}), day, policies, settings))
    spread: dict[str, dict[str, dict[str, float | None]]] = {}
    for name in policies:
        rows = [p["figures"] for r in runs for p in r["policies"] if p["policy"] == name]
        spread[name] = {key: _mean_sd([row.get(key) for row in rows]) for key in SPREAD_KEYS}
    return {"scenario": scenario.name, "seeds": seeds, "runs": runs, "spread": spread}


def _mean_sd(values: list[Any]) -> dict[str, float | None]:
    known = [float(v) for v in values if v is not None]
    if not known:
        return {"mean": None, "sd": None}
    mean = sum(known) / len(known)
    sd = (sum((v - mean) ** 2 for v in known) / len(known)) ** 0.5
    return {"mean": round(mean, 4), "sd": round(sd, 4)}
