"""``corral pools apply|list|delete`` and ``corral why``: machine pools at run time, through
the HTTP API.

``pools apply FILE`` registers a machine pool file (or a Determined master config) under a
name (default: the file's stem) that compute configs use in
``flags.cloud_deployment.machine_pool``. The file is checked here first, so a mistake is
``FILE:LINE: field: message`` and exit 2 even without a running API. ``why ID`` prints the
scheduler's own word on a request. Exit codes: 0 done, 1 the API said no (unknown name or id,
a pool still in use), 2 bad input.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.services.cli.api_access import api_client, complete_request_id, fail
from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_NEGATIVE,
    fail_input,
    notice,
    print_json,
    print_list,
    say,
    warning,
)
from corral.services.cli.pools_cmd import pools_app

if TYPE_CHECKING:
    from corral.shared.config.detect import Loaded

POOL_KINDS = ("machine_pool", "master_config")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def register(app: typer.Typer) -> None:
    """Add ``corral why``; ``apply``, ``list`` and ``delete`` join the ``pools`` group when this
    module is imported."""
    app.command("why")(why)


def load_pool_file(path: Path) -> Loaded:
    """Read ``path`` as a machine pool file or a master config (the kind detected as
    ``corral validate`` does); raises ConfigError naming file, line and field."""
    from corral.shared.config.detect import detect_kind, validate_as
    from corral.shared.configio import ConfigError, load_file

    doc = load_file(path)
    kind = detect_kind(doc.data)
    if kind not in POOL_KINDS:
        found = f"a {kind} file" if kind else "not a kind of file Corral can tell"
        raise ConfigError.single(
            doc.name, f"{found}; `corral pools apply` takes a {' or a '.join(POOL_KINDS)} file"
        )
    return validate_as(doc, kind)


def pool_body(path: Path, name: str | None, cloud: str | None) -> dict[str, Any]:
    """What ``POST /v1/pools`` is sent for ``path``: the file as written (its own spelling,
    which the API validates again exactly as here), its kind and name; raises ConfigError."""
    loaded = load_pool_file(path)
    for line in loaded.notices:
        notice(line)
    return {
        "name": name or path.stem,
        "kind": loaded.kind,
        "spec": loaded.doc.data,
        "file_name": path.name,
        "cloud": cloud.lower() if cloud else None,
    }


@contextmanager
def _no_means_1(as_json: bool) -> Iterator[None]:
    """The API saying no: an unknown name or id is the input's fault (exit 2, as `status`
    and `terminate` do); a pool still in use is exit 1. Both with the API's message."""
    from corral.services.client import Conflict, NotFound
    from corral.services.client.errors import describe_detail

    try:
        yield
    except NotFound as exc:
        fail(describe_detail(exc.detail), EXIT_INPUT, as_json)
    except Conflict as exc:
        fail(describe_detail(exc.detail), EXIT_NEGATIVE, as_json)


