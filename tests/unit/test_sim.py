"""The simulator: the same seed gives the same figures, user files are checked with their
lines (exit 2 from the command), Corral's shared capacity-error memory spares launch calls,
an outage is failed over, and `corral simulate` draws its plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app
from corral.shared.configio import ConfigError
from corral.shared.sim.engine import Sim
from corral.shared.sim.run import make_policy, run_policy
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import Workload, generate, load_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"
HOURS_S = 6 * 3600.0


def _day(requests: int = 60, seed: int = 3) -> tuple[object, Workload]:
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    scenario = scenario.model_copy(update={"duration_s": HOURS_S, "seed": seed})
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    workload.arrivals = generate(workload.templates, workload.weights, requests, seed, HOURS_S)
    return scenario, workload


@pytest.mark.parametrize("policy", ["corral", "greedy", "static", "oracle"])
def test_the_same_seed_gives_the_same_figures(policy: str) -> None:
    first = run_policy(*_day(), policy)  # type: ignore[arg-type]
    again = run_policy(*_day(), policy)  # type: ignore[arg-type]
    assert first.figures == again.figures
    assert first.series == again.series
    assert first.figures["requests"] == 60 and first.figures["completed"] > 0
    other = run_policy(*_day(seed=4), policy)  # type: ignore[arg-type]
    assert other.figures != first.figures  # the seed is really used


def test_corral_runs_every_kind_of_work_and_uses_its_reservation() -> None:
    run = run_policy(*_day(120), "corral")  # type: ignore[arg-type]
    f = run.figures
    assert f["completed"] >= 60 and f["reservation_utilization"] > 0
    assert f["time_to_capacity_s"]["count"] > 0
    assert set(run.series["instances_by_market"]) == {"reserved", "spot", "on_demand"}
    assert max(run.series["instances_by_market"]["reserved"]) > 0


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_the_pool_passes_skipped_as_quiet_would_decide_nothing(seed: int) -> None:
    """A pass the simulator skips (settled, nothing touched, no time threshold crossed) is run
    anyway under ``check_skips``, which fails if it decides or does anything; and skipping
    changes no figure."""
    scenario, workload = _day(160, seed)
    runs = {}
    for check in (False, True):
        sim = Sim(scenario, workload.arrivals, check_skips=check)  # type: ignore[arg-type]
        policy = make_policy("corral", workload)
        sim.run(policy)
        pools = [*policy.pools.values(), policy.det]  # type: ignore[attr-defined]
        runs[check] = (sim.recorder.requests, [(p.skipped, p.ledger.version) for p in pools])
    (skipping, counts), (checked, checked_counts) = runs[False], runs[True]
    assert all(skipped > 0 for skipped, _ in counts)  # there was something to check
    assert [v for _, v in counts] == [v for _, v in checked_counts]  # versions counted alike
    assert all(skipped == 0 for skipped, _ in checked_counts)
    assert skipping == checked


SCENARIO = """\
seed: 1
duration: 2h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g5.xlarge: {on_demand: 0}}}
          us-east-1b: {capacity: {g5.xlarge: {on_demand: 20}}}
          us-east-1c: {capacity: {g5.xlarge: {on_demand: 20}}}
outages:
  - {cloud: aws, zone: us-east-1b, from: 0s, to: 1h}
"""

WORKLOAD = """\
arrivals:
  - {at: 0s, every: 1m, count: 20, duration: 30m,
     task: {resources: {accelerators: A10G:1}}}
