"""``corral plan TASK``: the failover chain a task would walk, as a table or JSON.

The table is the "Considered resources" view: by default one row per cloud, instance type,
accelerators and market (the first of its candidates in chain order); ``--all`` prints every
zone of the chain. ``--json`` prints ``{"candidates": [...], "count": N}`` in failover order.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from corral.services.cli.output import (
    EXIT_NEGATIVE,
    data_row,
    err,
    fail_input,
    notice,
    out,
    print_list,
    wide_console,
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

if TYPE_CHECKING:
    from rich.table import Table

    from corral.services.settings import Settings
    from corral.shared.catalog import Catalog
    from corral.shared.catalog.offering import Offering
    from corral.shared.config.task import Task
    from corral.shared.configio import Document
    from corral.shared.planner import Candidate, Plan


FILE_CLOUD = "local"  # the cloud whose offerings --local-cloud's file lists


def register(app: typer.Typer) -> None:
    """Add ``corral plan`` to the app."""
    app.command("plan")(plan_command)


def load_task(
    path: Path, flags: LaunchFlags | None = None, catalog: Catalog | None = None
) -> tuple[Task, list[str]]:
    """The task file, with the command line's flags merged over it (and those flags as
    ``plan`` lists them); raises ConfigError naming the file (and the flag). Given the
    ``catalog``, an instance type or accelerator it does not know is an error at its line,
    with the nearest name it has."""
    from corral.shared.config.task import Task
    from corral.shared.configio import ConfigError, Document, check_problems, load_as, validate_doc

    task, doc = load_as(path, Task)
    said: list[str] = []
    if flags is not None:
        try:
            data, said = merged(dict(doc.data), flags)
        except ValueError as exc:
            raise ConfigError.single(str(path), str(exc)) from None
    if said:
        doc = Document(name=f"{path} (with the command line's flags)", data=data)
        task = validate_doc(Task, doc)
        check_problems(task, doc)
    if catalog is not None:
        check_catalog_names(task, doc, catalog)
    return task, said


def check_catalog_names(task: Task, doc: Document, catalog: Catalog) -> None:
    """Raise ConfigError (FILE:LINE, the field) for each instance type or accelerator of the
    task that no offering of ``catalog`` has, naming the nearest one it has."""
    from corral.shared.catalog_names import resources_name_problems
    from corral.shared.configio import ConfigError

    found = resources_name_problems(task.resources, catalog)
    if found:
        raise ConfigError([doc.issue(path, message) for path, message in found])


def plan_catalog(local_cloud: Path | None) -> Catalog:
    """The shipped catalog plus the local cloud's offerings: the file given, else the one
    ``corral up`` uses (CORRAL_LOCAL_CLOUD_FILE, by default the packaged local cloud) when
    launches may use the local cloud (it is in CORRAL_CLOUDS, as by default)."""
    from corral.services.settings import get_settings, installed_catalog
    from corral.shared.config.localcloud import load_local_cloud

    settings = get_settings()
    catalog = installed_catalog(settings)
    if local_cloud is not None or "local" in settings.clouds:
        path = local_cloud if local_cloud is not None else settings.local_cloud_file
        catalog = catalog.with_offerings(load_local_cloud(path).offerings())
    listed = _listed(settings, catalog.clouds)
    return catalog.with_offerings(listed) if listed else catalog


def _listed(settings: Settings, priced: tuple[str, ...]) -> list[Offering]:
    """What the providers of the enabled clouds without a price list list live (a Kubernetes
    cluster's node shapes), as the launches' planner sees them: a cloud that cannot be reached
    lists nothing (its provider says why in a warning)."""
    from corral.services.providers.registry import ProviderUnavailable, build_provider
    from corral.shared.config.localcloud import load_local_cloud

    # Listing offerings needs no Redis and no node agents.
    quiet = settings.model_copy(update={"redis_url": None, "node_api_url": None})
    found: list[Offering] = []
    for cloud in settings.clouds:
        if cloud in priced:
            continue
        try:
            provider = build_provider(
                cloud, quiet, lambda: load_local_cloud(quiet.local_cloud_file)
            )
            found.extend(provider.offerings())
        except ProviderUnavailable:
            continue
    return found


def print_table(table: Table) -> None:
    """Print a table at its natural width: never squeezed (and cut) to 80 columns when
    stdout is a pipe, so scripts and narrow terminals see whole names and prices."""
    from rich.measure import Measurement

    natural = Measurement.get(out, out.options.update(max_width=1000), table).maximum
    if natural <= out.width:
        out.print(table)
    else:
        wide_console(out, natural).print(table)


def _accelerators(c: Candidate) -> str:
    return ", ".join(f"{name}:{count}" for name, count in c.accelerators.items()) or "-"


def _rows(candidates: list[Candidate], every_zone: bool) -> list[Candidate]:
    """Every candidate, or the first of each (cloud, type, accelerators, market) group."""
    if every_zone:
        return candidates
    firsts: dict[tuple[str, str, str, str], Candidate] = {}
    for c in candidates:
        firsts.setdefault((c.cloud, c.instance_type, _accelerators(c), c.market), c)
    return list(firsts.values())


def merged_summary(task: Task) -> dict[str, Any]:
    """What the flags can change, as the merged task has it (secrets' values hidden)."""
    from corral.shared.config.overrides import secrets_of

    resources = [
        {
            "infra": _infra_text(r.cloud, r.region, r.zone),
            "accelerators": r.accelerators,
            "use_spot": r.use_spot,
        }
        for r in task.resources.candidates()
    ]
    return {
        "num_nodes": task.num_nodes,
        "resources": resources,
        "envs": dict(task.envs),
        "secrets": {name: "<hidden>" for name in secrets_of(task.secrets)},
    }


def _infra_text(*parts: str | None) -> str:
    """``aws/us-east-1`` as SkyPilot's infra spells a place; ``*`` for a part left open (a
    trailing open part is left out; nothing set at all is ``*``)."""
    named = [p or "*" for p in parts]
    while named and named[-1] == "*":
        named.pop()
    return "/".join(named) or "*"


def _print_merged(task: Task, said: list[str]) -> None:
    summary = merged_summary(task)
    out.print(f"With {' '.join(said)}:", markup=False)
    out.print(f"  num_nodes: {summary['num_nodes']}", markup=False)
    for n, r in enumerate(summary["resources"]):
        label = "resources" if len(summary["resources"]) == 1 else f"candidate {n + 1}"
        gpus = r["accelerators"] if r["accelerators"] is not None else "none"
        spot = {True: "spot", False: "on-demand", None: "any market"}[r["use_spot"]]
        out.print(f"  {label}: infra {r['infra']}, accelerators {gpus}, {spot}", markup=False)
    for key in ("envs", "secrets"):
        if summary[key]:
            pairs = ", ".join(f"{k}={v}" for k, v in summary[key].items())
            out.print(f"  {key}: {pairs}", markup=False)
    out.print("", markup=False)


def render_table(
    result: Plan, num_nodes: int, every_zone: bool, no_credentials: set[str] | None = None
) -> Table:
    """The "Considered resources (N nodes)" table; the chosen row is the first on a cloud with
    credentials."""
    from rich import box
    from rich.table import Table

    from corral.services.providers.registry import display_name

    nodes = f"{num_nodes} node" + ("" if num_nodes == 1 else "s")
    table = Table(
        title=f"Considered resources ({nodes}):",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        header_style="bold",
        pad_edge=False,
    )
    for header in ("CLOUD", "INSTANCE", "vCPUs", "Mem(GB)", "ACCELERATORS", "REGION/ZONE"):
        table.add_column(header, justify="right" if header in {"vCPUs", "Mem(GB)"} else "left")
    table.add_column("COST ($)", justify="right")
    table.add_column("CHOSEN", justify="center")
    shut_out = no_credentials or set()
    rows = _rows(result.candidates, every_zone)
    # The chosen row is the first a launch here would try: a cloud without credentials is
    # left out of launches, so it is shown but never marked.
    chosen = next((c for c in rows if c.cloud not in shut_out), None)
    for c in rows:
        spot = "[Spot]" if c.market == "spot" else ""
        cloud = display_name(c.cloud)
        cells = (
            f"{cloud} (no credentials)" if c.cloud in shut_out else cloud,
            f"{c.instance_type}{spot}",
            f"{c.vcpus:g}",
            f"{c.memory_gib:g}",
            _accelerators(c),
            c.zone,
            f"{c.cost_usd_per_hour:.2f}",
            "✔" if c is chosen else "",
        )
        data_row(table, *cells)
    return table


def plan_command(
    task_file: Path = typer.Argument(..., metavar="TASK", help="A task file (YAML or JSON)."),
    as_json: bool = typer.Option(False, "--json", help="Print the chain as JSON."),
    local_cloud: Path | None = typer.Option(
        None,
        "--local-cloud",
        metavar="FILE",
        help="The local cloud file (default: the one `corral up` uses).",
    ),
    every_zone: bool = typer.Option(
        False, "--all", help="One row per candidate (every zone), not per instance type."
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
) -> None:
    """Show the failover chain for a task: cheapest cloud first, its regions by price. The
    launch flags (--gpus, --env, --infra, ...) are merged over the file as `launch` merges
    them, and the merged task is shown above the chain."""
    from corral.services.client.tasks import read_task_file
    from corral.shared.configio import ConfigError

    flags = LaunchFlags(env, secret, gpus, infra, cloud, region, zone, num_nodes, use_spot)
    try:
        # The file's notices, as `launch` prints them (its compute config file's too).
        notices = read_task_file(task_file).notices
        catalog = plan_catalog(local_cloud)
        task, said = load_task(task_file, flags, catalog)
    except ConfigError as exc:
        fail_input(exc, as_json)
    for text in notices:
        notice(text)
    show_plan(task, catalog, said, every_zone=every_zone, as_json=as_json, local_cloud=local_cloud)


def show_plan(
    task: Task,
    catalog: Catalog,
    said: list[str],
    *,
    every_zone: bool,
    as_json: bool,
    local_cloud: Path | None,
) -> None:
    """Print the merged task (when flags were given) and its failover chain; exit 1 when
    nothing can be planned."""
    from corral.services.providers.registry import credentials_hint, registered_clouds
    from corral.shared.planner import plan

    if said and not as_json:
        _print_merged(task, said)

    # Every cloud of the catalog with a provider here: the shipped ones and those registered
    # (Kubernetes), whose offerings were listed live.
    result = plan(task, catalog, clouds=[c for c in catalog.clouds if c in registered_clouds()])
    for text in result.notices:
        notice(text)
    missing = sorted({c.cloud for c in result.candidates if not credentials_hint(c.cloud)})
    for cloud in missing:
        notice(f"{cloud}: no credentials found; shown here, but a launch leaves it out")
    if not result.candidates:
        if as_json:
            print_list("candidates", [], reasons=result.reasons)
        err.print("nothing can be planned:", markup=False)
        for reason in result.reasons:
            err.print(f"  {reason}", markup=False)
        if local_cloud is None and FILE_CLOUD not in catalog.clouds:
            err.print(f"  (the {FILE_CLOUD} cloud plans from a file: --local-cloud FILE)")
        raise typer.Exit(EXIT_NEGATIVE)
    if as_json:
        chosen = next((c for c in result.candidates if c.cloud not in missing), None)
        chain = [
            {**c.to_dict(), "chosen": c is chosen, "credentials": c.cloud not in missing}
            for c in result.candidates
        ]
        extra = {"flags": " ".join(said), "task": merged_summary(task)} if said else {}
        print_list("candidates", chain, **extra)
        return
    print_table(render_table(result, task.num_nodes, every_zone, set(missing)))
    if not every_zone:
        count = len(result.candidates)
        out.print(
            f"{count} candidate{'s' if count != 1 else ''} in the failover chain "
            "(--all lists every zone).",
            markup=False,
        )
    service = task.service_spec()
    if service is not None and service.replicated:
        low, high = service.policy.min_replicas, service.policy.max_replicas
        replicas = f"{low}" if low == high else f"{low} to {high}"
        out.print(
            f"A service of {replicas} replicas, each launched down this chain on its own, behind "
            f"the API's load balancer ({service.load_balancing_policy}).",
            markup=False,
        )