@pools_app.command("apply")
def apply(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="a machine pool file or a master config")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="the pool's name (default: the file's stem)")
    ] = None,
    cloud: Annotated[
        str | None,
        typer.Option(
            "--cloud",
            metavar="CLOUD",
            help="where its machines launch (default: the cloud its launch templates are "
            "written for when it is turned on and sells them, else the first cloud that sells "
            "them, local first; a master config's providers name their own)",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register (or replace) a machine pool file or a Determined master config."""
    from corral.shared.configio import ConfigError

    try:
        body = pool_body(file, name, cloud)
    except ConfigError as exc:
        fail_input(exc, as_json)
    with api_client(as_json, source=str(file)) as client, _no_means_1(as_json):
        view = client.apply_pool(**body).document()
    for line in view.get("warnings") or []:
        warning(line)
    if as_json:
        print_json(view)
        return
    kind = str(view["kind"]).replace("_", " ")
    if view["kind"] == "machine_pool":
        count = f"{len(view.get('machine_types') or [])} machine types"
    else:
        count = f"{len(view.get('resource_pools') or [])} resource pools"
    again = ", replacing the file applied before" if view.get("replaced") else ""
    say(f"registered {kind} {view['name']} ({count}, cloud {view['cloud']}){again}")


def _aligned(rows: list[list[str]], indent: str = "") -> list[str]:
    """Plain columns, never cut short whatever the terminal's width."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def pools_table(views: list[dict[str, Any]]) -> list[str]:
    """``pools list``'s lines: one row per pool, and under a machine pool one indented line
    per machine type and partition (``type/partition held/size market``)."""
    header = ["NAME", "KIND", "CLOUD", "MACHINES", "WORKLOADS"]
    rows = [
        [v["name"], v["kind"], str(v["cloud"]), str(len(v["machines"])), str(len(v["workloads"]))]
        for v in views
    ]
    widths = _aligned([header, *rows])
    lines = [widths[0]]
    for view, line in zip(views, widths[1:], strict=True):
        lines.append(line)
        parts = [
            [f"{t['machine_type']}/{p['name']}", f"{p['held']}/{p['size']}", t["market"]]
            for t in view.get("machine_types") or []
            for p in t["partitions"]
        ]
        if parts:
            lines.extend(_aligned(parts, indent="  "))
    return lines


@pools_app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """The registered pools, with each machine type's partitions (held/size)."""
    with api_client(as_json) as client:
        views = [v.document() for v in client.pools()]
    if as_json:
        print_list("pools", views)
    elif not views:
        say("no pools (register one with `corral pools apply FILE`)")
    else:
        for line in pools_table(views):
            say(line)


@pools_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the pool's name")],
    as_json: JsonOpt = False,
) -> None:
    """Unregister a pool and terminate its machines (refused while workloads use it)."""
    with api_client(as_json) as client, _no_means_1(as_json):
        gone = client.delete_pool(name).document()
    if as_json:
        print_json(gone)
    else:
        count = len(gone.get("machines_terminated") or [])
        say(f"deleted pool {name} ({count} machines terminated)")


def _clock(at: float) -> str:
    """A time as `corral why` prints it: local, with how far away it is."""
    delta = at - time.time()
    away = f"in {delta:.0f}s" if delta >= 0 else f"{-delta:.0f}s ago"
    return f"{datetime.fromtimestamp(at).strftime('%H:%M:%S')} ({away})"


def why(
    request_id: Annotated[
        str,
        typer.Argument(metavar="ID", help="a request id", autocompletion=complete_request_id),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Where a request runs, or why it waits, from the scheduler's own decision."""
    with api_client(as_json) as client, _no_means_1(as_json):
        found = client.why(request_id).document()
    if as_json:
        print_json(found)
        return
    say(f"{found['id']} {found['state']}: {found['reason']} ({found['code']})")
    if found.get("budget"):
        say(f"  held back by budget {found['budget']}")
    for n, a in enumerate(found.get("tried") or [], 1):  # a direct request's attempts
        failed = (
            f"{a['outcome']}: {a['error']}" if a.get("error") else a.get("outcome") or "running"
        )
        say(f"  tried {n}: {a['cloud']}/{a['zone']} {a['instance_type']} {a['market']}: {failed}")
    for b in found.get("blocked") or []:
        until = f" until {_clock(b['until'])}" if b.get("until") else ""
        kind = f"{b['kind']} " if b.get("kind") else ""
        said = f" ({b['reason']})" if b.get("reason") else ""  # a pooled reason's: scopes only
        say(f"  blocked ahead: {kind}{b['scope']}{until}{said}")
    if found.get("retry_at"):
        say(f"  next retry: {_clock(found['retry_at'])} (retry {(found.get('retries') or 0) + 1})")
    if walk := found.get("next_walk"):  # what a walk of the chain made now would decide
        say(f"  a walk now: {'; '.join(walk.get('reasons') or [walk.get('decision')])}")
    if found.get("state") == "WAITING" or found.get("deadline"):
        deadline = found.get("deadline")
        say(f"  deadline: {_clock(deadline) if deadline else 'none (waits until up)'}")
    for m in found.get("machines") or []:
        where = m.get("zone") or "-"
        say(f"  {m['id']}  {m['machine_type']}/{m['partition']}  {m['status']}  {where}")
