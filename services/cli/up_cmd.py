"""``corral up`` and the process commands it starts: ``corral run worker|beat|flower``."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corral.services.cli.output import EXIT_INPUT, err, fail, out

if TYPE_CHECKING:
    from corral.services.cli.supervisor import Supervisor
    from corral.services.settings import Settings

CELERY_APP = "corral.workers.app"
# Named, not imported (services never import workers): redbeat's, riding through Redis faults.
BEAT_SCHEDULER = "corral.workers.resilience:BeatScheduler"


# The worker's and beat's entry point, a module run by name (services never import workers).
START_MODULE = "corral.workers.start"


def _exec_celery(args: list[str]) -> None:
    """Replace this process with a Celery command (services never import worker code)."""
    _exec([sys.executable, "-m", "celery", "-A", CELERY_APP, *args])


def _exec_start(args: list[str]) -> None:
    """Replace this process with a worker or beat of the app, started without Celery's
    command line, which loads every plugin's command first (see corral.workers.start)."""
    _exec([sys.executable, "-m", START_MODULE, *args])


def _exec(argv: list[str]) -> None:
    sys.stdout.flush()
    os.execv(argv[0], argv)


def worker(
    role: Annotated[str, typer.Option(help="schedule | provision | autoscale")],
    concurrency: Annotated[int, typer.Option(help="processes in this worker's pool")] = 0,
    name: Annotated[str, typer.Option(help="node name (default ROLE-PID@host)")] = "",
    metrics_port: Annotated[
        int | None,
        typer.Option(help="serve /metrics on this port (default CORRAL_METRICS_PORT: none)"),
    ] = None,
) -> None:
    """Run one worker of a role (add more processes to scale that role out)."""
    from corral.services.observability.exposition import worker_environment
    from corral.services.providers.registry import registered_clouds
    from corral.services.queues.task_names import role_queues  # not Celery: it starts next
    from corral.services.settings import get_settings

    queues = role_queues(registered_clouds())
    if role not in queues:
        out.print(f"unknown role {role!r}: expected one of {', '.join(queues)}")
        raise typer.Exit(EXIT_INPUT)
    settings = _with_redis(get_settings())
    # Prometheus's multiprocess mode for the prefork pool: set before Celery starts.
    os.environ.update(worker_environment(settings, role, metrics_port or settings.metrics_port))
    _exec_start(
        [
            *_quiet(settings),
            "worker",
            "--queues",
            ",".join(queues[role]),
            "--hostname",
            name or f"{role}-{os.getpid()}@%h",
            "--concurrency",
            str(concurrency or settings.worker_concurrency),
        ]
    )


def beat() -> None:
    """Run beat (redbeat: a Redis lock keeps a second beat on standby)."""
    from corral.services.settings import get_settings

    _exec_start([*_quiet(_with_redis(get_settings())), "beat", "--scheduler", BEAT_SCHEDULER])


def _with_redis(settings: Settings) -> Settings:
    """``settings`` when they name a Redis; otherwise the missing setting said and exit code 2
    (the worker or beat exec'd without one stopped on a traceback from the app's set-up)."""
    if not settings.redis_url:
        err.print(
            "CORRAL_REDIS_URL is not set: a worker or beat needs the Redis the API uses "
            "(`corral up` sets it for what it starts)"
        )
        raise typer.Exit(EXIT_INPUT)
    return settings


def _quiet(settings: Settings) -> list[str]:
    """JSON logs: no start-up banner on stdout, so every line a log collector reads is JSON."""
    return ["--quiet"] if settings.log_format == "json" else []


def flower(port: Annotated[int, typer.Option(help="0: a free port")] = 0) -> None:
    """Run Flower (credentials from FLOWER_BASIC_AUTH, set by `corral up`)."""
    from corral.services.cli.supervisor import free_port

    _exec_celery(["flower", "--address=127.0.0.1", f"--port={port or free_port()}"])


def _stop_local_instances(settings: Settings) -> int:
    """Kill the local cloud's agents as a power cut would: the next `corral up` on this home
    finds them lost and relaunches their requests."""
    if not settings.redis_url:
        return 0
    from corral.services.providers.local.provider import LocalProvider
    from corral.services.runtime.deps import Deps

    provider = Deps(settings).provider("local")
    assert isinstance(provider, LocalProvider)
    return provider.power_off()


