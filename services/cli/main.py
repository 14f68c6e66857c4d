"""The ``corral`` command line. Each command group lives in its own module.

Start-up stays fast because the command modules import only typer, output.py and the standard
library at module level; each command imports what it needs (config models, the planner, the API
client, ...) when it runs. tests/unit/test_cli_startup.py lists what the start-up must not load.

Shell completion is typer's: ``corral --install-completion [bash|zsh|fish|powershell]`` adds it
to the shell's start-up file, ``--show-completion`` prints the script. The shell then runs
``corral`` itself with ``_CORRAL_COMPLETE`` set to ask for candidates: command names and
options, request states, and the ids of the newest requests (asked of the API, one second at
most).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from corral.services.cli.output import EXIT_INPUT, err

HELP = "Corral: find compute (GPUs above all) for jobs, services and workspaces, and share it."


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"corral {version('corral')}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_version
    ),
) -> None:
    """Corral: find compute (GPUs above all) for jobs, services and workspaces, and share it."""


# Modules that add commands to the app through their ``register(app)`` function, and the
# top-level names (commands and groups) each adds.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "corral.services.cli.validate_cmd": ("validate",),
    "corral.services.cli.plan_cmd": ("plan",),
    "corral.services.cli.gpus_cmd": ("show-gpus",),
    "corral.services.cli.catalog_cmd": ("catalog",),
    "corral.services.cli.config_cmd": ("config",),
    "corral.services.cli.pools_cmd": ("pools",),
    "corral.services.cli.pools_api_cmd": ("why",),  # and apply, list, delete to `pools`
    "corral.services.cli.launch_cmd": ("launch",),
    "corral.services.cli.cost_cmd": ("cost-report",),
    "corral.services.cli.check_cmd": ("check",),
    "corral.services.cli.requests_cmd": (
        "status", "instances", "logs", "terminate", "down", "stop", "autostop", "start",
        "run",
    ),
    "corral.services.cli.jobs_cmd": ("exec", "queue", "cancel"),
    "corral.services.cli.attach_cmd": ("attach", "port-forward"),
    "corral.services.cli.up_cmd": ("up",),  # and worker, beat, flower to `run`
    "corral.services.cli.autoscale_cmd": ("autoscale",),
    "corral.services.cli.cluster_cmd": ("cluster",),
    "corral.services.cli.version_cmd": ("version",),
    "corral.services.cli.simulate_cmd": ("simulate",),
    "corral.services.cli.users_cmd": ("users", "projects"),
}  # fmt: skip

# `corral NAME ...` loads only these modules when NAME is one of these: every command of NAME
# is theirs (`pools` takes two modules; `run` and `up` are left to the whole app, since up_cmd
# adds to requests_cmd's `run` group). tests/unit/test_cli_startup.py checks that each gives
# the same command as the whole app.
ROUTES: dict[str, tuple[str, ...]] = {
    name: (module,)
    for module, names in COMMAND_MODULES.items()
    if module != "corral.services.cli.up_cmd"
    for name in names
    if name not in ("run", "pools")
}
ROUTES["pools"] = ("corral.services.cli.pools_cmd", "corral.services.cli.pools_api_cmd")


def app_with(modules: tuple[str, ...] | list[str]) -> typer.Typer:
    """A ``corral`` app with the commands of ``modules`` only."""
    app = typer.Typer(
        name="corral",
        help=HELP,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command group not written yet
            if exc.name != name:
                raise
            continue
        module.register(app)
    return app


_whole: list[typer.Typer] = []  # the app with every command, once built


def whole_app() -> typer.Typer:
    """The app with every command (``main.app``)."""
    if not _whole:
        _whole.append(app_with(list(COMMAND_MODULES)))
    return _whole[0]


def __getattr__(name: str) -> Any:
    """``main.app``: the app with every command, built when first asked for."""
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(args: list[str]) -> typer.Typer:
    """The app that runs ``corral ARGS``: for a command in ROUTES, one with that command's
    modules only, since typer reads every command's signature before it parses a word (and
    each module is compiled where no bytecode is cached). Every command otherwise: no command
    or an option first (``--help``, shell completion), a name not in ROUTES, or once the
    whole app was built (a test may have added a command to it)."""
    if _whole or not args or args[0] not in ROUTES:
        return whole_app()
    return app_with(ROUTES[args[0]])


def run() -> None:
    """Console-script entry point: a user's mistake that escaped a command is still exit 2."""
    try:
        app_for(sys.argv[1:])()
    except Exception as exc:
        # Imported here, not at start-up: a ConfigError can only come from code that has
        # already loaded configio, so this import costs nothing when it matters.
        from corral.shared.configio import ConfigError

        if not isinstance(exc, ConfigError):
            raise
        for issue in exc.issues:
            err.print(str(issue), markup=False)
        raise SystemExit(EXIT_INPUT) from None


if __name__ == "__main__":
    run()
