"""``corral cost-report``: what requests cost, as SkyPilot's ``sky cost-report``: one line per
request (recovery runs included) and the totals by user, project and cloud."""

from __future__ import annotations

from typing import Any

import typer

from corral.services.cli.api_access import api_client
from corral.services.cli.output import data_row, out, print_json


def register(app: typer.Typer) -> None:
    """Add ``corral cost-report`` to ``app``."""
    app.command("cost-report")(cost_report)


def cost_report(
    project: str | None = typer.Option(None, "--project", metavar="NAME", help="Only this one."),
    limit: int = typer.Option(200, "--limit", min=1, max=1000, help="The newest this many."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout."),
) -> None:
    """What each request cost over every run (relaunches and restarts included), and the
    totals by user, project and cloud (a member sees its projects' requests only)."""
    with api_client(as_json) as client:
        report = client.cost_report(project=project, limit=limit)
    if as_json:
        print_json(report.document())
        return
    _print_lines(report.requests)
    _print_totals(report.totals)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _table(*headers: str, title: str) -> Any:
    from rich import box
    from rich.table import Table

    return Table(*headers, title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)


def _print_lines(lines: list[dict[str, Any]]) -> None:
    if not lines:
        out.print("no requests", markup=False)
        return
    table = _table(
        "ID", "NAME", "USER", "PROJECT", "STATE", "CLOUDS", "GPUS", "RUNS", "DURATION", "COST",
        title="Requests",
    )  # fmt: skip
    for line in lines:
        data_row(
            table,
            line["id"],
            line.get("name") or "-",
            line.get("user") or "-",
            line.get("project") or "-",
            line["state"],
            ", ".join(line.get("clouds") or []) or "-",
            str(line.get("gpus") or 0),
            str(line["runs"]),
            _duration(line["duration_s"]),
            _usd(line.get("cost_usd")),
        )
    out.print(table)


def _print_totals(totals: dict[str, Any]) -> None:
    for key, label in (("by_user", "USER"), ("by_project", "PROJECT"), ("by_cloud", "CLOUD")):
        sums = totals.get(key) or {}
        if not sums:
            continue
        table = _table(label, "COST", title=f"By {label.lower()}")
        for name, usd in sums.items():
            data_row(table, name, _usd(usd))
        out.print(table)
    out.print(f"Total: {_usd(totals.get('total_usd'))}", markup=False)
    if totals.get("unpriced_runs"):
        out.print(
            f"({totals['unpriced_runs']} run(s) on machines of unknown price are not counted)",
            markup=False,
        )
