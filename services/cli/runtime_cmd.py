"""Launch requests through the HTTP API: launch, status, instances, logs, terminate; and
``corral run api``, the API process itself.

These commands talk to the API only (``corral.services.cli.client``); they never touch Redis.
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

from corral.services.cli.api_access import api_client, fail
from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_TIMEOUT,
    err,
    fail_input,
    notice,
    out,
    print_json,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from corral.services.cli.client import Client

run_app = typer.Typer(
    name="run",
    help="Run one of Corral's processes in the foreground (api; worker, beat, flower).",
    no_args_is_help=True,
)

POLL_INTERVAL_S = 0.25  # --wait polls the events endpoint about 4 times a second
# States in which `launch --wait` stops waiting, and the exit code each one means.
WAIT_EXIT = {"RUNNING": 0, "SUCCEEDED": 0, "FAILED": 1, "CANCELLED": 1, "TERMINATED": 1}
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"})

JSON_OPT = typer.Option(False, "--json", help="Print JSON on stdout.")


def register(app: typer.Typer) -> None:
    """Add launch, status, instances, logs, terminate and the ``run`` group to ``app``."""
    app.command("launch")(launch)
    app.command("status")(status)
    app.command("instances")(instances)
    app.command("logs")(logs)
    app.command("terminate")(terminate)
    app.add_typer(run_app, name="run")


# ---- talking to the API ---------------------------------------------------------------------


# ---- launch ---------------------------------------------------------------------------------


def task_for_api(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The task file validated here, as the mapping to send, and its notices; raises
    ConfigError. A ``compute_config`` given as a path (relative to the task file) is read,
    validated and sent inline, as the file writes it: the API cannot read our files."""
    from corral.shared.config.base import ignored_notices
    from corral.shared.config.compute_config import ComputeConfig
    from corral.shared.config.detect import load_as
    from corral.shared.config.task import Task
    from corral.shared.configio import ConfigError

    task, doc = load_as(path, Task)
    data: dict[str, Any] = dict(doc.data)
    notices = list(ignored_notices(task, doc))
    config = task.compute_config
    if isinstance(config, str):
        ref = Path(config).expanduser()
        ref = ref if ref.is_absolute() else path.parent / ref
        if not ref.is_file():
            raise doc.error(("compute_config",), f"no compute config file {str(ref)!r}")
        config, config_doc = load_as(ref, ComputeConfig)
        data["compute_config"] = config_doc.data
        notices += ignored_notices(config, config_doc)
    elif config is not None and (found := config.problems()):
        raise ConfigError([doc.issue(("compute_config", *p), msg) for p, msg in found])
    return data, notices


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
    wait: bool = typer.Option(False, "--wait", help="Follow progress until RUNNING or ended."),
    timeout_s: float | None = typer.Option(
        None, "--timeout", min=0, help="With --wait: give up after this many seconds (exit 3)."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Submit a launch request and print its id; with --wait, follow it."""
    task = _task_for_api(file, as_json)
    with api_client(as_json, source=str(file)) as client:
        view = client.submit(task)
        if not wait:
            print_json(view) if as_json else out.print(view["id"], markup=False)
            return
        if not as_json:
            out.print(view["id"], markup=False)
        code = _follow(client, view["id"], timeout_s, as_json)
        final = client.get_request(view["id"])
    if as_json:
        print_json(final)
    elif final["state"] == "FAILED" and final["attempts"]:
        _print_attempts(final["attempts"], console=err)
    if code == EXIT_TIMEOUT:
        notice(f"still {final['state']} after {timeout_s:g} s; `corral status {final['id']}`")
    raise typer.Exit(code)


def _follow(client: Client, request_id: str, timeout_s: float | None, as_json: bool) -> int:
    """Print each new progress line once until the request runs or ends; the exit code."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    console = err if as_json else out  # progress never mixes into JSON on stdout
    after = 0
    while True:
        page = client.events(request_id, after=after)
        for event in page["events"]:
            stamp = datetime.fromtimestamp(event["at"]).strftime("%H:%M:%S")
            console.print(f"{stamp}  {event['text']}", markup=False)
            after = max(after, int(event["seq"]))
        if page["state"] in WAIT_EXIT:
            console.print(f"request {request_id}: {page['state']}", markup=False)
            return WAIT_EXIT[str(page["state"])]
        if deadline is not None and time.monotonic() >= deadline:
            return EXIT_TIMEOUT
        time.sleep(POLL_INTERVAL_S)


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


def status(
    request_id: str | None = typer.Argument(None, help="A request id; none: list all."),
    state: str | None = typer.Option(None, "--state", help="List only requests in this state."),
    limit: int = typer.Option(100, "--limit", min=1, max=1000, help="List at most this many."),
    as_json: bool = JSON_OPT,
) -> None:
    """One launch request with its attempts and instances, or a table of all."""
    with api_client(as_json) as client:
        if request_id is None:
            views = client.list_requests(state=state.upper() if state else None, limit=limit)
        else:
            views = [client.get_request(request_id)]
    if as_json:
        print_json(views[0] if request_id else views)
        return
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
    if view["attempts"]:
        _print_attempts(view["attempts"])
    if view["instances"]:
        _show(_instance_table(view["instances"], with_request=False))


def instances(
    request_id: str | None = typer.Option(None, "--request", help="Only this request's."),
    state: str | None = typer.Option(None, "--state", help="Only instances in this state."),
    as_json: bool = JSON_OPT,
) -> None:
    """Every instance Corral knows, across requests."""
    with api_client(as_json) as client:
        rows = client.list_instances(request_id=request_id, state=state.upper() if state else None)
    if as_json:
        print_json(rows)
    else:
        _show(_instance_table(rows, with_request=True))


def logs(
    request_id: str = typer.Argument(..., help="A request id."),
    instance_id: str | None = typer.Option(None, "--instance", help="Only this instance's."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new output until the request ends."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """The output of a request's instances."""
    with api_client(as_json) as client:
        text = client.logs(request_id, instance_id)
        if follow and not as_json:
            _follow_logs(client, request_id, instance_id, text)
            return
    if as_json:
        print_json({"request_id": request_id, "instance": instance_id, "logs": text})
    else:
        sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def _follow_logs(client: Client, request_id: str, instance_id: str | None, text: str) -> None:
    """Print the output, then what is added to it each second, until the request has ended
    (one last read after). Output that no longer extends what was printed (an instance
    replaced, the kept tail moved on) is printed again whole under a marker line."""
    sys.stdout.write(text)
    sys.stdout.flush()
    shown = text
    ended = False
    try:
        while not ended:
            time.sleep(1.0)
            ended = client.get_request(request_id)["state"] in TERMINAL_STATES
            now = client.logs(request_id, instance_id)
            if now.startswith(shown):
                sys.stdout.write(now[len(shown) :])
            elif now != shown:
                sys.stdout.write(f"\n--- the output was replaced; all of it again ---\n{now}")
            sys.stdout.flush()
            shown = now
    except KeyboardInterrupt:
        return
    if shown and not shown.endswith("\n"):
        sys.stdout.write("\n")


def terminate(
    request_id: str = typer.Argument(..., help="A request id."),
    instance_id: str | None = typer.Option(None, "--instance", help="Only this instance."),
    as_json: bool = JSON_OPT,
) -> None:
    """Cancel a request that has not run yet, or terminate a running one's instances (or one)."""
    with api_client(as_json) as client:
        view = client.terminate(request_id, instance_id)
    if as_json:
        print_json(view)
        return
    if view["state"] in TERMINAL_STATES:
        out.print(f"request {view['id']}: {view['state']}", markup=False)
        return
    what = f"instance {instance_id} of " if instance_id else ""
    out.print(
        f"terminating {what}request {view['id']} (now {view['state']}); "
        f"follow with `corral status {view['id']}`",
        markup=False,
    )


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
    from corral.services.observability.logs import uvicorn_log_config

    log_config = uvicorn_log_config(settings)
    config = uvicorn.Config(app, log_level="info", lifespan="on", log_config=log_config)
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> Any:
    """A listening socket, so the port (chosen here when 0) is known before serving starts."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
