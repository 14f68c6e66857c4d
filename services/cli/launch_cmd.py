"""``corral launch``: submit a task file (with SkyPilot's launch flags merged over it) and
follow the request: a job's output to its end, a service until it runs. Ctrl-C stops following,
never the request (``interrupted``)."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from corral.services.cli.api_access import api_client, fail
from corral.services.cli.interrupt import interrupted
from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_TIMEOUT,
    err,
    fail_input,
    notice,
    out,
    print_json,
)
from corral.services.cli.overrides_opt import (
    CloudOpt,
    EnvOpt,
    GpusOpt,
    InfraOpt,
    LaunchFlags,
    NumNodesOpt,
    RegionOpt,
    SecretOpt,
    UseSpotOpt,
    ZoneOpt,
    merged,
)
from corral.services.cli.requests_cmd import (
    JSON_OPT,
    TERMINAL_STATES,
    WAIT_EXIT,
    endpoints_line,
    follow_logs,
    print_attempts,
    service_line,
)

if TYPE_CHECKING:
    from corral.services.client import Client, RequestView


def register(app: typer.Typer) -> None:
    """Add ``corral launch`` to ``app``."""
    app.command("launch")(launch)


def task_for_api(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The task file validated here, as the mapping to send, and its notices; raises
    ConfigError (``corral.services.client.tasks.read_task_file``)."""
    from corral.services.client.tasks import read_task_file

    read = read_task_file(path)
    return read.data, read.notices


def _task_for_api(path: Path, as_json: bool) -> dict[str, Any]:
    from corral.shared.configio import ConfigError

    try:
        data, notices = task_for_api(path)
    except ConfigError as exc:
        fail_input(exc, as_json)
    for line in notices:
        notice(line)
    return data


