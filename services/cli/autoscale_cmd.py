"""``corral autoscale explain FILE --demand DEMAND [--nodes NODES] [--request-resources REQ]``:
what the cluster autoscaler would launch and terminate now, and why, without touching anything.

FILE is a Ray cluster file; node types that leave ``resources`` out get them from the catalog
of ``--cloud`` (default: the file's provider; ``local`` plays the file on the local cloud of
``--local-cloud``, else the configured one). DEMAND lists pending bundles and placement
groups; NODES lists the cluster's nodes now (without it, the cluster is its head alone,
running and idle). REQ is a standing request, as Ray's ``request_resources`` states it (in the
DEMAND file's format): packed against the nodes' whole capacity, busy or not, and exempt from
the upscaling cap. ``--cooled-down TYPE`` treats TYPE as having just failed to launch.

Exit codes: 0 a plan (even an empty one, and even when some demand can never be placed: the
reasons say which); 1 when nothing at all can be done: every pending bundle is one no node
type can hold, and the plan neither launches nor terminates anything; 2 a wrong input file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_NEGATIVE,
    fail,
    fail_input,
    notice,
    print_json,
    say,
)

if TYPE_CHECKING:  # the decision core is loaded when the command runs, not at start-up
    from corral.shared.autoscaler import Decision, Node, Plan
    from corral.shared.autoscaler.resources import Resolved

COOL_DOWN_S = 300.0  # how long --cooled-down holds a type back in the explanation

autoscale = typer.Typer(
    name="autoscale", help="The cluster autoscaler's decisions.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add ``corral autoscale`` to the app."""
    app.add_typer(autoscale, name="autoscale")


def _resolve(cluster_file: Path, cloud: str | None, local_cloud: Path | None) -> Resolved:
    from corral.services.settings import installed_catalog
    from corral.shared.autoscaler.resources import resolve_cluster
    from corral.shared.config.base import ignored_notices
    from corral.shared.config.cluster import Cluster
    from corral.shared.config.detect import load_as
    from corral.shared.configio import ConfigError

    cluster, doc = load_as(cluster_file, Cluster)
    for line in ignored_notices(cluster, doc):  # what Corral does instead, as validate says
        notice(line)
    from corral.services.providers.registry import ProviderUnavailable, cluster_files
    from corral.services.settings import get_settings
    from corral.shared.config.localcloud import load_local_cloud

    cloud = cloud or cluster.provider.type.lower()
    try:  # the cloud that plays the file, if it plays files written for others
        stand_in = cluster_files(cloud).stand_in(
            lambda: load_local_cloud(local_cloud or get_settings().local_cloud_file)
        )
    except ProviderUnavailable:
        stand_in = None  # a cloud Corral has no provider for: the file as written
    resolved = resolve_cluster(cluster, installed_catalog(), stand_in)
    if resolved.problems:
        raise ConfigError([doc.issue(path, message) for path, message in resolved.problems])
    return resolved


def _nodes(nodes_file: Path | None, head_type: str) -> list[Node]:
    from corral.shared.autoscaler.model import Node, nodes_from_doc
    from corral.shared.configio import load_file
    from corral.shared.lifecycle import InstanceState

    if nodes_file is not None:
        return nodes_from_doc(load_file(nodes_file))
    notice(f"no --nodes: the cluster is taken to be its head alone ({head_type}, running, idle)")
    return [Node(id="head", node_type=head_type, state=InstanceState.RUNNING, kind="head")]


def _cooldowns(types: list[str], known: list[str], now: float) -> dict[str, float]:
    for name in types:
        if name not in known:
            fail(
                f"--cooled-down {name}: no such node type; expected one of {', '.join(known)}",
                EXIT_INPUT,
            )
    return {name: now + COOL_DOWN_S for name in types}


def _nothing_possible(decision: Decision) -> bool:
    """Some demand can never be placed, none can be placed or waits, and the plan is empty."""
    plan = decision.plan
    placed = any(b.placed for b in decision.bins)
    return bool(plan.unsatisfiable) and not plan.waiting and not placed and plan.is_empty()


