"""Launch requests through the HTTP API: launch, status, instances, logs, terminate; and
``corral run api``, the API process itself.

These commands talk to the API only, through the public client (``corral.services.client``);
they never touch Redis. What they print is the client's typed views as JSON documents
(``View.document()``), so ``--json`` shows every field the API sent, known here or not.
``run_app`` is the ``corral run`` group: other modules add ``worker``, ``beat`` and
``flower`` to it.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from corral.services.cli.api_access import api_client, complete_request_id, fail
from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_TIMEOUT,
    err,
    fail_input,
    list_envelope,
    notice,
    out,
    print_json,
    print_list,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from corral.services.client import Client, RequestView

run_app = typer.Typer(
    name="run",
    help="Run one of Corral's processes in the foreground (api; worker, beat, flower).",
    no_args_is_help=True,
)

# States in which `launch --wait` stops waiting, and the exit code each one means.
WAIT_EXIT = {"RUNNING": 0, "SUCCEEDED": 0, "FAILED": 1, "CANCELLED": 1, "TERMINATED": 1}
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"})

JSON_OPT = typer.Option(False, "--json", help="Print JSON on stdout.")
REQUEST_ID = typer.Argument(..., help="A request id.", autocompletion=complete_request_id)


def register(app: typer.Typer) -> None:
    """Add launch, status, instances, logs, terminate and the ``run`` group to ``app``."""
    app.command("launch")(launch)
    app.command("status")(status)
    app.command("instances")(instances)
    app.command("logs")(logs)
    app.command("terminate")(terminate)
    app.command("down")(down)
    app.command("stop")(stop)
    app.command("start")(start)
    app.command(
        "exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )(exec_)
    app.add_typer(run_app, name="run")


# ---- talking to the API ---------------------------------------------------------------------


# ---- launch ---------------------------------------------------------------------------------


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
    as_json: bool = JSON_OPT,
) -> None:
    """Submit a launch request and follow it: a job's output to its end (exiting with the
    job's exit code), a service until it runs. --detach returns at once, --wait at RUNNING.
    A request whose candidates are all sold out waits for capacity (WAITING) unless
    --fail-fast; --max-wait bounds the wait."""
    task = _task_for_api(file, as_json)
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
        final, code = _follow(client, view.id, timeout_s, as_json)
        timed_out = code == EXIT_TIMEOUT
        if not (wait or as_json or timed_out) and _is_job(task):
            final, code = _follow_job(client, final)  # the job's own code from here
    if as_json:
        print_json(final.document())
    elif final.endpoints:
        out.print(_endpoints_line(final.endpoints, final.ready), markup=False)
    elif final.state == "FAILED" and final.exit_code is None:
        if final.attempts:
            _print_attempts([a.document() for a in final.attempts], console=err)
        err.print(f"error: {final.error or 'the request failed'}", markup=False)
    if timed_out:
        notice(f"still {final.state} after {timeout_s:g} s; `corral status {final.id}`")
    raise typer.Exit(code)


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


def _endpoints_line(endpoints: list[str], ready: bool | None) -> str:
    """``endpoints: A, B``, and with a readiness probe whether it has passed yet."""
    line = f"endpoints: {', '.join(endpoints)}"
    if ready is None:
        return line
    return line + ("  (ready)" if ready else "  (not ready: its readiness probe has not passed)")


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
        _follow_logs(client, started.id, None)
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


# ---- status, instances, logs, terminate -----------------------------------------------------


def _table(*headers: str, title: str | None = None) -> Table:
    from rich import box
    from rich.table import Table

    return Table(
        *headers, title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
        pad_edge=False,
    )  # fmt: skip


def _show(table: Table, console: Console = out) -> None:
    """Print ``table`` at its natural width: rich would otherwise cut ids short to fit the
    terminal (or 80 columns when piped), and a cut id cannot be pasted into the next command."""
    from rich.console import Console
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural > console.width:
        console = Console(file=console.file, width=natural, highlight=False, soft_wrap=True)
    console.print(table)


def _infra(row: dict[str, Any]) -> str:
    return "/".join(str(row.get(k) or "-") for k in ("cloud", "region", "zone"))


def _print_attempts(attempts: list[dict[str, Any]], console: Console = out) -> None:
    table = _table("INFRA", "RESOURCES", "REASON", title="attempts")
    for a in attempts:
        reason = a.get("outcome") or "running"
        if a.get("error"):
            reason = f"{reason}: {a['error']}"
        table.add_row(_infra(a), f"{a['instance_type']} ({a['market']})", reason)
    _show(table, console)


def _instance_table(rows: list[dict[str, Any]], with_request: bool) -> Table:
    pooled = any(i.get("machine_type") for i in rows)  # a pool's machine types, when any
    headers = ["ID", *(["REQUEST"] if with_request else []), "STATE", "INFRA", "TYPE", "MARKET"]
    table = _table(*headers, *(["MACHINE TYPE"] if pooled else []), "PROVIDER ID", "PID")
    for i in rows:
        request = [i.get("request_id") or "-"] if with_request else []
        machine = [i.get("machine_type") or "-"] if pooled else []
        table.add_row(
            i["id"], *request, i["state"], _infra(i), i["instance_type"], i["market"], *machine,
            i.get("provider_id") or "-", str(i["pid"]) if i.get("pid") is not None else "-",
        )  # fmt: skip
    return table


def complete_state(incomplete: str) -> list[str]:
    """Shell completion of ``--state``: the request states."""
    from corral.shared.lifecycle import RequestState

    return [s.value for s in RequestState if s.value.startswith(incomplete.upper())]


def status(
    request_id: str | None = typer.Argument(
        None, help="A request id; none: list all.", autocompletion=complete_request_id
    ),
    state: str | None = typer.Option(
        None, "--state", help="List only requests in this state.", autocompletion=complete_state
    ),
    limit: int = typer.Option(100, "--limit", min=1, max=1000, help="List at most this many."),
    watch: bool = typer.Option(
        False, "--watch", "-w", help="Refresh until Ctrl-C or every request shown has ended."
    ),
    interval_s: float = typer.Option(
        2.0, "--interval", min=0.1, help="With --watch: seconds between refreshes."
    ),
    project: str | None = typer.Option(
        None, "--project", metavar="NAME", help="List only this project's requests."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """One launch request with its attempts and instances, or a table of all (a member or
    viewer sees its projects' requests only)."""
    with api_client(as_json) as client:
        if watch:
            _watch(client, request_id, state, limit, interval_s, as_json, project)
            return
        views = _status_views(client, request_id, state, limit, project)
    if as_json:
        print_json(views[0] if request_id else list_envelope("requests", views))
        return
    _print_status(views, request_id)


def _status_views(
    client: Client,
    request_id: str | None,
    state: str | None,
    limit: int,
    project: str | None = None,
) -> list[dict[str, Any]]:
    """The requests ``status`` shows, as the API's JSON documents (all their fields)."""
    if request_id is None:
        found = client.list_requests(state=state, limit=limit, project=project)
    else:
        found = [client.status(request_id)]
    return [v.document() for v in found]


def _watch(
    client: Client,
    request_id: str | None,
    state: str | None,
    limit: int,
    interval_s: float,
    as_json: bool,
    project: str | None = None,
) -> None:
    """``status --watch``: the same view every ``interval_s`` until every request shown has
    ended, or Ctrl-C. A terminal is redrawn; a pipe or file gets the view again each time it
    changed (with ``--json``: one JSON document a line)."""
    last: list[dict[str, Any]] | None = None
    try:
        while True:
            views = _status_views(client, request_id, state, limit, project)
            if out.is_terminal or views != last:
                _snapshot(views, request_id, interval_s, as_json)
                last = views
            if views and all(v["state"] in TERMINAL_STATES for v in views):
                return
            time.sleep(interval_s)
    except KeyboardInterrupt:
        return


def _snapshot(
    views: list[dict[str, Any]], request_id: str | None, interval_s: float, as_json: bool
) -> None:
    import json

    if as_json:
        doc = views[0] if request_id else list_envelope("requests", views)
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
        sys.stdout.flush()
        return
    stamp = datetime.now().strftime("%H:%M:%S")
    if out.is_terminal:
        out.clear()
        out.print(f"{stamp}  every {interval_s:g} s; Ctrl-C to stop", style="dim", markup=False)
    else:
        out.print(f"--- {stamp}", markup=False)
    _print_status(views, request_id)


def _print_status(views: list[dict[str, Any]], request_id: str | None) -> None:
    if request_id is None:
        table = _table("ID", "NAME", "STATE", "ATTEMPTS", "INSTANCES", "LAST INFRA")
        for v in views:
            last = _infra(v["attempts"][-1]) if v["attempts"] else "-"
            table.add_row(v["id"], v.get("name") or "-", v["state"], str(len(v["attempts"])),
                          str(len(v["instances"])), last)  # fmt: skip
        _show(table)
        return
    view = views[0]
    out.print(f"{view['id']}  {view['state']}", markup=False)
    if view.get("endpoints"):
        out.print(_endpoints_line(view["endpoints"], view.get("ready")), markup=False)
    if view["attempts"]:
        _print_attempts(view["attempts"])
    if view["instances"]:
        _show(_instance_table(view["instances"], with_request=False))
    if view.get("runs"):
        _print_runs(view)


def _print_runs(view: dict[str, Any]) -> None:
    """Each launch that came up (the first, relaunches, restarts) and what they cost."""
    table = _table("#", "INFRA", "NODES", "STARTED", "DURATION", "OUTCOME", "COST", title="runs")
    for n, run in enumerate(view["runs"], 1):
        end = run["ended_at"] if run["ended_at"] is not None else time.time()
        table.add_row(
            str(n),
            _infra(run),
            str(run["nodes"]),
            datetime.fromtimestamp(run["started_at"]).strftime("%H:%M:%S"),
            f"{max(0.0, end - run['started_at']):.0f}s",
            run["outcome"],
            _usd(run["cost_usd"]),
        )
    _show(table)
    counts = f"relaunches {view.get('relaunches') or 0}, restarts {view.get('restarts') or 0}"
    out.print(f"cost over every run: {_usd(view.get('cost_usd'))} ({counts})", markup=False)


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def instances(
    request_id: str | None = typer.Option(None, "--request", help="Only this request's."),
    state: str | None = typer.Option(None, "--state", help="Only instances in this state."),
    as_json: bool = JSON_OPT,
) -> None:
    """Every instance Corral knows, across requests."""
    with api_client(as_json) as client:
        found = client.instances(request_id=request_id, state=state)
    rows = [i.document() for i in found]
    if as_json:
        print_list("instances", rows)
    else:
        _show(_instance_table(rows, with_request=True))


def logs(
    request_id: str = REQUEST_ID,
    instance_id: str | None = typer.Option(None, "--instance", help="Only this instance's."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new output until the request ends."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """The output of a request's instances."""
    with api_client(as_json) as client:
        if follow and not as_json:
            _follow_logs(client, request_id, instance_id)
            return
        text = client.logs(request_id, instance_id)
    if as_json:
        print_json({"request_id": request_id, "instance": instance_id, "logs": text})
    else:
        sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def _follow_logs(client: Client, request_id: str, instance_id: str | None) -> None:
    """Print the output, then what is added to it each second, until the request has ended
    or Ctrl-C (``Client.follow_logs``)."""
    last = ""
    try:
        for piece in client.follow_logs(request_id, instance_id):
            sys.stdout.write(piece)
            sys.stdout.flush()
            last = piece or last
    except KeyboardInterrupt:
        return
    if last and not last.endswith("\n"):
        sys.stdout.write("\n")


def terminate(
    request_ids: list[str] = typer.Argument(
        ..., help="One or more request ids.", autocompletion=complete_request_id
    ),
    instance_id: str | None = typer.Option(
        None, "--instance", help="Only this instance (of one request)."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Cancel requests that have not run yet, or terminate running ones' instances (or one)."""
    if instance_id and len(request_ids) > 1:
        fail("--instance names an instance of one request; give only that request's id", 2, as_json)
    _stop_requests(request_ids, instance_id, as_json, one=len(request_ids) == 1)


def stop(request_id: str = REQUEST_ID, as_json: bool = JSON_OPT) -> None:
    """Stop a running service's machines, keeping their disks (AWS, Google Cloud); `corral
    start` brings them back. Refused (exit 2) on a cloud that cannot stop a machine."""
    with api_client(as_json) as client:
        view = client.stop(request_id)
    if as_json:
        print_json(view.document())
    else:
        out.print(f"request {view.id}: stopping", markup=False)


def start(request_id: str = REQUEST_ID, as_json: bool = JSON_OPT) -> None:
    """Start a stopped service's machines again; it is RUNNING once their agents report."""
    with api_client(as_json) as client:
        view = client.start(request_id)
    if as_json:
        print_json(view.document())
    else:
        out.print(f"request {view.id}: starting", markup=False)


def exec_(
    ctx: typer.Context,
    request_id: str = REQUEST_ID,
    node: int = typer.Option(0, "--node", min=0, help="The node's index (0: the head)."),
) -> None:
    """Run a command on a running request's node through its agent, after `--`: its output
    as it comes, and its exit code as this command's (`corral exec ID -- nvidia-smi`)."""
    command = list(ctx.args)
    if not command:
        fail("expected a command after --: corral exec ID -- CMD", EXIT_INPUT, False)
    import shlex

    text = command[0] if len(command) == 1 else shlex.join(command)
    code = 1
    with api_client(False) as client:
        for piece in client.exec(request_id, text, node=node):
            if isinstance(piece, int):
                code = piece
            else:
                sys.stdout.write(piece)
                sys.stdout.flush()
    raise typer.Exit(code)


def down(
    request_ids: list[str] | None = typer.Argument(
        None, help="Request ids.", autocompletion=complete_request_id
    ),
    all_requests: bool = typer.Option(False, "--all", "-a", help="Every request not ended."),
    as_json: bool = JSON_OPT,
) -> None:
    """Take requests down: cancel what waits, terminate what runs (SkyPilot's `down`)."""
    if bool(request_ids) == all_requests:
        fail("give request ids, or --all (not both)", 2, as_json)
    if all_requests:
        with api_client(as_json) as client:
            request_ids = [
                v["id"]
                for v in _status_views(client, None, None, 1000)
                if v["state"] not in TERMINAL_STATES
            ]
        if not request_ids:
            print_list("requests", []) if as_json else out.print("nothing to take down")
            return
    _stop_requests(request_ids or [], None, as_json, one=False)


def _stop_requests(
    request_ids: list[str], instance_id: str | None, as_json: bool, *, one: bool
) -> None:
    """Terminate each request (or one instance of one), saying what became of each; exit 2
    (2) when any id was unknown (the rest are stopped all the same). ``one``: the JSON is
    that request's view (``terminate ID``), else ``{"requests": [...]}``."""
    from corral.services.client import Conflict, NotFound

    views: list[dict[str, Any]] = []
    failed = 0
    with api_client(as_json) as client:
        for rid in request_ids:
            try:
                view = client.terminate(rid, instance_id).document()
            except (NotFound, Conflict) as exc:  # the others stop the command (a bad token...)
                failed += 1
                err.print(f"{rid}: {exc}", markup=False)
                continue
            views.append(view)
            if as_json:
                continue
            if view["state"] in TERMINAL_STATES:
                out.print(f"request {view['id']}: {view['state']}", markup=False)
                continue
            what = f"instance {instance_id} of " if instance_id else ""
            out.print(
                f"terminating {what}request {view['id']} (now {view['state']}); "
                f"follow with `corral status {view['id']}`",
                markup=False,
            )
    if as_json:
        if one and views:
            print_json(views[0])
        else:
            print_list("requests", views)
    if failed:  # an id the API does not know is the input's fault, as for one id
        raise typer.Exit(EXIT_INPUT)


# ---- corral run api ---------------------------------------------------------------------------


@run_app.command("api")
def run_api(
    host: str | None = typer.Option(None, "--host", help="Address to bind (CORRAL_API_HOST)."),
    port: int | None = typer.Option(
        None, "--port", min=0, max=65535, help="Port (CORRAL_API_PORT); 0 picks a free one."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Serve the HTTP API (uvicorn) until interrupted."""
    import uvicorn

    from corral.services.api import create_app
    from corral.services.settings import get_settings

    settings = get_settings()
    host = host or settings.api_host
    port = settings.api_port if port is None else port
    try:
        app = create_app(settings)
    except RuntimeError as exc:
        fail(str(exc), EXIT_INPUT, as_json)
    try:
        sock = _listen(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_INPUT, as_json)
    bound = sock.getsockname()[1]
    url = f"http://{f'[{host}]' if ':' in host else host}:{bound}"
    if as_json:
        print_json({"url": url})
    else:
        out.print(f"api listening on {url}", markup=False)
    sys.stdout.flush()
    # Logs go to stderr, as text or JSON lines (CORRAL_LOG_FORMAT): see uvicorn_log_config.
    from corral.services.api.server import server_config
    from corral.services.observability.logs import uvicorn_log_config

    log_config = uvicorn_log_config(settings)
    config = server_config(app, settings, log_level="info", lifespan="on", log_config=log_config)
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> Any:
    """A listening socket, so the port (chosen here when 0) is known before serving starts.
    Made with its protocol named (TCP): asyncio turns Nagle's algorithm off only on a socket
    that says it is TCP, and a connection accepted on a socket made with protocol 0 kept it
    on. Then every answer on a kept-alive connection after the first (its headers and body go
    out as two writes) waited for the client's delayed ACK: 40 ms a request."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