def up(
    local_cloud: Annotated[Path | None, typer.Option(help="local cloud file (YAML)")] = None,
    redis_url: Annotated[
        str | None, typer.Option(help="use this Redis instead of starting one")
    ] = None,
    api_port: Annotated[int, typer.Option(help="0: a free port")] = 0,
    flower_port: Annotated[int, typer.Option(help="0: a free port")] = 0,
) -> None:
    """Bring Corral up in the foreground: Redis, API, three workers, beat, Flower."""
    from corral.services.cli.supervisor import (
        HomeLocked,
        Supervisor,
        free_port,
        lock_home,
        private_dir,
        secret_file,
        write_private,
    )
    from corral.services.settings import get_settings

    # Everything this process and its children create (logs, Redis's files, the local cloud's
    # folders) is its user's alone: no other user of the machine reads CORRAL_HOME.
    os.umask(0o077)

    base = get_settings()
    updates: dict[str, object] = {}
    if local_cloud is not None:
        from corral.shared.config.localcloud import load_local_cloud

        load_local_cloud(local_cloud)  # a bad file is exit 2 before anything starts
        updates["local_cloud_file"] = local_cloud.resolve()
    if redis_url:
        updates["redis_url"] = redis_url
    settings = base.model_copy(update=updates)
    try:  # one `up` per home: a second would start a Redis on the first's files (issue #47)
        held = lock_home(settings.home)
    except HomeLocked as exc:
        fail(str(exc), EXIT_INPUT)
    private_dir(settings.home)
    private_dir(settings.logs)
    sup = Supervisor(
        settings,
        api_port=api_port or settings.api_port or free_port(),
        flower_port=flower_port or settings.flower_port or free_port(),
        say=lambda m: out.print(f"[up] {m}", markup=False),
    )

    stop_requested = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True
        sup.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)  # the terminal closed: stop, leave nothing behind
    try:
        if not settings.redis_url:
            settings = settings.model_copy(update={"redis_url": sup.start_redis()})
            sup.settings = settings
        token_path = settings.file("api-token")
        token = (
            settings.api_token.get_secret_value() if settings.api_token else secret_file(token_path)
        )
        flower_path = settings.file("flower-password")
        flower_pw = (
            settings.flower_password.get_secret_value()
            if settings.flower_password
            else secret_file(flower_path)
        )
        api_url = f"http://127.0.0.1:{sup.api_port}"
        settings.file("api-url").write_text(api_url + "\n")
        write_private(settings.file("redis-url"), f"{settings.redis_url}\n")  # may hold a password
        sup.plan_children(token, flower_pw)
        sup.start_all()
        _say_addresses(
            settings,
            sup,
            api_url,
            token_path if not settings.api_token else None,
            flower_path if not settings.flower_password else None,
        )
        if not stop_requested:
            sup.supervise()
    finally:
        out.print("[up] stopping ...")
        sup.stop(lambda: _stop_local_instances(settings))
        _forget_addresses(settings)
        out.print("[up] stopped")
        held.close()  # the lock: after everything this `up` started has stopped


def _forget_addresses(settings: Settings) -> None:
    """Remove the API and Redis addresses this installation wrote, so a command run after it
    stopped says there is no API (and how to start one) instead of "connection refused"."""
    for name in ("api-url", "redis-url"):
        with contextlib.suppress(FileNotFoundError):
            settings.file(name).unlink()


def _say_addresses(
    settings: Settings,
    sup: Supervisor,
    api_url: str,
    token_path: Path | None,
    flower_path: Path | None,
) -> None:
    from corral.services.cli.supervisor import masked_url, wait_port

    ready = wait_port(sup.api_port, 30)
    out.print(f"[up] redis   {masked_url(settings.redis_url or '')}", markup=False)
    out.print(f"[up] api     {api_url}{'' if ready else ' (still starting)'}", markup=False)
    out.print(f"[up] console {api_url}/console  (sign in with the API token)", markup=False)
    out.print(
        f"[up] flower  http://127.0.0.1:{sup.flower_port}  (user {settings.flower_user}"
        + (
            f", password in {flower_path})"
            if flower_path
            else ", password from CORRAL_FLOWER_PASSWORD)"
        ),
        markup=False,
    )
    workers = ", ".join(f"{role} :{port}" for role, port in sup.metrics_ports.items())
    out.print(f"[up] metrics {api_url}/metrics; workers {workers}", markup=False)
    if token_path:
        out.print(f"[up] API token in {token_path} (mode 0600)", markup=False)
    out.print(f"[up] local cloud {settings.local_cloud_file}", markup=False)
    out.print(f"[up] logs in {settings.logs}; Ctrl-C stops everything", markup=False)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    time.sleep(0)


def register(app: typer.Typer) -> None:
    """Add ``corral up`` to the app, and worker, beat and flower to ``corral run``."""
    from corral.services.cli.requests_cmd import run_app

    run_app.command("worker")(worker)
    run_app.command("beat")(beat)
    run_app.command("flower")(flower)
    app.command("up")(up)
    # Forget settings cached before the commands existed. Nothing is cached when the settings
    # module is not loaded yet, and importing it here would slow every command's start.
    settings_module = sys.modules.get("corral.services.settings")
    if settings_module is not None:
        settings_module.reset_settings()
