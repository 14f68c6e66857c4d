"""Ray's own autoscaler tests, case by case, run through ``shared.autoscaler.decide``.

Each test names the file of ``ray-project/ray`` and the test it translates. Node types are
Ray's ``TYPES_A`` (``python/ray/tests/test_autoscaler.py``): m4.large {CPU: 2} (up to 10),
m4.4xlarge {CPU: 16} (8), m4.16xlarge {CPU: 64} (4), p2.xlarge {CPU: 16, GPU: 1} (10),
p2.8xlarge {CPU: 32, GPU: 8} (4). Without prices Corral chooses node types as Ray does; with
prices it takes Ray's choice or its own, whichever costs less (never more than Ray's).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app
from corral.shared.autoscaler import BundleDemand, ClusterSpec, Demand, Node, NodeTypeSpec
from corral.shared.autoscaler.decide import decide, decide_detailed
from corral.shared.autoscaler.model import PlacementGroupDemand
from corral.shared.lifecycle import InstanceState

RDS = "python/ray/tests/test_resource_demand_scheduler.py"
TYPES_A = {
    "m4.large": ({"CPU": 2}, 10),
    "m4.4xlarge": ({"CPU": 16}, 8),
    "m4.16xlarge": ({"CPU": 64}, 4),
    "p2.xlarge": ({"CPU": 16, "GPU": 1}, 10),
    "p2.8xlarge": ({"CPU": 32, "GPU": 8}, 4),
}


def spec(
    types: dict[str, tuple[dict[str, float], int]] = TYPES_A,
    *,
    prices: dict[str, float] | None = None,
    speed: float = 1.0,
    max_workers: int = 9999,
) -> ClusterSpec:
    node_types = {
        name: NodeTypeSpec(
            resources=res,
            max_workers=most,
            price_usd_per_hour=(prices or {}).get(name),
        )
        for name, (res, most) in types.items()
    }
    node_types["empty_node"] = NodeTypeSpec(resources={}, max_workers=0)
    return ClusterSpec(
        head_node_type="empty_node",
        max_workers=max_workers,
        upscaling_speed=speed,
        node_types=node_types,
    )


def head() -> list[Node]:
    return [Node(id="head", node_type="empty_node", state=InstanceState.RUNNING, kind="head")]


def demand(*shapes: tuple[dict[str, float], int]) -> Demand:
    return Demand(bundles=[BundleDemand(resources=r, count=n) for r, n in shapes])


def nodes_for(cluster: ClusterSpec, d: Demand) -> dict[str, int]:
    """The node types launched for the demand, the upscaling cap out of the way (Ray's
    get_nodes_for knows no cap)."""
    fast = cluster.model_copy(update={"upscaling_speed": 1e6})
    return decide(fast, head(), d, now=0.0).launch


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([({"GPU": 8}, 1)], {"p2.8xlarge": 1}),
        ([({"GPU": 1}, 6)], {"p2.8xlarge": 1}),
        ([({"GPU": 1}, 4)], {"p2.xlarge": 4}),
        ([({"CPU": 32, "GPU": 1}, 3)], {"p2.8xlarge": 3}),
        ([({"CPU": 64, "GPU": 1}, 3)], {}),
        ([({"CPU": 64}, 3)], {"m4.16xlarge": 3}),
        ([({"CPU": 64}, 1), ({"CPU": 1}, 1)], {"m4.16xlarge": 1, "m4.large": 1}),
        ([({"CPU": 64}, 1), ({"CPU": 9}, 2)], {"m4.16xlarge": 1, "m4.4xlarge": 2}),
        ([({"CPU": 16}, 5)], {"m4.16xlarge": 1, "m4.4xlarge": 1}),
        ([({"CPU": 8}, 10)], {"m4.16xlarge": 1, "m4.4xlarge": 1}),
        ([({"CPU": 1}, 100)], {"m4.16xlarge": 1, "m4.4xlarge": 2, "m4.large": 2}),
        ([({"GPU": 1}, 1), ({"CPU": 1}, 64)], {"m4.16xlarge": 1, "p2.xlarge": 1}),
        ([({"GPU": 1}, 8), ({"CPU": 1}, 64)], {"m4.4xlarge": 2, "p2.8xlarge": 1}),
    ],
)
def test_get_nodes_packing_heuristic(
    shapes: list[tuple[dict[str, float], int]], expected: dict[str, int]
) -> None:
    """test_resource_demand_scheduler.py: test_get_nodes_packing_heuristic"""
    assert nodes_for(spec(), demand(*shapes)) == expected


def test_get_nodes_packing_heuristic_strict_spread() -> None:
    """test_resource_demand_scheduler.py: test_get_nodes_packing_heuristic (strict_spread):
    eight one-GPU bundles, one node each."""
    pg = PlacementGroupDemand(strategy="STRICT_SPREAD", bundles=[{"GPU": 1}] * 8)
    assert Counter(nodes_for(spec(), Demand(placement_groups=[pg]))) == Counter({"p2.xlarge": 8})


def test_node_packing_gpu_cpu_bundles() -> None:
    """test_resource_demand_scheduler.py: test_node_packing_gpu_cpu_bundles"""
    types = {"cpu": ({"CPU": 16}, 10), "gpu": ({"CPU": 16, "GPU": 1}, 10)}
    mixed = demand(({"CPU": 1}, 30), ({"GPU": 1, "CPU": 1}, 1))
    assert nodes_for(spec(types), mixed) == {"cpu": 1, "gpu": 1}
    small = demand(({"GPU": 1, "CPU": 1}, 1), ({"CPU": 1}, 15))
    assert nodes_for(spec(types), small) == {"gpu": 1}


def test_gpu_node_avoid_cpu_task() -> None:
    """test_resource_demand_scheduler.py: test_gpu_node_avoid_cpu_task (r2 and r3)"""
    types = {"cpu": ({"CPU": 1}, 10), "gpu": ({"GPU": 1, "CPU": 100}, 10)}
    cluster = spec(types, max_workers=100)
    assert nodes_for(cluster, demand(({"GPU": 1}, 1), ({"CPU": 1}, 100))) == {"gpu": 1}
    assert nodes_for(cluster, demand(({"GPU": 1}, 4), ({"CPU": 1}, 404))) == {"cpu": 4, "gpu": 4}


# --------------------------------------------------------------------------- cost
CATALOG_PRICES = {  # us-east-1 on-demand, USD per hour, as the catalog lists them
    "m4.large": 0.10,
    "m4.4xlarge": 0.80,
    "m4.16xlarge": 3.20,
    "p2.xlarge": 0.90,
    "p2.8xlarge": 7.20,
}


def cost(cluster: ClusterSpec, launch: dict[str, int]) -> float:
    return sum(
        cluster.node_types[t].price_usd_per_hour or 0.0 for t, n in launch.items() for _ in range(n)
    )


@pytest.mark.parametrize(
    "shapes",
    [
        [({"GPU": 1}, 4)],
        [({"CPU": 1}, 100)],
        [({"GPU": 1}, 6)],
        [({"CPU": 16}, 5)],
        [({"GPU": 1}, 8), ({"CPU": 1}, 64)],
    ],
)
def test_never_costs_more_than_ray(shapes: list[tuple[dict[str, float], int]]) -> None:
    """Cases that cost more than Ray's before (4 x {GPU: 1}: Ray takes four p2.xlarge, not
    one p2.8xlarge; 100 x {CPU: 1}: 100 CPUs, not 128) and Ray's packing cases, priced: never
    dearer than Ray."""
    priced = spec(prices=CATALOG_PRICES)
    ray = nodes_for(spec(), demand(*shapes))  # without prices: exactly Ray's choice
    ours = nodes_for(priced, demand(*shapes))
    assert cost(priced, ours) <= cost(priced, ray) + 1e-9


@pytest.mark.parametrize(
    ("big_price", "expected"),
    [(8.0, {"g1": 4}), (4.0, {"g8": 1}), (3.0, {"g8": 1})],
)
def test_cheaper_plan_wins_then_fewer_nodes(big_price: float, expected: dict[str, int]) -> None:
    """Four one-GPU bundles: four one-GPU nodes ($4) or one eight-GPU node: the cheaper; at
    equal cost, the one with fewer nodes. (Ray's own scores tie here, and Ray takes the
    larger type name, g8, whatever it costs.)"""
    types = {"g1": ({"GPU": 1}, 10), "g8": ({"GPU": 8}, 10)}
    cluster = spec(types, prices={"g1": 1.0, "g8": big_price})
    assert nodes_for(cluster, demand(({"GPU": 1}, 4))) == expected


# --------------------------------------------------------------------------- launch cap
def test_launch_cap_is_per_type_with_rays_formula() -> None:
    """resource_demand_scheduler.py _get_concurrent_resource_demand_to_launch: an empty
    cluster with upscaling_speed 25 launches 25 of a type (max(5, 25 x max(0, 1)))."""
    plan = decide(spec(speed=25), head(), demand(({"CPU": 64}, 40)), now=0.0)
    assert plan.launch == {"m4.16xlarge": 4}  # its max_workers, under its cap of 25
    big = {"small": ({"CPU": 1}, 1000)}
    plan = decide(spec(big, speed=25), head(), demand(({"CPU": 1}, 100)), now=0.0)
    assert plan.launch == {"small": 25}


def test_launch_cap_counts_the_types_running_and_pending_nodes() -> None:
    """test_resource_demand_scheduler.py: test_get_concurrent_resource_demand_to_launch
    (the formula): 8 running of a type at speed 1 allow 8 in flight; 3 pending leave 5."""
    types = {"small": ({"CPU": 1}, 1000), "other": ({"CPU": 1, "X": 1}, 1000)}
    nodes = head() + [
        Node(id=f"r{i}", node_type="small", state=InstanceState.RUNNING, used={"CPU": 1})
        for i in range(8)
    ]
    nodes += [Node(id=f"p{i}", node_type="small", state=InstanceState.REQUESTED) for i in range(3)]
    plan = decide(spec(types), nodes, demand(({"CPU": 1}, 50)), now=0.0)
    assert plan.launch == {"small": 5}
    # A type with nothing running has its own cap of 5, whatever runs of the other.
    plan = decide(spec(types), nodes, demand(({"CPU": 1, "X": 1}, 50)), now=0.0)
    assert plan.launch == {"other": 5}


def test_placement_groups_and_requested_resources_pass_the_cap() -> None:
    """resource_demand_scheduler.py: placement group nodes and request_resources() are let
    past the launch limit (they count against it, but are never clipped)."""
    types = {"small": ({"CPU": 1}, 1000)}
    pg = PlacementGroupDemand(strategy="PACK", bundles=[{"CPU": 1}] * 12)
    plan = decide(spec(types), head(), Demand(placement_groups=[pg]), now=0.0)
    assert plan.launch == {"small": 12}
    spread = PlacementGroupDemand(strategy="STRICT_SPREAD", bundles=[{"CPU": 1}] * 9)
    plan = decide(spec(types), head(), Demand(placement_groups=[spread]), now=0.0)
    assert plan.launch == {"small": 9}
    plan = decide(spec(types), head(), Demand(), now=0.0, requested=demand(({"CPU": 1}, 20)))
    assert plan.launch == {"small": 20}
    plain = decide(spec(types), head(), demand(({"CPU": 1}, 20)), now=0.0)
    assert plain.launch == {"small": 5}


def test_request_resources_packs_against_whole_nodes() -> None:
    """test_resource_demand_scheduler.py: test_request_resources_existing_usage: a standing
    request counts the nodes' whole capacity, busy or not."""
    types = {"p2.8xlarge": ({"CPU": 32, "GPU": 8}, 40)}
    nodes = head() + [
        Node(
            id=f"n{i}",
            node_type="p2.8xlarge",
            state=InstanceState.RUNNING,
            used={"CPU": 32, "GPU": 8},
        )
        for i in range(5)
    ]
    held = decide(spec(types), nodes, Demand(), now=0.0, requested=demand(({"GPU": 8}, 5)))
    assert held.launch == {}
    more = decide_detailed(spec(types), nodes, Demand(), now=0.0, requested=demand(({"GPU": 8}, 7)))
    assert more.plan.launch == {"p2.8xlarge": 2}


