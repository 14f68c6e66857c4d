"""``corral validate FILE...``: check users' files as their own systems write them."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.services.cli.output import EXIT_INPUT, notice, out, print_issues, print_list

# The kinds of corral.shared.config.detect.KINDS, in its order. Written out here because importing
# detect loads every config model, which `corral --help` must not pay for;
# tests/unit/test_cli_startup.py checks that the two lists stay the same.
KINDS = ("machine_pool", "compute_config", "master_config", "task", "cluster", "local_cloud")

# The kinds as a choice typer can list in --help and check (a wrong one is a usage error, exit 2).
Kind = Enum("Kind", {kind: kind for kind in KINDS}, type=str)  # type: ignore[misc]


def _check(path: Path, kind: str | None) -> dict[str, Any]:
    """One file's result: ``{file, kind, ok, issues, notices}`` (issues as Issue objects).

    The kind is reported even when the file is wrong, so the reader knows what it was read as.
    """
    from corral.shared.config.detect import detect_kind, unknown_kind, validate_as
    from corral.shared.configio import ConfigError, load_file

    result: dict[str, Any] = {
        "file": str(path),
        "kind": kind,
        "ok": False,
        "issues": [],
        "notices": [],
    }
    try:
        doc = load_file(path)
        result["kind"] = kind or detect_kind(doc.data)
        if result["kind"] is None:
            raise unknown_kind(doc)
        loaded = validate_as(doc, result["kind"])
        if result["kind"] == "task":
            _check_task_names(loaded.model, doc)
    except ConfigError as exc:
        result["issues"] = exc.issues
        return result
    result.update(ok=True, notices=loaded.notices)
    return result


def _check_task_names(task: Any, doc: Any) -> None:
    """A task's instance types and accelerators that no cloud's catalog here has: errors at
    their lines, with the nearest name (raises ConfigError)."""
    from corral.services.cli.plan_cmd import check_catalog_names, plan_catalog

    check_catalog_names(task, doc, plan_catalog(None))


def validate(
    files: Annotated[list[Path], typer.Argument(help="YAML or JSON files to check")],
    kind: Annotated[
        Kind | None, typer.Option("--kind", help="read every file as this kind, not detected")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Check each file (its kind is detected unless --kind is given); exit 2 if any is wrong."""
    results = [_check(path, kind.value if kind is not None else None) for path in files]
    if as_json:
        for result in results:
            result["issues"] = [issue.as_dict() for issue in result["issues"]]
        print_list("files", results)
    for result in results:
        if not as_json:
            if result["ok"]:
                out.print(f"{result['file']}: ok ({result['kind']})", markup=False)
            else:
                print_issues(result["issues"])
        for line in result["notices"]:
            notice(line)
    if not all(r["ok"] for r in results):
        raise typer.Exit(EXIT_INPUT)


def register(app: typer.Typer) -> None:
    """Add ``corral validate`` to the command line."""
    app.command("validate")(validate)
