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

import typer

from corral.services.cli.output import EXIT_INPUT, err

app = typer.Typer(
    name="corral",
    help="Corral: find compute (GPUs above all) for jobs, services and workspaces, and share it.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"corral {version('corral')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_version
    ),
) -> None:
    """Corral: find compute (GPUs above all) for jobs, services and workspaces, and share it."""


# Modules that add commands to ``app`` through their ``register(app)`` function.
COMMAND_MODULES = (
    "corral.services.cli.validate_cmd",
    "corral.services.cli.plan_cmd",
    "corral.services.cli.gpus_cmd",
    "corral.services.cli.config_cmd",
    "corral.services.cli.pools_cmd",
    "corral.services.cli.pools_api_cmd",
    "corral.services.cli.requests_cmd",
    "corral.services.cli.attach_cmd",
    "corral.services.cli.up_cmd",
    "corral.services.cli.autoscale_cmd",
    "corral.services.cli.cluster_cmd",
    "corral.services.cli.version_cmd",
    "corral.services.cli.simulate_cmd",
    "corral.services.cli.users_cmd",
)

for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as _exc:  # a command group not written yet
        if _exc.name != _name:
            raise
        continue
    _module.register(app)


def run() -> None:
    """Console-script entry point: a user's mistake that escaped a command is still exit 2."""
    try:
        app()
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
