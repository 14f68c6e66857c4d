"""``corral catalog update``: rebuild the price lists from the clouds' own APIs;
``corral catalog reset``: go back to the shipped ones.

The lists are written under <home>/catalog and override the shipped ones for every command
and process of this installation started afterwards (``show-gpus`` shows each one's date).
"""

from __future__ import annotations

import re
from typing import Annotated

import typer

from corral.services.cli.output import EXIT_INPUT, EXIT_NEGATIVE, err, out, print_list

UPDATABLE = ("aws", "gcp")
REGION_RE = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+$")

catalog_app = typer.Typer(help="The price lists Corral plans with.", no_args_is_help=True)


def _bad_input(message: str, as_json: bool, code: int = EXIT_INPUT) -> typer.Exit:
    if as_json:
        print_list("clouds", [], error=message)
    err.print(f"error: {message}", markup=False)
    return typer.Exit(code)


def _clouds(named: list[str] | None, as_json: bool) -> list[str]:
    """The clouds named (each checked), else those whose credentials can be found."""
    from corral.services.settings import aws_credentials_hint, gcp_credentials_hint, get_settings

    if named:
        chosen = [c.strip().lower() for c in named]
        for cloud in chosen:
            if cloud not in UPDATABLE:
                raise _bad_input(
                    f"--cloud: expected one of {', '.join(UPDATABLE)}, got {cloud!r}", as_json
                )
        return list(dict.fromkeys(chosen))
    settings = get_settings()
    hints = {
        "aws": aws_credentials_hint(),
        # Anonymous credentials: a Compute API fake that asks for none.
        "gcp": gcp_credentials_hint() or settings.gcp_anonymous,
    }
    found = [cloud for cloud in UPDATABLE if hints[cloud]]
    if not found:
        message = (
            "no credentials found for aws (AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials) "
            "or gcp (GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login); "
            "the shipped catalog stays in use"
        )
        raise _bad_input(message, as_json, EXIT_NEGATIVE)
    return found


def update(
    cloud: Annotated[
        list[str] | None,
        typer.Option(
            "--cloud", help="aws or gcp (repeat for both); default: those with credentials."
        ),
    ] = None,
    region: Annotated[
        list[str] | None,
        typer.Option(
            "--region", help="Only these regions (repeatable); the others keep their rows."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rebuild the catalog from the clouds' own offering and price APIs (EC2 and the Pricing
    API; Compute Engine and the Cloud Billing catalog), written under <home>/catalog."""
    import datetime as dt

    from corral.services.providers.catalog_update import update as run_update
    from corral.services.settings import get_settings

    clouds = _clouds(cloud, as_json)
    regions = [r.strip() for r in region] if region else None
    for name in regions or ():
        if not REGION_RE.match(name):
            raise _bad_input(
                f"--region: expected a region name like us-east-1 or europe-west1, got {name!r}",
                as_json,
            )
    settings = get_settings()

    def progress(line: str) -> None:
        err.print(line, markup=False, highlight=False)

    today = dt.datetime.now(dt.UTC).date().isoformat()
    results = run_update(settings, clouds, regions, today, progress)
    if as_json:
        print_list("clouds", [r.to_dict() for r in results], folder=str(settings.catalog_dir))
    for result in results:
        if result.ok:
            if not as_json:
                out.print(result.message, markup=False)
        else:
            err.print(f"error: {result.message}", markup=False)
    if any(r.ok for r in results) and not as_json:
        out.print(f"written to {settings.catalog_dir}", markup=False)
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_NEGATIVE)


def reset(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Remove the catalog `catalog update` wrote: the shipped price lists apply again."""
    from corral.services.settings import get_settings

    folder = get_settings().catalog_dir
    removed = []
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.name.endswith((".csv", ".csv.gz")) or path.name == "snapshot.json":
                path.unlink()
                removed.append(path.name)
    if as_json:
        print_list("removed", removed, folder=str(folder))
    else:
        out.print(f"removed {len(removed)} files from {folder}", markup=False)


catalog_app.command("update")(update)
catalog_app.command("reset")(reset)


def register(app: typer.Typer) -> None:
    """Add ``corral catalog`` to the app."""
    app.add_typer(catalog_app, name="catalog")
