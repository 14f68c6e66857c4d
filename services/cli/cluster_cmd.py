"""``corral cluster up|down|list|status|demand|exec``: autoscaled clusters through the HTTP API.

``up FILE`` registers a Ray cluster file (``--cloud local`` plays an AWS or GCP file on the
local cloud); the autoscaling worker then starts its head and ``min_workers`` and follows the
cluster's standing demand, set with ``demand NAME FILE`` (it replaces the last one; an empty
file clears it), and, on a Ray cluster, the demand its head's GCS reports. ``down NAME``
terminates every node (Ray stopped first) and forgets the cluster. ``up`` packs the file's
``file_mounts`` here; ``status`` shows failed launcher steps and the head's Ray addresses;
``exec NAME -- CMD`` runs a command on the head (or ``--node``) through its agent.

Files are checked here first, so a mistake is ``FILE:LINE: field: message`` and exit 2 even
without a running API. Like every command group, this module imports only typer and output.py
at start-up; the client and the config models load when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from corral.services.cli.api_access import api_client, fail
from corral.services.cli.output import (
    EXIT_INPUT,
    command_text,
    data_row,
    err,
    fail_input,
    notice,
    out,
    print_json,
    print_list,
    report,
    say,
    write_output,
)

cluster_app = typer.Typer(
    name="cluster",
    help="Autoscaled clusters from Ray cluster files: up, down, list, status, demand, exec.",
    no_args_is_help=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="the cluster's name")]


def register(app: typer.Typer) -> None:
    """Add ``corral cluster`` to the app."""
    app.add_typer(cluster_app, name="cluster")


def _read(path: Path, as_json: bool) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read: {exc}", EXIT_INPUT, as_json)


@cluster_app.command("up")
def up(
    cluster_file: Annotated[Path, typer.Argument(metavar="FILE", help="a Ray cluster file")],
    cloud: Annotated[
        str | None,
        typer.Option(
            "--cloud", metavar="CLOUD", help="a registered cloud (default: the file's provider)"
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="the cluster's name (default: cluster_name)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register a cluster file; the autoscaler starts its head and min_workers."""
    from corral.shared.config.cluster import Cluster
    from corral.shared.config.detect import load_as
    from corral.shared.configio import ConfigError

    if cloud is not None:
        from corral.services.providers.registry import registered_clouds

        clouds = registered_clouds()
        if cloud.lower() not in clouds:
            fail(f"--cloud {cloud}: expected one of {', '.join(clouds)}", EXIT_INPUT, as_json)
    from corral.services.client.mounts import pack
    from corral.shared.config.base import ignored_notices

    try:
        cluster, doc = load_as(cluster_file, Cluster)
        mounts = pack(cluster, str(cluster_file))
    except ConfigError as exc:
        fail_input(exc, as_json)
    for line in ignored_notices(cluster, doc):  # what Corral does instead, as validate says
        notice(line)
    text = _read(cluster_file, as_json)
    with api_client(as_json) as client:
        made = client.create_cluster(
            text, str(cluster_file), cloud and cloud.lower(), name, mounts
        ).document()
    if as_json:
        print_json(made)
        return
    say(f"cluster {made['name']} registered: its head and min_workers are starting")
    if mounts:
        say(f"file mounts: {len(mounts['targets'])} paths, {mounts['size_bytes']} bytes packed")
    for warning in made.get("warnings") or []:
        err.print(f"warning: {warning}", markup=False)


@cluster_app.command("down")
def down(name: NameArg, as_json: JsonOpt = False) -> None:
    """Terminate every node of the cluster and forget it."""
    with api_client(as_json) as client:
        gone = client.delete_cluster(name).document()
    report(as_json, gone, f"cluster {name}: terminating {len(gone.get('terminating', []))} nodes")


@cluster_app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """The registered clusters."""
    with api_client(as_json) as client:
        found = [c.document() for c in client.clusters()]
    if as_json:
        print_list("clusters", found)
        return
    if not found:
        say("no clusters")
        return
    from rich.table import Table

    table = Table("NAME", "STATE", "CLOUD", "NODES", "BY TYPE")
    for c in found:
        by_type = ", ".join(f"{t}: {n}" for t, n in c["by_type"].items())
        nodes = str(c["nodes"]) + (f" (+{c['stopped']} stopped)" if c.get("stopped") else "")
        data_row(table, c["name"], c["state"], str(c["cloud"]), nodes, by_type)
    out.print(table)


@cluster_app.command("status")
def status(name: NameArg, as_json: JsonOpt = False) -> None:
    """The cluster's nodes by type and state, its standing demand and the last decision."""
    with api_client(as_json) as client:
        view = client.cluster(name).document()
    if as_json:
        print_json(view)
        return
    _print_status(view)