def _print(resolved: Resolved, nodes: list[Node], plan: Plan) -> None:
    from corral.shared.autoscaler.resources import describe_type
    from corral.shared.lifecycle import InstanceState

    say("Node types:")
    for name, spec in resolved.spec.node_types.items():
        say(f"  {describe_type(name, spec)}")
    running = sum(1 for n in nodes if n.state is InstanceState.RUNNING)
    pending = sum(1 for n in nodes if n.state is InstanceState.REQUESTED)
    say(f"Nodes: {running} running, {pending} pending")
    say("Launch:")
    for name, count in plan.launch.items():
        say(f"  {count} x {name}")
    if not plan.launch:
        say("  nothing")
    say("Terminate:")
    by_id = {n.id: n for n in nodes}
    for node_id in plan.terminate:
        node = by_id.get(node_id)
        say(f"  {node_id}" + (f" ({node.node_type})" if node else ""))
    if not plan.terminate:
        say("  nothing")
    say("Why:")
    for reason in plan.reasons:
        say(f"  - {reason}")


@autoscale.command("explain")
def explain(
    cluster_file: Annotated[Path, typer.Argument(metavar="FILE", help="a Ray cluster file")],
    demand_file: Annotated[
        Path,
        typer.Option("--demand", metavar="DEMAND", help="pending bundles and placement groups"),
    ],
    nodes_file: Annotated[
        Path | None,
        typer.Option("--nodes", metavar="NODES", help="the cluster's nodes now (YAML or JSON)"),
    ] = None,
    cloud: Annotated[
        str | None,
        typer.Option(
            "--cloud",
            metavar="CLOUD",
            help="aws, gcp or local: whose catalog fills in node type resources "
            "(default: the file's provider)",
        ),
    ] = None,
    local_cloud: Annotated[
        Path | None,
        typer.Option(
            "--local-cloud", metavar="FILE", help="the local cloud file for --cloud local"
        ),
    ] = None,
    cooled_down: Annotated[
        list[str] | None,
        typer.Option(
            "--cooled-down", metavar="TYPE", help="treat TYPE as having just failed to launch"
        ),
    ] = None,
    request_file: Annotated[
        Path | None,
        typer.Option(
            "--request-resources",
            metavar="REQ",
            help="a standing request (Ray's request_resources), in the DEMAND file's format",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='print {"launch", "terminate", "reasons"}')
    ] = False,
) -> None:
    """Print what the autoscaler would launch and terminate now, and why; changes nothing.

    Exit 0 with a plan (demand no node type can hold is listed in the reasons); 1 when that
    is all there is: no bundle can be placed and nothing is to launch or terminate; 2 when
    a file is wrong.
    """
    from corral.services.providers.registry import registered_clouds
    from corral.shared.autoscaler.decide import decide_detailed
    from corral.shared.autoscaler.model import demand_from_doc
    from corral.shared.configio import ConfigError, load_file

    clouds = registered_clouds()
    if cloud is not None and cloud.lower() not in clouds:
        fail(f"--cloud {cloud}: expected one of {', '.join(clouds)}", EXIT_INPUT)
    try:
        resolved = _resolve(cluster_file, cloud.lower() if cloud else None, local_cloud)
        demand = demand_from_doc(load_file(demand_file))
        requested = demand_from_doc(load_file(request_file)) if request_file else None
        nodes = _nodes(nodes_file, resolved.spec.head_node_type)
    except ConfigError as exc:
        fail_input(exc, as_json)
    for text in resolved.notices:
        notice(text)
    now = time.time()
    cooldowns = _cooldowns(cooled_down or [], list(resolved.spec.node_types), now)
    decision = decide_detailed(
        resolved.spec, nodes, demand, now=now, cooldowns=cooldowns, requested=requested
    )
    if as_json:
        print_json(decision.plan.summary())
    else:
        _print(resolved, nodes, decision.plan)
    if _nothing_possible(decision):
        raise typer.Exit(EXIT_NEGATIVE)
