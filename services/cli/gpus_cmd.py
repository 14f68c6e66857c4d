"""``corral show-gpus [NAME]``: the accelerators in the catalog, and where each one is sold.

Without a name: every accelerator with its per-machine counts and clouds (``--json`` adds each
one's instance types). With a name (any case, optionally ``NAME:COUNT``): each instance type
carrying it, with its on-demand and spot price in the cheapest region.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import typer

from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_NEGATIVE,
    data_row,
    err,
    fail,
    fail_input,
    print_json,
    print_list,
)
from corral.services.cli.plan_cmd import print_table

if TYPE_CHECKING:
    from rich.table import Table

    from corral.shared.catalog import Catalog
    from corral.shared.catalog.gpus import AcceleratorOffer, AcceleratorSummary


def register(app: typer.Typer) -> None:
    """Add ``corral show-gpus`` to the app."""
    app.command("show-gpus")(show_gpus)


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _summary_table(rows: list[AcceleratorSummary]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for header in ("GPU", "QTY", "CLOUDS"):
        table.add_column(header)
    for s in rows:
        data_row(table, s.name, ", ".join(str(c) for c in s.counts), ", ".join(s.clouds))
    return table


def _offer_table(rows: list[AcceleratorOffer]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    headers = (
        "GPU",
        "QTY",
        "CLOUD",
        "INSTANCE_TYPE",
        "vCPUs",
        "HOST_MEM(GiB)",
        "HOURLY_PRICE",
        "HOURLY_SPOT_PRICE",
        "REGION",
    )
    for header in headers:
        right = header in {"QTY", "vCPUs", "HOST_MEM(GiB)", "HOURLY_PRICE", "HOURLY_SPOT_PRICE"}
        table.add_column(header, justify="right" if right else "left")
    for a in rows:
        data_row(
            table,
            a.accelerator,
            str(a.count),
            a.cloud,
            a.instance_type,
            f"{a.vcpus:g}",
            f"{a.memory_gib:g}",
            _money(a.price_usd_per_hour),
            _money(a.spot_price_usd_per_hour),
            a.region,
        )
    return table


def _parse_name(name: str, as_json: bool) -> tuple[str, int | None]:
    """``a100`` -> ("A100", None); ``A100:8`` -> ("A100", 8); exit 2 for a malformed name."""
    from corral.shared.accelerators import canonical_accelerator

    text, sep, count_text = name.partition(":")
    try:
        canonical = canonical_accelerator(text)
        if sep and not (count_text.isdigit() and int(count_text) >= 1):
            raise ValueError(f"expected NAME or NAME:COUNT with a count >= 1, got {name!r}")
    except ValueError as exc:
        fail(str(exc), EXIT_INPUT, as_json)
    return canonical, int(count_text) if sep else None


def snapshot_line(catalog: Catalog, cloud: str | None) -> str | None:
    """``prices as of: aws 2024-10-01 (shipped), gcp 2025-01-12 (corral catalog update)``."""
    parts = []
    for name, snap in catalog.snapshots.items():
        if cloud is None or cloud == name:
            how = "corral catalog update" if snap.user else "shipped"
            parts.append(f"{name} {snap.date} ({how})")
    return f"prices as of: {', '.join(parts)}" if parts else None


def _snapshots(catalog: Catalog, cloud: str | None) -> dict[str, Any]:
    return {
        name: snap.to_dict()
        for name, snap in catalog.snapshots.items()
        if cloud is None or cloud == name
    }


def _negative(message: str, as_json: bool, known: list[str]) -> NoReturn:
    if as_json:
        print_json({"error": message, "known": known})
    err.print(f"error: {message}", markup=False)
    err.print(f"known accelerators: {', '.join(known)}", markup=False)
    raise typer.Exit(EXIT_NEGATIVE)


def show_gpus(
    name: str | None = typer.Argument(
        None, metavar="[NAME]", help="An accelerator (any case), optionally NAME:COUNT."
    ),
    cloud: str | None = typer.Option(None, "--cloud", help="Only this cloud (local, aws, gcp)."),
    every: bool = typer.Option(
        False, "--all", "-a", help="Every accelerator's instance types and prices, not a summary."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List accelerators, or the instance types and prices of one (of each with --all)."""
    from corral.services.cli.plan_cmd import plan_catalog
    from corral.shared.catalog.gpus import offers, summaries
    from corral.shared.configio import ConfigError

    try:
        catalog = plan_catalog(None)  # the shipped catalog and the local cloud `corral up` uses
    except ConfigError as exc:
        fail_input(exc, as_json)
    cloud = cloud.strip().lower() if cloud else None
    known = list(catalog.accelerators())
    if cloud is not None and cloud not in catalog.clouds:
        _negative(
            f"the catalog has no offerings on {cloud!r} (clouds: {', '.join(catalog.clouds)})",
            as_json,
            known,
        )
    if name is None:
        rows = summaries(catalog, cloud)
        if as_json:
            listing = [
                {
                    **s.to_dict(),
                    "offerings": [a.to_dict() for a in offers(catalog, s.name, cloud=cloud)],
                }
                for s in rows
            ]
            print_list("accelerators", listing, snapshots=_snapshots(catalog, cloud))
            return
        if every:  # SkyPilot's `show-gpus --all`: one table of every offering
            print_table(
                _offer_table([a for s in rows for a in offers(catalog, s.name, cloud=cloud)])
            )
        else:
            print_table(_summary_table(rows))
        _print_snapshot(catalog, cloud)
        return
    canonical, count = _parse_name(name, as_json)
    if canonical not in catalog.by_accelerator:
        _negative(f"unknown accelerator {name!r}", as_json, known)
    found = offers(catalog, canonical, count=count, cloud=cloud)
    if not found:
        where = f" on {cloud}" if cloud else ""
        what = f"{canonical}:{count}" if count else canonical
        _negative(f"no instance type carries {what}{where}", as_json, known)
    if as_json:
        print_list(
            "offerings",
            [a.to_dict() for a in found],
            accelerator=canonical,
            snapshots=_snapshots(catalog, cloud),
        )
    else:
        print_table(_offer_table(found))
        _print_snapshot(catalog, cloud)


def _print_snapshot(catalog: Catalog, cloud: str | None) -> None:
    """The prices' date, on stderr: stdout stays one table for scripts."""
    line = snapshot_line(catalog, cloud)
    if line:
        err.print(line, markup=False, highlight=False)
