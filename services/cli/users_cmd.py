"""``corral users`` and ``corral projects``: who may use the API, in which projects, and each
project's quota (an admin's commands, through the HTTP API).

``users add NAME --role member --project P`` prints the new user's token once (or writes it,
mode 0600, to ``--token-file``); only its hash is kept. ``users revoke NAME`` stops the token at
once. ``projects quota P --gpus N --dollars-per-day X`` sets the limits checked when the
project's requests are admitted (``corral why`` names the quota that refused one). Exit codes:
0 done, 1 the API is unreachable, 2 bad input (an unknown name, a name taken, not an admin).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.services.cli.api_access import api_client, fail
from corral.services.cli.output import EXIT_INPUT, print_json, print_list, report, say

users_app = typer.Typer(help="API users: tokens with a role (admin, member, viewer).")
projects_app = typer.Typer(help="Projects and their quotas (GPUs at once, dollars per day).")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
ROLES = ("admin", "member", "viewer")


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, name="users")
    app.add_typer(projects_app, name="projects")


@contextmanager
def _refusals(as_json: bool) -> Iterator[None]:
    """What the API refuses here is the input's fault: exit 2 with its message."""
    from corral.services.client import ApiError
    from corral.services.client.errors import describe_detail

    try:
        yield
    except ApiError as exc:
        if not 400 <= exc.status_code < 500 or exc.status_code == 401:
            raise
        fail(f"{describe_detail(exc.detail)} (HTTP {exc.status_code})", EXIT_INPUT, as_json)


def _write_token(path: Path, token: str, as_json: bool) -> None:
    """The token to ``path``, created mode 0600 (never left readable by others)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fail(f"--token-file: {path} exists; name a new file", EXIT_INPUT, as_json)
    except OSError as exc:
        fail(f"--token-file: cannot create {path}: {exc.strerror}", EXIT_INPUT, as_json)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")


@users_app.command("add")
def add_user(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the user's name")],
    role: Annotated[str, typer.Option("--role", help="admin, member or viewer")] = "member",
    project: Annotated[
        list[str] | None,
        typer.Option("--project", metavar="P", help="a project it belongs to (repeatable)"),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="write the token to this new file (mode 0600)"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a user and print its API token, once (only its hash is kept)."""
    if role not in ROLES:
        fail(f"--role: expected one of {', '.join(ROLES)}, not {role!r}", EXIT_INPUT, as_json)
    if token_file is not None and token_file.exists():
        fail(f"--token-file: {token_file} exists; name a new file", EXIT_INPUT, as_json)
    with api_client(as_json) as client, _refusals(as_json):
        view = client.add_user(name, role, list(project or []))
    doc = view.document()
    token = str(doc.pop("token"))
    if token_file is not None:
        _write_token(token_file, token, as_json)
        doc["token_file"] = str(token_file)
    else:
        doc["token"] = token
    if as_json:
        print_json(doc)
        return
    projects = ", ".join(view.projects) or "every project"
    say(f"added {view.role} {view.name} ({projects})")
    if token_file is not None:
        say(f"token written to {token_file} (mode 0600); it is not shown again")
    else:
        say(f"token (shown once, keep it): {token}")


@users_app.command("list")
def list_users(as_json: JsonOpt = False) -> None:
    """Every user with its role, projects and whether it is revoked."""
    with api_client(as_json) as client, _refusals(as_json):
        views = [v.document() for v in client.users()]
    if as_json:
        print_list("users", views)
        return
    if not views:
        say("no users but the first admin (add one with `corral users add NAME`)")
    for v in views:
        revoked = "  revoked" if v.get("revoked_at") else ""
        say(f"{v['name']}  {v['role']}  {','.join(v.get('projects') or []) or '-'}{revoked}")


@users_app.command("revoke")
def revoke_user(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the user's name")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a user's token: it stops working at once."""
    with api_client(as_json) as client, _refusals(as_json):
        view = client.revoke_user(name)
    report(as_json, view.document(), f"revoked {view.name}: its token no longer works")


def _quota(gpus: int | None, dollars_per_day: float | None) -> dict[str, Any]:
    return {"gpus": gpus, "usd_per_period": dollars_per_day, "period_s": 86400.0}


GpusOpt = Annotated[
    int | None, typer.Option("--gpus", min=0, help="GPUs its requests may hold at once")
]
DollarsOpt = Annotated[
    float | None,
    typer.Option("--dollars-per-day", min=0, help="what its machines may cost per day (USD)"),
]


def _project_line(v: dict[str, Any]) -> str:
    quota = v.get("quota") or {}
    gpus = quota.get("gpus")
    usd = quota.get("usd_per_period")
    gpu_part = f"gpus {v.get('gpus_in_use', 0)}/{'-' if gpus is None else gpus}"
    usd_part = f"usd/day {v.get('spent_usd', 0):.2f}/{'-' if usd is None else f'{usd:.2f}'}"
    return f"{v['name']}  {gpu_part}  {usd_part}"


@projects_app.command("add")
def add_project(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the project's name")],
    gpus: GpusOpt = None,
    dollars_per_day: DollarsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a project, with its quota if given."""
    with api_client(as_json) as client, _refusals(as_json):
        view = client.add_project(name, _quota(gpus, dollars_per_day))
    report(as_json, view.document(), f"added project {_project_line(view.document())}")


@projects_app.command("list")
def list_projects(as_json: JsonOpt = False) -> None:
    """Projects with their quotas and what they use now (a member's or viewer's own)."""
    with api_client(as_json) as client, _refusals(as_json):
        views = [v.document() for v in client.projects()]
    if as_json:
        print_list("projects", views)
        return
    if not views:
        say("no projects (add one with `corral projects add NAME`)")
    for v in views:
        say(_project_line(v))


@projects_app.command("quota")
def set_quota(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the project's name")],
    gpus: GpusOpt = None,
    dollars_per_day: DollarsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a project's quota; a limit not given is no limit."""
    with api_client(as_json) as client, _refusals(as_json):
        view = client.set_quota(name, _quota(gpus, dollars_per_day))
    report(as_json, view.document(), f"quota set: {_project_line(view.document())}")
