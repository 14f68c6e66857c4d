"""``corral check``: which clouds Corral can launch on from here, as SkyPilot's ``sky check``:
per cloud, whether it is enabled (``CORRAL_CLOUDS``), its credentials found, who they are and
what fails. It asks from this machine with this shell's settings: run it where the workers run
(or with their settings) to learn what they can reach."""

from __future__ import annotations

from typing import Any

import typer

from corral.services.cli.output import EXIT_INPUT, EXIT_NEGATIVE, data_row, fail, out, print_json


def register(app: typer.Typer) -> None:
    """Add ``corral check`` to ``app``."""
    app.command("check")(check)


def check(
    clouds: list[str] | None = typer.Argument(
        None, metavar="[CLOUD]...", help="Only these clouds (default: every cloud Corral has)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout."),
) -> None:
    """Each cloud: enabled here or not, credentials found, as whom, and what fails. Exit 1
    when no enabled cloud is ready."""
    from corral.services.providers.registry import check_cloud, display_name, registered_clouds
    from corral.services.settings import get_settings

    settings = get_settings()
    known = registered_clouds()
    wanted = [c.strip().lower() for c in clouds or known]
    unknown = [c for c in wanted if c not in known]
    if unknown:
        fail(f"no cloud {', '.join(unknown)} (clouds: {', '.join(known)})", EXIT_INPUT)
    from concurrent.futures import ThreadPoolExecutor

    # Side by side: each cloud's SDK and its first call take seconds of their own.
    with ThreadPoolExecutor(max_workers=len(wanted) or 1) as pool:
        found = pool.map(lambda c: check_cloud(c, settings, lambda: _local_cloud(settings)), wanted)
        rows = [
            {"cloud": c, "enabled": c in settings.clouds, **f.to_dict()}
            for c, f in zip(wanted, found, strict=True)
        ]
    if as_json:
        print_json({"clouds": rows, "count": len(rows)})
    else:
        _print(rows, display_name)
    if not any(r["ready"] and r["enabled"] for r in rows):
        raise typer.Exit(EXIT_NEGATIVE)


def _local_cloud(settings: Any) -> Any:
    from corral.shared.config.localcloud import load_local_cloud

    return load_local_cloud(settings.local_cloud_file)


def _print(rows: list[dict[str, Any]], display_name: Any) -> None:
    from rich import box
    from rich.table import Table

    from corral.services.cli.plan_cmd import print_table

    table = Table(
        "CLOUD", "ENABLED", "READY", "AS", "DETAIL", box=box.SIMPLE_HEAD, pad_edge=False
    )  # fmt: skip
    for r in rows:
        data_row(
            table,
            display_name(r["cloud"]),
            "yes" if r["enabled"] else "no (not in CORRAL_CLOUDS)",
            "yes" if r["ready"] else "no",
            r["identity"] or "-",
            r["detail"],
        )
    print_table(table)
    ready = [display_name(r["cloud"]) for r in rows if r["ready"] and r["enabled"]]
    out.print(f"Launches here may use: {', '.join(ready) or 'no cloud'}", markup=False)