"""


def _files(tmp_path: Path, scenario: str = SCENARIO, workload: str = WORKLOAD) -> tuple[Path, Path]:
    (tmp_path / "s.yaml").write_text(scenario)
    (tmp_path / "w.yaml").write_text(workload)
    return tmp_path / "s.yaml", tmp_path / "w.yaml"


def test_the_shared_memory_of_sold_out_zones_spares_launch_calls(tmp_path: Path) -> None:
    s, w = _files(tmp_path)
    scenario, workload = load_scenario(s), load_workload(w)
    corral = run_policy(scenario, workload, "corral").figures
    greedy = run_policy(scenario, workload, "greedy").figures
    # Every request gets its machine in us-east-1c: 1a has none, 1b is out for the first hour.
    assert corral["completed"] == greedy["completed"] == 20
    # Corral remembers 1a and 1b once for everyone (blocked_ttl_s); greedy learns per request.
    assert corral["launch_calls"] < greedy["launch_calls"]
    assert greedy["launch_calls"] >= 3 * 20 - 2


def test_a_typo_is_named_with_its_file_line_and_field(tmp_path: Path) -> None:
    s, w = _files(tmp_path, SCENARIO.replace("  aws:\n", "  aws:\n    bot: 90s\n"))
    with pytest.raises(ConfigError) as caught:
        load_scenario(s)
    assert str(caught.value.issues[0]) == f"{s}:5: clouds.aws.bot: unknown field " + (
        "(not part of this file's schema; check the spelling)"
    )
    s, _ = _files(tmp_path, SCENARIO.replace("zone: us-east-1b", "zone: us-east-9z"))
    with pytest.raises(ConfigError, match=r"s.yaml:14: outages\[0\].zone: no zone 'us-east-9z'"):
        load_scenario(s)
    _, w = _files(tmp_path, workload=WORKLOAD.replace("every: 1m", "every: soon"))
    with pytest.raises(ConfigError, match=r"w.yaml:2: arrivals\[0\].every: expected a duration"):
        load_workload(w)


TWICE = """\
budgets:
  - {name: cap, selector: team=a, usd_per_hour: 10}
  - {name: other, selector: team=b, usd_per_hour: 10}
  - {name: cap, selector: team=c, usd_per_hour: 20}
"""
TWICE_SAID = (
    "budgets[2].name: budget name 'cap' is given more than once (first at budgets[0]); "
    "names must be distinct"
)
TITLE = "budgets[2].name: budget name 'cap' is given more than once"


def test_a_budget_name_given_twice_is_named_at_its_second_line(tmp_path: Path) -> None:
    # Inline in the workload file, in a budgets file it names, and in --budgets: exit 2.
    s, w = _files(tmp_path, workload=TWICE + WORKLOAD)
    with pytest.raises(ConfigError) as caught:
        load_workload(w)
    assert str(caught.value.issues[0]).startswith(f"{w}:4: {TWICE_SAID}")
    bad = CliRunner().invoke(app, ["simulate", str(s), str(w)])
    assert bad.exit_code == 2 and f"{w}:4: {TITLE}" in bad.output.replace("\n", " ")
    (tmp_path / "b.yaml").write_text(TWICE)
    s, w = _files(tmp_path, workload="budgets: b.yaml\n" + WORKLOAD)
    with pytest.raises(ConfigError) as caught:
        load_workload(w)
    assert str(caught.value.issues[0]).startswith(f"{tmp_path / 'b.yaml'}:4: {TWICE_SAID}")
    s, w = _files(tmp_path)
    bad = CliRunner().invoke(
        app, ["simulate", str(s), str(w), "--budgets", str(tmp_path / "b.yaml")]
    )
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert f"b.yaml:4: {TITLE}" in bad.output.replace("\n", " ")


def test_the_command_exits_2_on_a_wrong_file_and_draws_its_plots(tmp_path: Path) -> None:
    s, w = _files(tmp_path, SCENARIO.replace("seed: 1", "seed: one"))
    bad = CliRunner().invoke(app, ["simulate", str(s), str(w)])
    assert bad.exit_code == 2
    assert f"{s}:1: seed:" in bad.output
    s, w = _files(tmp_path)
    plots = tmp_path / "plots"
    args = [
        "simulate",
        str(s),
        str(w),
        "--json",
        "--plots",
        str(plots),
        "--policies",
        "corral,oracle",
    ]
    good = CliRunner().invoke(app, args)
    assert good.exit_code == 0, good.output
    result = json.loads(good.stdout)
    assert [p["policy"] for p in result["policies"]] == ["corral", "oracle"]
    for path in result["plots"]:
        assert Path(path).stat().st_size > 10_000  # a real picture, not an empty file


def test_ray_work_finding_idle_nodes_starts_at_once() -> None:
    """A Ray arrival that finds idle workers is placed at once. It used to wait for a node to
    come up or other work to end, which on the seeded day left 60 of its 66 Ray requests
    unserved under Corral (and none under greedy)."""
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    run = run_policy(scenario, workload, "corral")
    ray = run.figures["by_template"]["ray:ray-l4"]
    assert ray["requests"] > 60
    assert ray["never_served"] == 0 and ray["completed"] >= ray["requests"] - 3


def test_both_reservations_are_drawn_on_including_gcps_in_snake_case() -> None:
    """The GCP pool's template writes its reservation as ``reservation_affinity`` with a full
    resource path; the simulator reads it with the runtime's function and uses it."""
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    run = run_policy(scenario, workload, "corral")
    assert run.figures["by_template"]["train-gcp"]["completed"] > 0
    assert run.figures["reservation_utilization"] >= 0.8