def _print_status(view: dict[str, Any]) -> None:
    from rich.table import Table

    say(f"cluster {view['name']} ({view['state']}, cloud {view['cloud']})")
    table = Table("ID", "NODE TYPE", "KIND", "STATE", "IDLE S", "USED")
    for n in view["nodes"]:
        used = ", ".join(f"{k}: {v:g}" for k, v in n["used"].items()) or "-"
        data_row(
            table, n["id"], n["node_type"], str(n.get("kind")), n["state"], f"{n['idle_s']:g}", used
        )
    out.print(table)
    for failed in view.get("failed_nodes") or []:
        say(f"Failed: {failed['id']} ({failed['node_type']}): {failed['failure']}")
    ray = view.get("ray")
    if ray:
        say(f"Ray: GCS {ray['gcs_address']}, dashboard {ray.get('dashboard') or 'none'}")
        for n in ray.get("nodes", []):
            say(f"  {n['ray_node_id'][:12]} {n['node'] or '-'} {n['node_type']} {n['status']}")
    demand = view.get("demand") or {}
    say("Demand:" + ("" if demand else " none"))
    for b in demand.get("bundles", []):
        say(f"  {b['count']} x {b['resources']}")
    for pg in demand.get("placement_groups", []):
        say(f"  {pg['count']} x {pg['strategy']} {pg['bundles']}")
    for node_type, until in (view.get("cooldowns") or {}).items():
        say(f"Cooled down: {node_type} ({_until(until)})")
    decision = view.get("last_decision")
    if decision:
        launch = ", ".join(f"{c} x {t}" for t, c in decision["launch"].items()) or "nothing"
        said = f"Last decision: launch {launch}; terminate {len(decision['terminate'])}"
        for verb in ("stop", "start"):  # cache_stopped_nodes
            if decision.get(verb):
                said += f"; {verb} {len(decision[verb])}"
        say(said)
        for reason in decision["reasons"]:
            say(f"  - {reason}")


def _until(epoch_s: float) -> str:
    """``until 14:02:31, in 95 s`` in this machine's zone (never a raw epoch)."""
    import time
    from datetime import datetime

    left_s = max(0.0, epoch_s - time.time())
    return f"until {datetime.fromtimestamp(epoch_s).strftime('%H:%M:%S')}, in {left_s:.0f} s"


@cluster_app.command("demand")
def demand(
    name: NameArg,
    demand_file: Annotated[
        Path, typer.Argument(metavar="FILE", help="pending bundles and placement groups")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Replace the cluster's standing demand with FILE's (an empty file clears it)."""
    from corral.shared.autoscaler.model import demand_from_doc
    from corral.shared.configio import ConfigError, load_file

    try:
        demand_from_doc(load_file(demand_file))
    except ConfigError as exc:
        fail_input(exc, as_json)
    text = _read(demand_file, as_json)
    with api_client(as_json) as client:
        result = client.set_demand(name, text, str(demand_file)).document()
    report(
        as_json, result, f"cluster {name}: demand {'set' if result.get('demand') else 'cleared'}"
    )


@cluster_app.command(
    "exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def exec_(
    ctx: typer.Context,
    name: NameArg,
    node: Annotated[
        str | None, typer.Option("--node", help="a node's id (default: the head)")
    ] = None,
) -> None:
    """Run a command on the cluster's head (or --node), as `ray exec` does: after `--`.

    The node's agent runs it (on any cloud) with the node's Ray variables set (RAY_ADDRESS:
    the head's GCS, RAY_HEAD_IP); its output streams back and its exit code is this
    command's."""
    import shlex

    command = list(ctx.args)
    if not command:
        fail("expected a command after --: corral cluster exec NAME -- CMD", EXIT_INPUT, False)
    with api_client(False) as client:
        view = client.cluster(name).document()
        nodes = [n for n in view["nodes"] if n["state"] == "RUNNING"]
        chosen = [n for n in nodes if (n["id"] == node if node else n.get("kind") == "head")]
        if not chosen:
            running = ", ".join(f"{n['id']} ({n.get('node_type')})" for n in nodes) or "none"
            fail(f"cluster {name}: no running node {node or 'head'} (running: {running})", 1, False)
        env = {"CORRAL_CLUSTER": name, "CORRAL_NODE": chosen[0]["id"]}
        ray = view.get("ray") or {}
        if ray.get("gcs_address"):
            env["RAY_ADDRESS"] = ray["gcs_address"]
            env["RAY_HEAD_IP"] = ray["gcs_address"].rsplit(":", 1)[0]
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(env.items()))
        code = write_output(client.exec(chosen[0]["id"], exports + command_text(command)))
    raise typer.Exit(code)
