"""``corral pools``: Determined resource pools as a master config defines them.

``pools_app`` is the ``pools`` group; a module that adds commands to it (``apply``, ``list``,
...) imports ``pools_app`` and decorates its functions with ``@pools_app.command()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corral.services.cli.output import fail_input, notice, out, print_json

if TYPE_CHECKING:
    from corral.shared.config.detect import Loaded
    from corral.shared.resource_pools import ResolvedPools

pools_app = typer.Typer(
    name="pools",
    help="Machine pools and Determined master configs: apply, list, delete; resolve a master "
    "config's schedulers, route tasks to its pools.",
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON document")]


def _load(path: Path, kind: str, as_json: bool) -> Loaded:
    from corral.shared.config.detect import load_config
    from corral.shared.configio import ConfigError

    try:
        loaded = load_config(path, kind)
    except ConfigError as exc:
        fail_input(exc, as_json)
    for line in loaded.notices:
        notice(line)
    return loaded


def _resolve(master: Loaded, as_json: bool) -> ResolvedPools:
    from corral.shared.config.master_config import MasterConfig
    from corral.shared.configio import ConfigError
    from corral.shared.resource_pools import UnknownPoolError, resolve_pools

    assert isinstance(master.model, MasterConfig)
    try:
        return resolve_pools(master.model)
    except UnknownPoolError as exc:  # load_config's checks catch this first; kept as a guard
        fail_input(ConfigError([master.doc.issue(("resource_manager",), str(exc))]), as_json)


def _print_table(pools: ResolvedPools) -> None:
    """Aligned plain columns: never truncated, whatever the terminal's width."""
    defaults = (
        ("aux", pools.default_aux_resource_pool),
        ("compute", pools.default_compute_resource_pool),
    )
    rows = [("POOL", "SCHEDULER", "FITTING", "PREEMPTION", "INHERITED", "PROVIDER", "DEFAULT FOR")]
    for pool in pools.pools:
        settings, provider = pool.scheduler, pool.provider or {}
        rows.append(
            (
                pool.pool_name,
                settings.type,
                settings.fitting_policy,
                "-" if settings.preemption is None else str(settings.preemption).lower(),
                "yes" if settings.inherited else "no",
                " ".join(str(provider[k]) for k in ("type", "instance_type") if k in provider)
                or "-",
                ", ".join(role for role, name in defaults if name == pool.pool_name) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(),
            markup=False,
        )


@pools_app.command("resolve")
def resolve(
    master: Annotated[Path, typer.Argument(help="a Determined master config")],
    as_json: JsonFlag = False,
) -> None:
    """Each pool's effective scheduler (the all-or-nothing rule applied) and the defaults."""
    pools = _resolve(_load(master, "master_config", as_json), as_json)
    if as_json:
        print_json(pools.as_dict())
    else:
        _print_table(pools)


@pools_app.command("route")
def route(
    master: Annotated[Path, typer.Argument(help="a Determined master config")],
    task: Annotated[Path, typer.Argument(help="a task file")],
    as_json: JsonFlag = False,
) -> None:
    """The pool a task goes to: its resource_pool, else the aux or compute default."""
    from corral.shared.config.task import Task
    from corral.shared.configio import ConfigError
    from corral.shared.resource_pools import UnknownPoolError, route_task

    pools = _resolve(_load(master, "master_config", as_json), as_json)
    task_file = _load(task, "task", as_json)
    assert isinstance(task_file.model, Task)
    try:
        pool = route_task(pools, task_file.model)
    except UnknownPoolError as exc:
        issue = task_file.doc.issue(("resources", "resource_pool"), str(exc))
        fail_input(ConfigError([issue]), as_json)
    if as_json:
        print_json({"pool": pool})
        return
    slots = task_file.model.slots()
    if task_file.model.resources.resource_pool is not None:
        why = "resources.resource_pool names it"
    else:
        which = "aux" if slots == 0 else "compute"
        why = f"the default {which} pool for a task of {slots} slot{'s' * (slots != 1)}"
    out.print(f"{pool}  ({why})", markup=False)


def register(app: typer.Typer) -> None:
    """Add the ``pools`` group to the command line."""
    app.add_typer(pools_app, name="pools")