def test_the_table_shows_completed_never_served_and_cost_per_completed(tmp_path: Path) -> None:
    args = [
        "simulate",
        str(EXAMPLES / "day-scenario.yaml"),
        str(EXAMPLES / "day-workload.yaml"),
        "--policies",
        "corral,greedy",
        "--generate",
        "40",
        "--seeds",
        "2",
    ]
    ran = CliRunner().invoke(app, args)
    assert ran.exit_code == 0, ran.stdout
    assert "done" in ran.stdout and "never" in ran.stdout and "USD/done" in ran.stdout
    assert "mean +- sd" in ran.stdout
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert data["seeds"] == [7, 8]
    corral = data["spread"]["corral"]
    assert corral["completed"]["mean"] is not None and corral["completed"]["sd"] is not None
    by_template = data["runs"][0]["policies"][0]["figures"]["by_template"]
    assert sum(row["requests"] for row in by_template.values()) == 40


def test_on_the_seeded_day_corral_costs_less_than_greedy_and_serves_as_many() -> None:
    """The repo's seeded day: Corral's cost per useful GPU-hour below greedy's and within 5 %
    of the oracle's (both held to the machine pools' sizes, as Corral is), and no more
    requests failed or never served than greedy."""
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    corral = run_policy(scenario, workload, "corral").figures
    greedy = run_policy(scenario, workload, "greedy").figures
    oracle = run_policy(scenario, workload, "oracle").figures
    assert corral["cost_per_gpu_hour_usd"] < greedy["cost_per_gpu_hour_usd"]
    assert corral["cost_per_gpu_hour_usd"] <= 1.05 * oracle["cost_per_gpu_hour_usd"]
    assert corral["never_got_capacity"] <= greedy["never_got_capacity"]
    assert corral["failed"] <= greedy["failed"]


def test_on_the_seeded_day_reservations_are_used_90_percent_while_demand_exists() -> None:
    """Reserved machine-hours held by requests over those that demand able to use the
    reservation could fill while it waits or runs (docs/cli.md); each reservation is drawn on.
    What is left unused: a reserved machine idle for the replacement threshold while work it
    could take runs on spot or on-demand, and, for the GCP pool, whose compute config does not
    enable replacement, until the idle machine is reaped."""
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    corral = run_policy(scenario, workload, "corral").figures
    assert corral["reservation_utilization"] >= 0.9
    by_reservation = corral["reservations"]
    assert set(by_reservation) == {"cr-a100-east", "res-a100-central"}
    assert all(r["utilization"] >= 0.8 for r in by_reservation.values())


FULL_ZONE = """\
seed: 1
duration: 3h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g5.xlarge: {on_demand: 2}}}
"""


def _full_zone(tmp_path: Path, **task: object) -> Workload:
    fields = ", ".join(f"{k}: {v}" for k, v in task.items())
    extra = f", {fields}" if fields else ""
    (tmp_path / "w.yaml").write_text(
        "arrivals:\n  - {at: 0s, every: 1s, count: 6, duration: 30m,\n"
        f"     task: {{resources: {{accelerators: A10G:1}}{extra}}}}}\n"
    )
    return load_workload(tmp_path / "w.yaml")


