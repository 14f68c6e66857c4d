"""``corral simulate SCENARIO WORKLOAD``: a day replayed through Corral's own decision code and
the policies it is compared with, against a simulated cloud; figures, and PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from corral.services.cli.output import EXIT_INPUT, err, out, print_issues, print_json

POLICY_NAMES = ("corral", "greedy", "static", "oracle")  # corral.shared.sim.run.POLICIES
# corral.shared.sim.run.EXTRA_POLICIES: played only when named.
EXTRA_POLICY_NAMES = ("corral-wide-blocks",)


def simulate(
    scenario: Annotated[Path, typer.Argument(help="the scenario file (clouds, capacity, ...)")],
    workload: Annotated[Path, typer.Argument(help="the workload file (arrivals or generate)")],
    policies: Annotated[
        str,
        typer.Option(
            "--policies",
            help="comma-separated: corral, greedy, static, oracle (corral-wide-blocks: Corral "
            "with the blocks of before issue #46)",
        ),
    ] = ",".join(POLICY_NAMES),
    generate: Annotated[
        int | None,
        typer.Option("--generate", min=1, help="draw this many arrivals from the templates"),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="override both files' seeds")] = None,
    seeds: Annotated[
        int | None,
        typer.Option(
            "--seeds",
            min=1,
            help="play N seeds (from --seed, else the scenario's): mean and spread",
        ),
    ] = None,
    budgets: Annotated[
        Path | None, typer.Option("--budgets", help="a budgets file (replaces the workload's)")
    ] = None,
    plots: Annotated[
        Path | None, typer.Option("--plots", help="write the PNG plots into this folder")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
    series: Annotated[
        bool, typer.Option("--series", help="with --json: the time series too")
    ] = False,
) -> None:
    """Replay a day under each policy; print cost, time to capacity, preemptions, ..."""
    from corral.services.settings import get_settings
    from corral.services.sim.runner import load, simulate_seeds
    from corral.services.sim.runner import simulate as run
    from corral.shared.configio import ConfigError

    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    known = (*POLICY_NAMES, *EXTRA_POLICY_NAMES)
    unknown = [p for p in chosen if p not in known]
    if unknown or not chosen:
        err.print(f"--policies: expected some of {', '.join(known)}, got {policies!r}")
        raise typer.Exit(EXIT_INPUT)
    try:
        loaded, day = load(scenario, workload, generate_n=generate, seed=seed, budgets_file=budgets)
    except ConfigError as exc:
        print_issues(exc.issues)
        raise typer.Exit(EXIT_INPUT) from None
    if seeds is not None:
        first = loaded.seed if seed is None else seed
        many = simulate_seeds(
            loaded, day, chosen, get_settings(), list(range(first, first + seeds))
        )
        if as_json:
            for one in many["runs"]:
                for run_ in one["policies"]:
                    run_.pop("series", None)
            print_json(many)
        else:
            for one in many["runs"]:
                _table(one)
            _spread_table(many)
        return
    result = run(loaded, day, chosen, get_settings())
    paths: list[Path] = []
    if plots is not None:
        from corral.services.sim.plots import draw

        paths = draw(result["policies"], plots)
        result["plots"] = [str(p) for p in paths]
    if as_json:
        if not series:
            for run_ in result["policies"]:
                run_.pop("series", None)
        print_json(result)
        return
    _table(result)
    for path in paths:
        out.print(f"plot: {path}", markup=False)


COLUMNS = (
    ("policy", 8), ("total USD", 10), ("USD/GPU-h", 9), ("resv used", 9), ("TTC p50 s", 9),
    ("TTC p95 s", 9), ("spot pre", 8), ("sched pre", 9), ("done", 5), ("failed", 6),
    ("never", 5), ("USD/done", 8), ("replaced", 8), ("USD/req p50", 11), ("p95", 8),
    ("wall s", 6),
)  # fmt: skip


def _table(result: dict[str, Any]) -> None:
    """The figures, one row per policy (plain text: any terminal width, any pipe)."""
    out.print(
        f"{result['scenario']} (seed {result['seed']}, {result['requests']} requests"
        + (f", budgets: {', '.join(result['budgets'])}" if result["budgets"] else "")
        + ")",
        markup=False,
    )
    out.print("  ".join(h.rjust(w) for h, w in COLUMNS), markup=False)
    for run_ in result["policies"]:
        f = run_["figures"]
        util = f["reservation_utilization"]
        cells = (
            run_["policy"],
            f"{f['total_cost_usd']:.0f}",
            _num(f["cost_per_gpu_hour_usd"]),
            "-" if util is None else f"{util:.0%}",
            _num(f["time_to_capacity_s"]["p50"], 0),
            _num(f["time_to_capacity_s"]["p95"], 0),
            str(f["preemptions"]["spot"]),
            str(f["preemptions"]["scheduler"]),
            str(f["completed"]),
            str(f["requests_failed"]),
            str(f["never_got_capacity"]),
            _num(f["cost_per_completed_usd"]),
            str(f["replacements"]),
            _num(f["cost_per_request_usd"]["p50"]),
            _num(f["cost_per_request_usd"]["p95"]),
            f"{run_['wall_s']:.1f}",
        )
        out.print(
            "  ".join(c.rjust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True)), markup=False
        )


SPREAD_COLUMNS = (
    ("total_cost_usd", "total USD", 0),
    ("cost_per_gpu_hour_usd", "USD/GPU-h", 3),
    ("reservation_utilization", "resv used", 2),
    ("completed", "done", 1),
    ("failed", "failed", 1),
    ("never_got_capacity", "never", 1),
    ("cost_per_completed_usd", "USD/done", 2),
)


def _spread_table(many: dict[str, Any]) -> None:
    """Per policy, each figure's mean +- standard deviation over the seeds."""
    seeds = many["seeds"]
    out.print(f"over seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}): mean +- sd", markup=False)
    out.print(
        "  ".join(["policy".rjust(8), *(h.rjust(16) for _, h, _ in SPREAD_COLUMNS)]),
        markup=False,
    )
    for name, figures in many["spread"].items():
        cells = [name.rjust(8)]
        for key, _, digits in SPREAD_COLUMNS:
            m, sd = figures[key]["mean"], figures[key]["sd"]
            text = "-" if m is None else f"{m:.{digits}f} +- {sd:.{digits}f}"
            cells.append(text.rjust(16))
        out.print("  ".join(cells), markup=False)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def register(app: typer.Typer) -> None:
    """Add ``corral simulate`` to the command line."""
    app.command("simulate")(simulate)
