"""``corral config ...``: commands about users' config files.

``corral config merge`` shows what an instance is launched with when a workload's
``advanced_instance_config`` is merged over its machine pool's launch template. Other modules
may add commands to :data:`config_app`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from corral.services.cli.output import fail_input, print_json

if TYPE_CHECKING:
    from corral.shared.configio import ConfigError, Document
    from corral.shared.merge import MergeError

config_app = typer.Typer(
    name="config",
    help="Config files: contexts in <home>/config.yaml (get, set, use-context), and merge.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``config`` command group to the ``corral`` app."""
    app.add_typer(config_app, name="config")


def _load_mapping(path: Path, role: str) -> Document:
    """Read one file holding an ``advanced_instance_config`` mapping itself."""
    from corral.shared.configio import load_file

    doc = load_file(path)
    if not isinstance(doc.data, dict):
        found = "an empty file" if doc.data is None else f"a {type(doc.data).__name__}"
        raise doc.error(
            (), f"expected the {role}'s advanced_instance_config (a mapping), found {found}"
        )
    return doc


def _as_config_error(exc: MergeError, template: Document, override: Document) -> ConfigError:
    """Point a refusal at the file and line it comes from."""
    from corral.shared.configio import ConfigError, Issue

    doc = template if exc.side == "template" else override
    return ConfigError([Issue(doc.name, doc.line_of(exc.loc), exc.path, exc.message)])


@config_app.command("merge")
def merge(
    template_path: Path = typer.Argument(
        ..., metavar="TEMPLATE", help="The machine pool launch template's advanced_instance_config."
    ),
    override_path: Path = typer.Argument(
        ..., metavar="OVERRIDE", help="The workload's advanced_instance_config."
    ),
    cloud: str = typer.Option(
        ..., "--cloud", help="aws, gcp or kubernetes (google and k8s also work)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the merged config as JSON."),
) -> None:
    """Print TEMPLATE with OVERRIDE merged on top, by the cloud's merge rules.

    Both files hold the advanced_instance_config mapping itself (YAML or JSON). An override
    may add and change entries but not remove them; a removal is refused (exit 2).
    """
    from corral.shared.configio import ConfigError
    from corral.shared.merge import CLOUDS, MergeError, merge_advanced_instance_config

    try:
        if cloud.strip().lower() not in CLOUDS:
            raise ConfigError.single("--cloud", f"{cloud!r}: expected one of {', '.join(CLOUDS)}")
        template = _load_mapping(template_path, "machine pool template")
        override = _load_mapping(override_path, "workload")
        try:
            merged = merge_advanced_instance_config(cloud, template.data, override.data)
        except MergeError as exc:
            raise _as_config_error(exc, template, override) from None
    except ConfigError as exc:
        fail_input(exc, as_json)
    _print_config(merged, as_json)


def _print_config(merged: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(merged)
        return
    import yaml

    # Plain stdout, not the rich console: YAML holds brackets and colons rich would reinterpret.
    sys.stdout.write(yaml.safe_dump(merged, sort_keys=False, allow_unicode=True))
    sys.stdout.flush()


# ---- contexts: <home>/config.yaml (corral.services.client.contexts) ---------------------------


def _user_config() -> Any:
    from corral.services.client.contexts import ContextError, UserConfig
    from corral.services.settings import get_settings

    try:
        return UserConfig.load(get_settings().home)
    except ContextError as exc:
        _refuse(exc)


def _refuse(exc: Exception) -> NoReturn:
    from corral.services.cli.output import EXIT_INPUT, err

    err.print(f"error: {exc}", markup=False)
    raise typer.Exit(EXIT_INPUT)


@config_app.command("get")
def get(
    key: str | None = typer.Argument(
        None, help="current-context, contexts.NAME[.KEY], or api_url / token_file of the current."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print a value of <home>/config.yaml (all of it without KEY)."""
    from corral.services.client.contexts import ContextError

    config = _user_config()
    try:
        value = config.as_dict() if key is None else config.get(key)
    except ContextError as exc:
        _refuse(exc)
    if as_json:
        print_json(value)
    elif isinstance(value, dict):
        _print_config(value, False)
    else:
        sys.stdout.write(("" if value is None else str(value)) + "\n")


@config_app.command("set")
def set_(
    key: str = typer.Argument(
        ...,
        help="api_url or token_file (of the current context), contexts.NAME.KEY, or "
        "current-context.",
    ),
    value: str = typer.Argument(..., help="The value."),
) -> None:
    """Set a value in <home>/config.yaml (a new context is made; the first becomes current)."""
    from corral.services.client.contexts import ContextError

    config = _user_config()
    try:
        config.set(key, value)
    except ContextError as exc:
        _refuse(exc)
    config.save()


@config_app.command("use-context")
def use_context(name: str = typer.Argument(..., help="A context of <home>/config.yaml.")) -> None:
    """Make NAME the current context: later commands talk to its API with its token."""
    from corral.services.client.contexts import ContextError

    config = _user_config()
    try:
        config.use(name)
    except ContextError as exc:
        _refuse(exc)
    config.save()
    sys.stdout.write(f"current context: {name}\n")