def test_direct_requests_wait_for_capacity_like_greedy_instead_of_failing(
    tmp_path: Path,
) -> None:
    """Six requests for a zone with room for two: Corral's four that find it full wait and run
    as the first ones end (as greedy's retry-until-up does), none FAILS."""
    (tmp_path / "s.yaml").write_text(FULL_ZONE)
    scenario = load_scenario(tmp_path / "s.yaml")
    workload = _full_zone(tmp_path)
    corral = run_policy(scenario, workload, "corral").figures
    greedy = run_policy(scenario, workload, "greedy").figures
    assert corral["failed"] == greedy["failed"] == 0
    assert corral["completed"] == greedy["completed"] == 6


def test_a_waiting_request_takes_the_room_our_ended_machine_freed_at_once(
    tmp_path: Path,
) -> None:
    """The same six requests: when the first two end, the two oldest waiters walk their chains
    at that moment (``failover.capacity_freed``: the sold-out block lifted, one waiter per
    machine), not at their next backoff or block expiry. So each gets capacity no later than
    greedy, which asks every 30 s, with a sixth of greedy's launch calls. Before this rule
    Corral's median wait was 2,050 s against greedy's 1,920."""
    (tmp_path / "s.yaml").write_text(FULL_ZONE)
    scenario = load_scenario(tmp_path / "s.yaml")
    workload = _full_zone(tmp_path)
    corral = run_policy(scenario, workload, "corral").figures
    greedy = run_policy(scenario, workload, "greedy").figures
    assert corral["completed"] == greedy["completed"] == 6
    for q in ("p50", "p95"):
        assert corral["time_to_capacity_s"][q] <= greedy["time_to_capacity_s"][q], q
    assert corral["launch_calls"] * 6 <= greedy["launch_calls"]