def test_explain_takes_request_resources(tmp_path: Path) -> None:
    """``corral autoscale explain --request-resources``: a standing request, as Ray's
    request_resources() states it."""
    repo = Path(__file__).resolve().parents[2]
    cluster = repo / "examples" / "clusters" / "multi-node-type.yaml"
    empty = tmp_path / "d.yaml"
    empty.write_text("")
    req = tmp_path / "req.yaml"
    req.write_text("bundles: [{resources: {CPU: 16}, count: 3}]\n")
    args = ["autoscale", "explain", str(cluster), "--demand", str(empty), "--json"]
    without = CliRunner().invoke(app, args)
    assert without.exit_code == 0, without.stdout
    ran = CliRunner().invoke(app, [*args, "--request-resources", str(req)])
    assert ran.exit_code == 0, ran.stdout
    import json

    plan = json.loads(ran.stdout)
    assert sum(plan["launch"].values()) > sum(json.loads(without.stdout)["launch"].values())
    assert any("requested resources" in r for r in plan["reasons"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("bundles: [{resources: {CPU: -1}}]\n")
    wrong = CliRunner().invoke(app, [*args, "--request-resources", str(bad)])
    assert wrong.exit_code == 2 and "Traceback" not in wrong.stdout


# --------------------------------------------------------------------------- v2 test_scheduler.py
V2_TYPES = {"type_1": ({"CPU": 1}, 10), "type_2": ({"CPU": 1}, 10), "type_3": ({"CPU": 1}, 10)}


def v2_spec(**bounds: tuple[int, int]) -> ClusterSpec:
    """Ray's v2 test types (CPU 1 each), with (min_workers, max_workers) per type."""
    base = spec(V2_TYPES)
    types = dict(base.node_types)
    for name, (low, high) in bounds.items():
        types[name] = types[name].model_copy(update={"min_workers": low, "max_workers": high})
    return base.model_copy(update={"node_types": types})


def test_v2_min_worker_nodes() -> None:
    """python/ray/autoscaler/v2/tests/test_scheduler.py: test_min_worker_nodes"""
    cluster = v2_spec(type_1=(1, 10), type_2=(0, 10), type_3=(2, 10))
    assert decide(cluster, head(), Demand(), now=0.0).launch == {"type_1": 1, "type_3": 2}
    running = [Node(id=f"r{i}", node_type="type_1", state=InstanceState.RUNNING) for i in range(2)]
    assert decide(cluster, head() + running, Demand(), now=0.0).launch == {"type_3": 2}
    pending = [
        Node(id="p1", node_type="type_1", state=InstanceState.REQUESTED),
        Node(id="p2", node_type="type_1", state=InstanceState.REQUESTED),
        Node(id="gone", node_type="type_no_longer_exists", state=InstanceState.REQUESTED),
    ]
    plan = decide(cluster, head() + pending, Demand(), now=0.0)
    assert plan.launch == {"type_3": 2} and plan.terminate == ["gone"]


def test_v2_max_workers_per_type() -> None:
    """python/ray/autoscaler/v2/tests/test_scheduler.py: test_max_workers_per_type: above a
    type's max, the pending node goes first, then the less used of the running ones."""
    nodes = [
        *head(),
        Node(id="0", node_type="type_1", state=InstanceState.REQUESTED),
        Node(id="1", node_type="type_1", state=InstanceState.RUNNING, idle_s=0.01),
        Node(id="2", node_type="type_1", state=InstanceState.RUNNING, used={"CPU": 0.5}),
    ]
    two = decide(v2_spec(type_1=(2, 2)), nodes, Demand(), now=0.0)
    assert two.terminate == ["0"]
    one = decide(v2_spec(type_1=(0, 1)), nodes, Demand(), now=0.0)
    assert sorted(one.terminate) == ["0", "1"]