def launch(
    file: Path = typer.Argument(..., help="A task file (SkyPilot-style YAML)."),
    detach: bool = typer.Option(
        False, "--detach", "-d", help="Print the request id and return at once."
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Follow progress until RUNNING or ended, then return."
    ),
    timeout_s: float | None = typer.Option(
        None, "--timeout", min=0, help="Give up waiting after this many seconds (exit 3)."
    ),
    idempotency_key: str | None = typer.Option(
        None,
        "--idempotency-key",
        metavar="KEY",
        help="Launch at most once: a request already created under KEY is shown instead.",
    ),
    project: str | None = typer.Option(
        None,
        "--project",
        metavar="NAME",
        help="The project to launch in (default: your token's only project).",
    ),
    idle_minutes: float | None = typer.Option(
        None,
        "--idle-minutes-to-autostop",
        "-i",
        min=0,
        help="Stop the machines after this many idle minutes (resources.autostop).",
    ),
    down: bool = typer.Option(
        False, "--down", help="With autostop: terminate instead of stop (autodown)."
    ),
    retry_until_up: bool | None = typer.Option(
        None,
        "--retry-until-up/--fail-fast",
        help="When every candidate is sold out or blocked: wait for capacity and retry "
        "(the default, as SkyPilot's --retry-until-up), or fail at once.",
    ),
    max_wait: str | None = typer.Option(
        None,
        "--max-wait",
        metavar="DURATION",
        help="Give up waiting for capacity after this long (30m, 2h): the request FAILS.",
    ),
    down_on_interrupt: bool = typer.Option(
        False,
        "--down-on-interrupt",
        help="Ctrl-C while following terminates the request (by default it keeps going).",
    ),
    env: list[str] | None = EnvOpt,
    secret: list[str] | None = SecretOpt,
    gpus: str | None = GpusOpt,
    infra: str | None = InfraOpt,
    cloud: str | None = CloudOpt,
    region: str | None = RegionOpt,
    zone: str | None = ZoneOpt,
    num_nodes: int | None = NumNodesOpt,
    use_spot: bool | None = UseSpotOpt,
    dryrun: bool = typer.Option(
        False, "--dryrun", help="Show the merged task and its plan; launch nothing."
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Accepted as in SkyPilot: launch never asks to confirm."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Submit a launch request and follow it: a job's output to its end (exiting with the
    job's exit code), a service until it runs. --detach returns at once, --wait at RUNNING.
    A request whose candidates are all sold out waits for capacity (WAITING) unless
    --fail-fast; --max-wait bounds the wait. Ctrl-C stops following, not the request (it says
    how to stop it; a second Ctrl-C within 2 s offers to)."""
    del yes  # nothing to confirm: a launch never stops to ask
    flags = LaunchFlags(env, secret, gpus, infra, cloud, region, zone, num_nodes, use_spot)
    task = _with_flags(_task_for_api(file, as_json), file, flags, as_json)
    if dryrun:
        _dry_run(file, flags, as_json)
        return
    _check_names(file, flags, task, as_json)
    if idle_minutes is not None or down:
        task = _with_autostop(task, idle_minutes, down)
    task = _with_wait_terms(task, retry_until_up, max_wait, as_json)
    with api_client(as_json, source=str(file)) as client:
        # The workdir and file mounts, packed and uploaded (once per content).
        task = client.with_files(
            task, source=str(file), max_bytes=_bundle_max_bytes(), project=project
        )
        view = client.launch(task, idempotency_key=idempotency_key, project=project)
        if detach or (as_json and not wait):
            print_json(view.document()) if as_json else out.print(view.id, markup=False)
            return
        if not as_json:
            out.print(view.id, markup=False)
        try:
            final, code = _follow(client, view.id, timeout_s, as_json)
            timed_out = code == EXIT_TIMEOUT
            if not (wait or as_json or timed_out) and _is_job(task):
                final, code = _follow_job(client, final)  # the job's own code from here
        except KeyboardInterrupt:
            interrupted(client, view.id, down=down_on_interrupt, offer=not as_json)
    if as_json:
        print_json(final.document())
    elif final.service_endpoint:  # replicas behind the API's load balancer
        out.print(service_line(final.document()), markup=False)
    elif final.endpoints:
        out.print(endpoints_line(final.endpoints, final.ready), markup=False)
    elif final.state == "FAILED" and final.exit_code is None:
        if final.attempts:
            print_attempts([a.document() for a in final.attempts], console=err)
        err.print(f"error: {final.error or 'the request failed'}", markup=False)
    if timed_out:
        notice(f"still {final.state} after {timeout_s:g} s; `corral status {final.id}`")
    raise typer.Exit(code)


def _with_flags(
    data: dict[str, Any], file: Path, flags: LaunchFlags, as_json: bool
) -> dict[str, Any]:
    """The task to send: the file's mapping with the launch flags merged over it (checked
    here, so a flag's mistake is exit 2 naming it before anything is uploaded)."""
    from corral.shared.configio import ConfigError, Document, check_problems, validate_doc

    try:
        data, said = merged(data, flags)
    except ValueError as exc:
        fail(str(exc), EXIT_INPUT, as_json)
    if said:
        from corral.shared.config.task import Task

        doc = Document(name=f"{file} (with the command line's flags)", data=data)
        try:
            check_problems(validate_doc(Task, doc), doc)
        except ConfigError as exc:
            fail_input(exc, as_json)
    return data


def _named(resources: Any) -> list[tuple[str, str]]:
    """("type" | "gpu", name) for each instance type and accelerator a task's resources (and
    their any_of / ordered candidates) name."""
    from corral.shared.accelerators import parse_accelerators

    if not isinstance(resources, dict):
        return []
    out: list[tuple[str, str]] = []
    for item in [resources, *(resources.get("any_of") or ()), *(resources.get("ordered") or ())]:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("instance_type"), str):
            out.append(("type", item["instance_type"]))
        try:
            request = parse_accelerators(item.get("accelerators"))
        except ValueError:
            continue  # the task's own check reported it
        out.extend(("gpu", o.name) for o in (request.options if request else ()))
    return out


def _names_surely_known(task: dict[str, Any]) -> bool:
    """True when every instance type and accelerator the task names is written in the catalog
    files or the local cloud's file: the fast path, a text search of a few hundred KB instead
    of reading and indexing the catalog (launch's start-up budget, tests/bench). A name not
    found this way is checked properly."""
    import re

    from corral.services.client_settings import client_settings, local_cloud_file
    from corral.shared.catalog.catalog import DATA_DIR, catalog_file
    from corral.shared.clouds import CATALOG_CLOUDS

    names = _named(task.get("resources"))
    if not names:
        return True
    mine = client_settings().file("catalog")  # Settings.catalog_dir
    texts = []
    for cloud in CATALOG_CLOUDS:
        path = catalog_file(mine, cloud) or catalog_file(DATA_DIR, cloud)
        if path is None or path.suffix == ".gz":
            return False
        texts.append(path.read_text(encoding="utf-8"))
    local = local_cloud_file()
    if local.is_file():
        texts.append(local.read_text(encoding="utf-8"))
    text = "\n".join(texts).lower()
    return all(
        re.search(rf"(?<![\w.-]){re.escape(name.lower())}(?![\w.-])", text) for _, name in names
    )


def _check_names(file: Path, flags: LaunchFlags, task: dict[str, Any], as_json: bool) -> None:
    """Exit 2 (FILE:LINE, the field, the nearest name) when the task names an instance type
    or accelerator that no cloud of this installation's catalog has: it could never plan."""
    from corral.services.cli.plan_cmd import load_task, plan_catalog
    from corral.shared.configio import ConfigError

    if _names_surely_known(task):
        return
    try:
        load_task(file, flags, plan_catalog(None))
    except ConfigError as exc:
        fail_input(exc, as_json)


def _dry_run(file: Path, flags: LaunchFlags, as_json: bool) -> None:
    """``launch --dryrun``: what ``plan`` shows for the file with the same flags."""
    from corral.services.cli.plan_cmd import load_task, plan_catalog, show_plan
    from corral.shared.configio import ConfigError

    try:
        catalog = plan_catalog(None)
        task, said = load_task(file, flags, catalog)
    except ConfigError as exc:
        fail_input(exc, as_json)
    show_plan(task, catalog, said, every_zone=False, as_json=as_json, local_cloud=None)
    if not as_json:
        out.print("dry run: nothing launched", markup=False)


def _with_autostop(task: dict[str, Any], idle_minutes: float | None, down: bool) -> dict[str, Any]:
    """The task with the command line's autostop over its own (SkyPilot's `-i N --down`):
    ``--down`` alone keeps the task's idle minutes (else the default, 5)."""
    from corral.shared.autostop import parse_autostop

    resources = dict(task.get("resources") or {})
    own = parse_autostop(resources.get("autostop"))
    minutes = idle_minutes if idle_minutes is not None else (own.idle_minutes if own else None)
    autostop: dict[str, Any] = {"down": down or bool(own and own.down)}
    if minutes is not None:
        autostop["idle_minutes"] = minutes
    resources["autostop"] = autostop
    return {**task, "resources": resources}


def _with_wait_terms(
    task: dict[str, Any], retry_until_up: bool | None, max_wait: str | None, as_json: bool
) -> dict[str, Any]:
    """The task with the command line's --fail-fast / --retry-until-up and --max-wait over
    its own ``retry_until_up`` and ``max_wait``."""
    from corral.shared.config import parse_duration_s

    task = dict(task)
    if retry_until_up is not None:
        task["retry_until_up"] = retry_until_up
    if max_wait is not None:
        try:
            seconds = parse_duration_s(max_wait)
        except ValueError as exc:
            fail(f"--max-wait: {exc}", EXIT_INPUT, as_json)
        if seconds <= 0:
            fail(f"--max-wait: expected a positive duration, got {max_wait!r}", EXIT_INPUT, as_json)
        task["max_wait"] = f"{seconds:g}s"
    return task


def _bundle_max_bytes() -> int:
    from corral.services.client_settings import bundle_max_bytes

    return bundle_max_bytes()


def _is_job(task: dict[str, Any]) -> bool:
    """A task that ends by itself: it has a ``run`` and is no service or workspace."""
    service = task.get("service") or task.get("workload_type") in ("service", "workspace")
    return bool(task.get("run")) and not service


def _follow_job(client: Client, started: RequestView) -> tuple[RequestView, int]:
    """Print the job's output as it comes until the job has ended (``logs --follow``); the
    request then, and the job's own exit code (1 when it ended without one, or was stopped)."""
    if started.state == "RUNNING":
        follow_logs(client, started.id, None)
    final = client.status(started.id)
    if final.state != "RUNNING" and final.state not in TERMINAL_STATES:
        return final, 1
    if started.state != "RUNNING":  # it ended before we looked: its output at once
        text = client.logs(started.id)
        sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")
    if final.state == "SUCCEEDED":
        return final, 0
    code = final.exit_code
    out.print(f"request {final.id}: {final.state}", markup=False)
    return final, code if isinstance(code, int) and 0 < code < 256 else 1


def _follow(
    client: Client, request_id: str, timeout_s: float | None, as_json: bool
) -> tuple[RequestView, int]:
    """Print each new progress line once until the request runs or ends; the request then,
    and the exit code."""
    from corral.services.client import EventView, WaitTimeout

    console = err if as_json else out  # progress never mixes into JSON on stdout

    def say(event: EventView) -> None:
        stamp = datetime.fromtimestamp(event.at).strftime("%H:%M:%S")
        console.print(f"{stamp}  {event.text}", markup=False)

    try:
        final = client.wait(request_id, timeout_s=timeout_s, on_event=say)
    except WaitTimeout as exc:
        return exc.request, EXIT_TIMEOUT
    console.print(f"request {request_id}: {final.state}", markup=False)
    return final, WAIT_EXIT.get(final.state, 1)
