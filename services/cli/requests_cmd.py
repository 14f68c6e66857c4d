"""Requests through the HTTP API: status, instances, logs, terminate (``launch`` is in
launch_cmd.py); and
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
from typing import TYPE_CHECKING, Any

import typer

from corral.services.cli.api_access import api_client, complete_request_id, fail
from corral.services.cli.output import (
    EXIT_INPUT,
    data_row,
    err,
    list_envelope,
    out,
    print_json,
    print_list,
    report,
    wide_console,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from corral.services.client import Client

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
    """Add status, instances, logs, terminate, down, stop, start and the ``run`` group to
    ``app`` (``launch`` is launch_cmd's, ``exec`` jobs_cmd's)."""
    app.command("status")(status)
    app.command("instances")(instances)
    app.command("logs")(logs)
    app.command("terminate")(terminate)
    app.command("down")(down)
    app.command("stop")(stop)
    app.command("autostop")(autostop)
    app.command("start")(start)
    app.add_typer(run_app, name="run")


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
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural > console.width:
        console = wide_console(console, natural)
    console.print(table)


def _infra(row: dict[str, Any]) -> str:
    return "/".join(str(row.get(k) or "-") for k in ("cloud", "region", "zone"))


def service_line(view: dict[str, Any]) -> str:
    """``service endpoint: URL  (2 of 2 replicas ready: 1, 2)`` for a replicated service."""
    replicas = view.get("replicas") or []
    ready = [str(r["replica"]) for r in replicas if r.get("ready")]
    kept = view.get("replicas_target")
    names = f": {', '.join(ready)}" if ready else ""
    return (
        f"service endpoint: {view['service_endpoint']}  "
        f"({len(ready)} of {kept} replicas ready{names})"
    )


def endpoints_line(endpoints: list[str], ready: bool | None) -> str:
    """``endpoints: A, B``, and with a readiness probe whether it has passed yet."""
    line = f"endpoints: {', '.join(endpoints)}"
    if ready is None:
        return line
    return line + ("  (ready)" if ready else "  (not ready: its readiness probe has not passed)")


def print_attempts(attempts: list[dict[str, Any]], console: Console = out) -> None:
    table = _table("INFRA", "RESOURCES", "REASON", title="attempts")
    for a in attempts:
        reason = a.get("outcome") or "running"
        if a.get("error"):
            reason = f"{reason}: {a['error']}"
        data_row(table, _infra(a), f"{a['instance_type']} ({a['market']})", reason)
    _show(table, console)


def _instance_table(rows: list[dict[str, Any]], with_request: bool) -> Table:
    pooled = any(i.get("machine_type") for i in rows)  # a pool's machine types, when any
    headers = ["ID", *(["REQUEST"] if with_request else []), "STATE", "INFRA", "TYPE", "MARKET"]
    table = _table(*headers, *(["MACHINE TYPE"] if pooled else []), "PROVIDER ID", "PID")
    for i in rows:
        request = [i.get("request_id") or "-"] if with_request else []
        machine = [i.get("machine_type") or "-"] if pooled else []
        data_row(
            table, i["id"], *request, i["state"], _infra(i), i["instance_type"], i["market"],
            *machine,
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
    ip: bool = typer.Option(False, "--ip", help="Print the head node's address alone."),
    endpoint: int | None = typer.Option(
        None, "--endpoint", metavar="PORT", min=1, max=65535, help="Print PORT's endpoint alone."
    ),
    endpoints: bool = typer.Option(False, "--endpoints", help="Print every endpoint, one a line."),
    as_json: bool = JSON_OPT,
) -> None:
    """One launch request with its attempts and instances, or a table of all (a member or
    viewer sees its projects' requests only). With --ip, --endpoint PORT or --endpoints, only
    that (as SkyPilot's `sky status --ip` / `--endpoint`), for scripts."""
    if ip or endpoint is not None or endpoints:
        _print_address(request_id, ip, endpoint, endpoints, as_json)
        return
    with api_client(as_json) as client:
        if watch:
            _watch(client, request_id, state, limit, interval_s, as_json, project)
            return
        views = _status_views(client, request_id, state, limit, project)
    if as_json:
        print_json(views[0] if request_id else list_envelope("requests", views))
        return
    _print_status(views, request_id)


def _print_address(
    request_id: str | None, ip: bool, endpoint: int | None, endpoints: bool, as_json: bool
) -> None:
    """``status ID --ip | --endpoint PORT | --endpoints``: one answer on stdout, exit 1 when
    the request has none yet."""
    if request_id is None or sum((ip, endpoint is not None, endpoints)) > 1:
        fail("give one request id and one of --ip, --endpoint PORT, --endpoints", 2, as_json)
    with api_client(as_json) as client:
        view = client.status(request_id)
    if ip:
        head = next((i for i in view.instances if i.address and i.state == "RUNNING"), None)
        if head is None:
            fail(
                f"request {view.id} ({view.state}) has no running node with an address", 1, as_json
            )
        found: list[str] = [head.address or ""]
    elif view.service_endpoint:  # replicas behind the API's load balancer: its URL
        found = [view.service_endpoint]
    else:
        found = list(view.endpoints)
        if endpoint is not None:
            found = [e for e in (_endpoint_for(e, endpoint) for e in found) if e]
        if not found:
            what = f"port {endpoint}" if endpoint is not None else "any port"
            fail(f"request {view.id} ({view.state}) has no endpoint for {what}", 1, as_json)
    if as_json:
        print_json({"id": view.id, "ip" if ip else "endpoints": found[0] if ip else found})
        return
    for line in found:
        out.print(line, markup=False)


def _endpoint_for(endpoint: str, port: int) -> str | None:
    """``host:8080`` for port 8080 of ``host:8080`` or of a range ``host:8000-8100``; None when
    the endpoint does not hold that port."""
    host, _, ports = endpoint.rpartition(":")
    first, _, last = ports.partition("-")
    if not (host and first.isdigit() and (not last or last.isdigit())):
        return None
    return f"{host}:{port}" if int(first) <= port <= int(last or first) else None


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
            data_row(table, v["id"], v.get("name") or "-", v["state"],
                     str(len(v["attempts"])), str(len(v["instances"])), last)  # fmt: skip
        _show(table)
        return
    view = views[0]
    out.print(f"{view['id']}  {view['state']}", markup=False)
    if view.get("service_endpoint"):
        out.print(service_line(view), markup=False)
    elif view.get("endpoints"):
        out.print(endpoints_line(view["endpoints"], view.get("ready")), markup=False)
    if view["attempts"]:
        print_attempts(view["attempts"])
    if view["instances"]:
        _show(_instance_table(view["instances"], with_request=False))
    if view.get("runs"):
        _print_runs(view)


def _print_runs(view: dict[str, Any]) -> None:
    """Each launch that came up (the first, relaunches, restarts) and what they cost."""
    table = _table("#", "INFRA", "NODES", "STARTED", "DURATION", "OUTCOME", "COST", title="runs")
    for n, run in enumerate(view["runs"], 1):
        end = run["ended_at"] if run["ended_at"] is not None else time.time()
        data_row(
            table,
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
            try:
                follow_logs(client, request_id, instance_id)
            except KeyboardInterrupt:
                from corral.services.cli.interrupt import interrupted

                interrupted(client, request_id, down=False, offer=False)
            return
        text = client.logs(request_id, instance_id)
    if as_json:
        print_json({"request_id": request_id, "instance": instance_id, "logs": text})
    else:
        sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def follow_logs(client: Client, request_id: str, instance_id: str | None) -> None:
    """Print the output, then what is added to it each second, until the request has ended
    or Ctrl-C (``Client.follow_logs``)."""
    last = ""
    for piece in client.follow_logs(request_id, instance_id):
        sys.stdout.write(piece)
        sys.stdout.flush()
        last = piece or last
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
    report(as_json, view.document(), f"request {view.id}: stopping")


def autostop(
    request_id: str = REQUEST_ID,
    idle_minutes: float | None = typer.Option(
        None, "--idle-minutes", "-i", min=0, help="Stop after this many idle minutes (default 5)."
    ),
    down: bool = typer.Option(False, "--down", help="Terminate instead of stop (autodown)."),
    cancel: bool = typer.Option(False, "--cancel", help="Cancel the autostop."),
    as_json: bool = JSON_OPT,
) -> None:
    """Set or cancel a running request's autostop, as SkyPilot's `sky autostop`: idle time
    counts from now; a cloud that cannot stop a machine terminates it."""
    if cancel and (idle_minutes is not None or down):
        fail("give --cancel alone, or -i N (and --down)", EXIT_INPUT, as_json)
    with api_client(as_json) as client:
        view = client.autostop(request_id, idle_minutes, down=down, cancel=cancel)
    then = "terminated" if down else "stopped"
    minutes = 5 if idle_minutes is None else idle_minutes
    said = "autostop cancelled" if cancel else f"{then} after {minutes:g} idle minutes"
    report(as_json, view.document(), f"request {view.id}: {said}")


def start(request_id: str = REQUEST_ID, as_json: bool = JSON_OPT) -> None:
    """Start a stopped service's machines again; it is RUNNING once their agents report."""
    with api_client(as_json) as client:
        view = client.start(request_id)
    report(as_json, view.document(), f"request {view.id}: starting")


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
        app = create_app(settings, own_process=True)
    except RuntimeError as exc:
        fail(str(exc), EXIT_INPUT, as_json)
    try:
        sock = _listen(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_INPUT, as_json)
    bound = sock.getsockname()[1]
    url = f"http://{f'[{host}]' if ':' in host else host}:{bound}"
    report(as_json, {"url": url}, f"api listening on {url}")
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