def test_fail_fast_and_max_wait_fail_in_the_simulator_too(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(FULL_ZONE)
    scenario = load_scenario(tmp_path / "s.yaml")
    fast = run_policy(scenario, _full_zone(tmp_path, retry_until_up="false"), "corral").figures
    assert (fast["failed"], fast["completed"]) == (4, 2)
    # 10 minutes of waiting is not enough for a machine that frees after 30.
    short = run_policy(scenario, _full_zone(tmp_path, max_wait="10m"), "corral").figures
    assert (short["failed"], short["completed"]) == (4, 2)
    # 45 minutes is: the first two end at 30 minutes, the next two at 60 (past 45: they fail).
    longer = run_policy(scenario, _full_zone(tmp_path, max_wait="45m"), "corral").figures
    assert (longer["failed"], longer["completed"]) == (2, 4)


def test_greedy_and_the_oracle_are_held_to_a_machine_pools_size_as_corral_is(
    tmp_path: Path,
) -> None:
    """Sixteen workloads at once for the train pool (reserved, spot and on-demand partitions
    of 4): greedy and the oracle know no pools, but hold no more machines for them at once
    than the pool has (12, as Corral; the oracle 4 per market); the other four wait for the
    first ones to end, and all complete."""
    (tmp_path / "w.yaml").write_text(
        f"machine_pools: {{train: {EXAMPLES / 'train-pool.yaml'}}}\n"
        "arrivals:\n  - {at: 0s, every: 1s, count: 16, duration: 1h,\n"
        f"     task: {{name: t, compute_config: {EXAMPLES / 'train-compute.yaml'}}}}}\n"
    )
    workload = load_workload(tmp_path / "w.yaml")
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    scenario = scenario.model_copy(update={"duration_s": 4 * 3600.0})
    for policy in ("greedy", "oracle", "corral"):
        sim = Sim(scenario, workload.arrivals)  # type: ignore[arg-type]
        stats = sim.run(make_policy(policy, workload)).requests.values()
        early = [s for s in stats if s.first_up_s is not None and s.first_up_s < 1800.0]
        assert len(early) == 12, policy
        assert sum(s.done_s is not None for s in stats) == 16, policy


SPOT_STORM = """\
seed: 2
duration: 6h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0,
                  spot_price_usd_per_hour: 0.4}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g5.xlarge: {spot: 4, spot_preemptions_per_hour: 12}}}
"""


@pytest.mark.parametrize("policy", ["corral", "greedy"])
def test_a_lost_machine_is_relaunched_up_to_the_limit_unless_the_task_recovers(
    tmp_path: Path, policy: str
) -> None:
    """Spot taken back every 5 minutes or so, a 2-hour job: under both policies (greedy held to
    Corral's limit) it fails once ``relaunch_limit`` relaunches are spent; with a
    ``job_recovery`` it is recovered from every loss, as the runtime's reconcile does."""
    (tmp_path / "s.yaml").write_text(SPOT_STORM)
    scenario = load_scenario(tmp_path / "s.yaml")

    def run(extra: str) -> dict[str, object]:
        (tmp_path / "w.yaml").write_text(
            "arrivals:\n  - {at: 0s, duration: 2h,\n"
            f"     task: {{resources: {{accelerators: A10G:1, use_spot: true{extra}}}}}}}\n"
        )
        return run_policy(scenario, load_workload(tmp_path / "w.yaml"), policy).figures

    plain = run("")
    assert plain["failed"] == 1 and plain["recoveries"] == 3  # relaunch_limit (3)
    managed = run(", job_recovery: FAILOVER")
    assert managed["failed"] == 0 and managed["recoveries"] > 3


HOURLY_RECLAIMS = """\
seed: 3
duration: 8h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0,
                  spot_price_usd_per_hour: 0.4}
    regions:
      us-east-1:
        zones:
          us-east-1a:
            capacity:
              g5.xlarge:
                spot: [{at: 0s, count: 1}, {at: 1h, count: 0}, {at: 65m, count: 1},
                       {at: 130m, count: 0}, {at: 135m, count: 1}, {at: 200m, count: 0},
                       {at: 205m, count: 1}, {at: 270m, count: 0}, {at: 275m, count: 1}]
                spot_preemptions_per_hour: 0
"""


@pytest.mark.parametrize("policy", ["corral", "greedy"])
def test_a_long_spot_job_that_loses_its_machine_every_hour_runs_to_its_end(
    tmp_path: Path, policy: str
) -> None:
    """The spot market takes the only machine back four times, each after an hour's run: a
    4-hour job without a job_recovery is relaunched each time (each loss starts
    ``relaunch_limit``'s count over, as the runtime's reconcile decides) and completes; it
    failed on its fourth loss when the limit counted every loss."""
    (tmp_path / "s.yaml").write_text(HOURLY_RECLAIMS)
    (tmp_path / "w.yaml").write_text(
        "arrivals:\n  - {at: 0s, duration: 4h,\n"
        "     task: {resources: {accelerators: A10G:1, use_spot: true}}}\n"
    )
    scenario = load_scenario(tmp_path / "s.yaml")
    figures = run_policy(scenario, load_workload(tmp_path / "w.yaml"), policy).figures
    assert figures["recoveries"] == 4
    assert (figures["failed"], figures["completed"]) == (0, 1)


def test_each_arrivals_entry_keeps_its_own_task(tmp_path: Path) -> None:
    """Every entry of ``arrivals`` was read with the first entry's task (a one-entry list's
    path): a CPU entry after a GPU one asked for the GPU."""
    (tmp_path / "w.yaml").write_text(
        "arrivals:\n"
        "  - {at: 0s, count: 2, task: {name: g, resources: {accelerators: A10G:1}}}\n"
        "  - {at: 5s, task: {name: c, num_nodes: 2, resources: {cpus: 8}}}\n"
    )
    arrivals = load_workload(tmp_path / "w.yaml").arrivals
    tasks = [(a.id, a.task.name, a.task.num_nodes) for a in arrivals if a.task is not None]
    assert tasks == [("a0-0", "g", 1), ("a0-1", "g", 1), ("a1-0", "c", 2)]
    assert arrivals[2].task is not None and arrivals[2].task.resources.accelerators is None


def test_a_region_outage_that_takes_a_ray_clusters_nodes_is_played(tmp_path: Path) -> None:
    """An outage of the Ray cluster's region that takes running machines: its Ray nodes are
    taken back like any machine (counted as spot preemptions of the day, not of a request:
    a node is no request). The simulator raised KeyError on the node's id."""
    text = (EXAMPLES / "day-scenario.yaml").read_text()
    outage = "  - {cloud: gcp, region: us-central1, from: 2h, to: 3h, error: timeout, "
    (tmp_path / "s.yaml").write_text(text + outage + "lose_running: true}\n")
    scenario = load_scenario(tmp_path / "s.yaml").model_copy(update={"duration_s": HOURS_S})
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    ray = [i for i, t in enumerate(workload.templates) if t.ray is not None]
    weights = [1.0 if i in ray else 0.0 for i in range(len(workload.templates))]
    workload.arrivals = generate(workload.templates, weights, 40, 3, 2 * 3600.0)
    run = run_policy(scenario, workload, "corral")
    ray_stats = run.figures["by_template"]["ray:ray-l4"]
    assert ray_stats["requests"] == 40 and run.figures["preemptions"]["spot"] > 0


# The full zone's cloud with room for 200, out for the first hour.
OUTAGE_HOUR = (
    FULL_ZONE.replace("on_demand: 2}", "on_demand: 200}")
    + "outages:\n  - {cloud: aws, zone: us-east-1a, from: 0s, to: 1h}\n"
)


def test_requests_waiting_on_the_same_blocks_are_looked_at_together(tmp_path: Path) -> None:
    """150 requests, one every 20 s, for the only zone, out for the first hour: each waits on
    its block, which the first to walk again at every expiry renews for the rest. They are
    looked at by one timer per set of blocks (``Launcher._due``), not one each: 708 events
    for the day where a timer per request made 2,512, with the same figures: every request
    runs, 170 launch calls (the first, and one per expiry within the hour), none before the
    outage ends."""
    s, w = _files(
        tmp_path,
        OUTAGE_HOUR,
        "arrivals:\n  - {at: 0s, every: 20s, count: 150, duration: 10m,\n"
        "     task: {resources: {accelerators: A10G:1}}}\n",
    )
    run = run_policy(load_scenario(s), load_workload(w), "corral")
    f = run.figures
    assert (f["completed"], f["failed"], f["launch_calls"]) == (150, 0, 170)
    assert (f["time_to_capacity_s"]["p50"], f["time_to_capacity_s"]["p95"]) == (2174.0, 3515.0)
    assert run.events < 6 * 150


def test_the_block_memory_counts_each_clouds_changes_apart() -> None:
    """A pool works out whether its launches are blocked again only when its own cloud's
    blocks changed: every add, renewal, lift and expiry counts for that cloud alone."""
    from corral.shared.placement import Block
    from corral.shared.sim.direct import BlockMemory

    memory = BlockMemory()
    aws = Block(cloud="aws", region="us-east-1", zone="us-east-1a", instance_type="p4d.24xlarge")
    gcp = Block(cloud="gcp", region="us-central1")
    memory.add(aws, 0.0, 60.0)
    assert (memory.changes_of["aws"], memory.changes_of["gcp"], memory.changes) == (1, 0, 1)
    memory.add(aws, 10.0, 60.0)  # renewed: its end moves, a change
    memory.add(gcp, 10.0, 30.0)
    assert (memory.changes_of["aws"], memory.changes_of["gcp"], memory.changes) == (2, 1, 3)
    assert memory.active_until(50.0) == [(aws, 70.0)]  # gcp's ended at 40: counted as gcp's
    assert (memory.changes_of["aws"], memory.changes_of["gcp"], memory.changes) == (2, 2, 4)
    assert memory.lift([aws], 50.0) == 1
    assert (memory.changes_of["aws"], memory.changes_of["gcp"], memory.changes) == (3, 2, 5)
