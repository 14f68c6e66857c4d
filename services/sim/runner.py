"""``corral simulate``'s work: read the files, play each policy with the runtime's timers,
time it, and gather what to print, write and draw."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from corral.services.settings import Settings
from corral.shared.budgets import load_budgets
from corral.shared.sim.engine import SimTimers
from corral.shared.sim.run import run_policy
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import Workload, generate, load_workload


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
        workload.seed = seed
    if generate_n is not None:
        workload.arrivals = generate(
            workload.templates, workload.weights, generate_n, workload.seed, scenario.duration_s
        )
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
