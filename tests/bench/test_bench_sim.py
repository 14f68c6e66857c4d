"""Simulator benchmark: a simulated day of 10,000 requests (CORRAL_BENCH_SCALE=small: 1,000)
on the seeded two-cloud scenario, under Corral's policy. Reported as simulated seconds per
wall second, and per decision against a bare planner call measured in the same run."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest

from corral.shared.planner import plan
from corral.shared.sim.run import run_policy
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import generate, load_workload

pytestmark = pytest.mark.bench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


def test_a_simulated_day() -> None:
    small = os.environ.get("CORRAL_BENCH_SCALE") == "small"
    requests = 1_000 if small else 10_000
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "bench-workload.yaml")
    workload.arrivals = generate(workload.templates, workload.weights, requests, 1, 86400.0)
    # The baseline: the planner alone, over the same requests' tasks; the median of five
    # rounds after a warm-up (one round is a few tens of milliseconds: noise on a shared box).
    tasks = [a.task for a in workload.arrivals if a.task is not None][:2000]
    catalog, clouds = scenario.catalog(), tuple(scenario.clouds)
    rounds = []
    for _ in range(6):
        started = time.perf_counter()
        for task in tasks:
            plan(task, catalog, clouds=clouds)
        rounds.append((time.perf_counter() - started) / len(tasks))
    plan_s = statistics.median(rounds[1:])
    started = time.perf_counter()
    run = run_policy(scenario, workload, "corral")
    wall_s = time.perf_counter() - started
    per_event_s = wall_s / run.events
    print(
        f"\nsimulator: {requests} requests over a simulated day in {wall_s:.1f} s wall "
        f"({86400 / wall_s:.0f} simulated s per wall s; {run.events} events, "
        f"{per_event_s * 1e6:.0f} us each = {per_event_s / plan_s:.1f} bare planner calls of "
        f"{plan_s * 1e6:.0f} us); completed {run.figures['completed']}"
    )
    assert run.figures["requests"] == requests and run.figures["completed"] > requests // 2
    assert wall_s < (20.0 if small else 30.0)  # the target: a day of 10,000 under 30 s


# The held-out day's shape on the seeded scenario: machine pools, reservations, spot reclaims,
# a zone sold out (the scenario's own) and a whole region hung for two hours, taking its
# running machines (a Ray cluster's nodes among them).
REGION_OUTAGE = (
    "  - {cloud: gcp, region: us-central1, from: 15h, to: 17h, error: timeout, "
    "lose_running: true}\n"
)


def test_a_day_shaped_like_the_held_out_one(tmp_path: Path) -> None:
    """10,000 requests (CORRAL_BENCH_SCALE=small: 1,000) drawn from the seeded day's templates
    (pools, Determined trials, Ray bursts, direct work) on the seeded scenario with a region
    outage added; the same report as :func:`test_a_simulated_day`. The issue's target is the
    same 30 s (measured far above it on the shared machine: docs/benchmarks.md)."""
    from corral.services.sim.runner import load

    small = os.environ.get("CORRAL_BENCH_SCALE") == "small"
    requests = 1_000 if small else 10_000
    for name in os.listdir(EXAMPLES):  # the workload's pool, master and cluster files
        (tmp_path / name).write_bytes((EXAMPLES / name).read_bytes())
    scenario_file = tmp_path / "day-scenario.yaml"
    scenario_file.write_text(scenario_file.read_text() + REGION_OUTAGE)
    scenario, workload = load(scenario_file, tmp_path / "day-workload.yaml", generate_n=requests)
    tasks = [a.task for a in workload.arrivals if a.task is not None][:2000]
    catalog, clouds = scenario.catalog(), tuple(scenario.clouds)
    rounds = []
    for _ in range(6):
        started = time.perf_counter()
        for task in tasks:
            plan(task, catalog, clouds=clouds)
        rounds.append((time.perf_counter() - started) / len(tasks))
    plan_s = statistics.median(rounds[1:])
    started, cpu_started = time.perf_counter(), time.process_time()
    run = run_policy(scenario, workload, "corral")
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    per_event_s = wall_s / run.events
    print(
        f"\nheld-out-shaped day: {requests} requests in {wall_s:.1f} s wall, {cpu_s:.1f} s CPU "
        f"({run.events} events, {per_event_s * 1e6:.0f} us each = "
        f"{per_event_s / plan_s:.1f} bare planner calls of {plan_s * 1e6:.0f} us); completed "
        f"{run.figures['completed']}, spot preemptions {run.figures['preemptions']['spot']}"
    )
    assert run.figures["requests"] == requests and run.figures["preemptions"]["spot"] > 0
    assert wall_s < (20.0 if small else 30.0)  # the target


@pytest.mark.parametrize("seed", [6, 8, 9, 10, 11, 12, 13, 14, 15, 16])
def test_on_days_of_other_seeds_corral_is_within_5_percent_of_the_oracle(seed: int) -> None:
    """The seeded day's files with both seeds set to another (``corral simulate --seed N``):
    Corral's cost per useful GPU-hour below greedy's and within 5 % of the oracle's (both held
    to the machine pools' sizes, as Corral is), and no more requests failed or never served
    than greedy; reservations used >= 90 % while demand that could use them exists."""
    from corral.services.sim.runner import load

    scenario, workload = load(
        EXAMPLES / "day-scenario.yaml", EXAMPLES / "day-workload.yaml", seed=seed
    )
    f = {p: run_policy(scenario, workload, p).figures for p in ("corral", "greedy", "oracle")}
    corral, greedy, oracle = f["corral"], f["greedy"], f["oracle"]
    ratio = corral["cost_per_gpu_hour_usd"] / oracle["cost_per_gpu_hour_usd"]
    print(
        f"\nseed {seed}: USD per useful GPU-hour corral {corral['cost_per_gpu_hour_usd']:.3f}, "
        f"greedy {greedy['cost_per_gpu_hour_usd']:.3f}, oracle "
        f"{oracle['cost_per_gpu_hour_usd']:.3f} ({ratio:.3f}x); reservations "
        f"{corral['reservation_utilization']:.0%}"
    )
    assert corral["cost_per_gpu_hour_usd"] < greedy["cost_per_gpu_hour_usd"]
    assert ratio <= 1.05
    assert corral["failed"] <= greedy["failed"]
    assert corral["never_got_capacity"] <= greedy["never_got_capacity"]
    assert corral["reservation_utilization"] >= 0.9
