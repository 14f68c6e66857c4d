"""The autoscaler's decision on the seed's multi-node-type cluster file.

Node types (resources filled in from the AWS catalog): cpu_4_ondemand (m4.xlarge, 4 CPU, the
head's type, 1..5 workers), cpu_16_spot (m4.4xlarge, 16 CPU, Custom1: 1, is_spot: 1, 0..10),
gpu_1_ondemand (p2.xlarge, 4 CPU, 1 K80, Custom2: 2, 0..4), gpu_8_ondemand (p3.8xlarge,
32 CPU, 4 V100, 0..2); global max_workers 21; upscaling speed 1; idle timeout 5 minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.shared.autoscaler import ClusterSpec, Demand, Node, Plan, decide, decide_detailed
from corral.shared.autoscaler.resources import resolve_cluster
from corral.shared.catalog import load_catalog
from corral.shared.config.cluster import Cluster
from corral.shared.config.detect import load_as

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seeds" / "ray-cluster-node-types.yaml"
NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    cluster, _ = load_as(SEED, Cluster)
    resolved = resolve_cluster(cluster, load_catalog())
    assert resolved.problems == []
    return resolved.spec


def with_limits(spec: ClusterSpec, **changes: Any) -> ClusterSpec:
    return spec.model_copy(update=changes)


def with_type(spec: ClusterSpec, name: str, **changes: Any) -> ClusterSpec:
    types = dict(spec.node_types)
    types[name] = types[name].model_copy(update=changes)
    return spec.model_copy(update={"node_types": types})


def node(node_id: str, node_type: str, state: str = "running", **fields: Any) -> Node:
    return Node.model_validate({"id": node_id, "node_type": node_type, "state": state, **fields})


def head(**fields: Any) -> Node:
    return node("head", "cpu_4_ondemand", kind="head", **fields)


def min_worker(node_id: str = "w-min", **fields: Any) -> Node:
    """The cpu_4_ondemand worker min_workers asks for, busy unless told otherwise."""
    fields.setdefault("used", {"CPU": 4})
    return node(node_id, "cpu_4_ondemand", **fields)


def bundles(*shapes: tuple[dict[str, float], int]) -> Demand:
    return Demand.model_validate(
        {"bundles": [{"resources": res, "count": count} for res, count in shapes]}
    )


def run(spec: ClusterSpec, nodes: list[Node], demand: Demand, **kw: Any) -> Plan:
    return decide(spec, nodes, demand, now=kw.pop("now", NOW), **kw)


BUSY_HEAD = {"used": {"CPU": 4}}


# --------------------------------------------------------------------------- the right type
def test_four_gpus_launch_the_only_type_with_four(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"GPU": 4}, 1)))
    assert plan.launch == {"gpu_8_ondemand": 1}
    assert plan.terminate == []


def test_one_gpu_launches_the_smallest_gpu_type_that_fits(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"GPU": 1, "CPU": 2}, 1)))
    assert plan.launch == {"gpu_1_ondemand": 1}


def test_accelerator_type_steers_to_the_v100_type(spec: ClusterSpec) -> None:
    demand = bundles(({"GPU": 1, "accelerator_type:V100": 0.001}, 1))
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], demand)
    assert plan.launch == {"gpu_8_ondemand": 1}


def test_many_gpu_bundles_take_the_cheapest_nodes(spec: ClusterSpec) -> None:
    # 8 x 1 GPU: two p3.8xlarge cost $24.48/h; the four p2.xlarge allowed ($0.90 each) and one
    # p3.8xlarge cost $15.84/h. The cheaper plan wins (Ray's choice costs no less).
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"GPU": 1}, 8)))
    assert plan.launch == {"gpu_1_ondemand": 4, "gpu_8_ondemand": 1}


def test_custom1_steers_to_the_spot_type(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"CPU": 1, "Custom1": 1}, 3)))
    assert plan.launch == {"cpu_16_spot": 3}  # one Custom1 per node


def test_custom2_steers_to_the_one_gpu_type_even_without_gpu_work(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"Custom2": 1}, 4)))
    assert plan.launch == {"gpu_1_ondemand": 2}  # Custom2: 2 per node


def test_is_spot_steers_to_the_spot_type(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"CPU": 2, "is_spot": 1}, 1)))
    assert plan.launch == {"cpu_16_spot": 1}


# --------------------------------------------------------------------------- CPU off GPUs
def test_cpu_work_launches_no_gpu_node(spec: ClusterSpec) -> None:
    plan = run(
        with_limits(spec, upscaling_speed=100),
        [head(**BUSY_HEAD), min_worker()],
        bundles(({"CPU": 1}, 100), ({"CPU": 4}, 6)),
    )
    assert set(plan.launch) <= {"cpu_4_ondemand", "cpu_16_spot"}
    assert plan.waiting == []
    assert any("kept off GPU node types" in r for r in plan.reasons)


def test_cpu_work_packs_onto_cpu_nodes_before_free_gpu_nodes(spec: ClusterSpec) -> None:
    nodes = [head(**BUSY_HEAD), min_worker(), node("g", "gpu_8_ondemand"), node("c", "cpu_16_spot")]
    decision = decide_detailed(spec, nodes, bundles(({"CPU": 1}, 16)), now=NOW)
    assert decision.plan.launch == {}
    holding = {b.node_id: sum(b.placed.values()) for b in decision.bins if b.placed}
    assert holding == {"c": 16}


def test_cpu_work_takes_a_gpu_type_when_no_cpu_type_may_launch(spec: ClusterSpec) -> None:
    # Both CPU types sit at their max_workers: a GPU node is better than no node.
    busy = {"used": {"CPU": 16}}
    nodes = [head(**BUSY_HEAD)]
    nodes += [min_worker(f"c4-{i}") for i in range(5)]
    nodes += [node(f"c16-{i}", "cpu_16_spot", **busy) for i in range(10)]
    plan = run(spec, nodes, bundles(({"CPU": 2}, 2)))
    assert plan.launch == {"gpu_1_ondemand": 1}


# --------------------------------------------------------------------------- upscaling cap
def test_at_most_five_start_at_once_on_a_small_cluster(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"CPU": 16}, 20)))
    # Ray's cap is per type: max(5, 1.0 x max(0 running cpu_16_spot, 1)) = 5.
    assert plan.launch["cpu_16_spot"] == 5
    assert plan.in_flight_cap == 5
    assert any(r.startswith("upscaling cap: cpu_16_spot: at most 5") for r in plan.reasons)
    held = 5 + 2 * plan.launch.get("gpu_8_ondemand", 0)  # 32 CPUs hold two bundles
    assert sum(b.count for b in plan.waiting) == 20 - held


def test_cap_grows_with_running_nodes_of_the_type_and_counts_its_pending_ones(
    spec: ClusterSpec,
) -> None:
    fast = with_limits(spec, upscaling_speed=2.0, max_workers=60)
    fast = with_type(fast, "cpu_16_spot", max_workers=60)
    busy = {"used": {"CPU": 16}}
    nodes = [head(**BUSY_HEAD)] + [node(f"w{i}", "cpu_16_spot", **busy) for i in range(4)]
    nodes += [node(f"p{i}", "cpu_16_spot", "requested") for i in range(3)]
    plan = run(fast, nodes, bundles(({"CPU": 16}, 50)))
    # 4 cpu_16_spot running x 2.0 = 8 in flight; 3 are already pending, so 5 more.
    assert plan.in_flight_cap == 8
    assert plan.launch["cpu_16_spot"] == 5


def test_min_workers_launch_despite_the_cap(spec: ClusterSpec) -> None:
    eager = with_type(spec, "cpu_4_ondemand", min_workers=7, max_workers=7)
    plan = run(eager, [head(**BUSY_HEAD)], bundles(({"CPU": 16}, 10)))
    assert plan.launch["cpu_4_ondemand"] == 7  # the floor the user asked for, above the cap
    # Each type has its own cap: cpu_4_ondemand's minimum does not use up cpu_16_spot's.
    assert plan.launch["cpu_16_spot"] == 5


# --------------------------------------------------------------------------- idle nodes
def test_idle_nodes_go_after_the_timeout_but_never_below_min(spec: ClusterSpec) -> None:
    nodes = [
        head(idle_s=9999),
        node("c4-a", "cpu_4_ondemand", idle_s=400),
        node("c4-b", "cpu_4_ondemand", idle_s=500),
        node("c16-a", "cpu_16_spot", idle_s=301),
        node("c16-b", "cpu_16_spot", idle_s=299),
        node("c16-busy", "cpu_16_spot", idle_s=9999, used={"CPU": 1}),
    ]
    plan = run(spec, nodes, Demand())
    # c4-b is the longest idle of its type; c4-a stays for min_workers 1.
    assert sorted(plan.terminate) == ["c16-a", "c4-b"]
    assert plan.launch == {}
    assert any("keep c4-a" in r and "min_workers 1" in r for r in plan.reasons)
    assert any("keep head" in r and "never terminated" in r for r in plan.reasons)


def test_a_type_idle_timeout_overrides_the_cluster_one(spec: ClusterSpec) -> None:
    quick = with_type(spec, "gpu_1_ondemand", idle_timeout_s=60.0)
    nodes = [head(**BUSY_HEAD), min_worker(), node("g1", "gpu_1_ondemand", idle_s=61)]
    nodes.append(node("g8", "gpu_8_ondemand", idle_s=61))
    assert run(quick, nodes, Demand()).terminate == ["g1"]


def test_an_idle_node_the_demand_fits_on_is_kept(spec: ClusterSpec) -> None:
    nodes = [head(**BUSY_HEAD), min_worker(), node("c16", "cpu_16_spot", idle_s=900)]
    plan = run(spec, nodes, bundles(({"CPU": 8}, 1)))
    assert plan.terminate == []
    assert plan.launch == {}
    assert any("keep c16" in r and "packed onto it" in r for r in plan.reasons)


def test_room_an_idle_node_frees_goes_to_a_type_short_of_its_minimum(spec: ClusterSpec) -> None:
    full = with_limits(spec, max_workers=1)
    plan = run(full, [head(**BUSY_HEAD), node("s", "cpu_16_spot", idle_s=1000)], Demand())
    assert plan.terminate == ["s"]
    assert plan.launch == {"cpu_4_ondemand": 1}


# --------------------------------------------------------------------------- cool-down
def test_a_sold_out_type_is_skipped_until_its_cool_down_ends(spec: ClusterSpec) -> None:
    nodes = [head(**BUSY_HEAD), min_worker()]
    demand = bundles(({"CPU": 16}, 2))
    assert run(spec, nodes, demand).launch == {"cpu_16_spot": 2}

    cooled = {"cpu_16_spot": NOW + 60}
    during = run(spec, nodes, demand, cooldowns=cooled)
    assert "cpu_16_spot" not in during.launch
    assert during.launch == {"gpu_8_ondemand": 1}  # the next type that holds 16 CPUs
    assert any("cpu_16_spot is cooled down" in r for r in during.reasons)

    after = run(spec, nodes, demand, cooldowns=cooled, now=NOW + 61)
    assert after.launch == {"cpu_16_spot": 2}


def test_a_cooled_down_type_falls_back_to_the_next_cpu_type(spec: ClusterSpec) -> None:
    plan = run(
        spec,
        [head(**BUSY_HEAD), min_worker()],
        bundles(({"CPU": 4}, 3)),
        cooldowns={"cpu_16_spot": NOW + 300},
    )
    assert plan.launch == {"cpu_4_ondemand": 3}


def test_when_every_holder_is_cooled_down_the_demand_waits(spec: ClusterSpec) -> None:
    plan = run(
        spec,
        [head(**BUSY_HEAD), min_worker()],
        bundles(({"Custom1": 1}, 2)),
        cooldowns={"cpu_16_spot": NOW + 300},
    )
    assert plan.launch == {}
    assert [(b.resources, b.count) for b in plan.waiting] == [({"Custom1": 1.0}, 2)]
    assert any("waiting: 2 x {Custom1: 1}: cpu_16_spot cooled down" in r for r in plan.reasons)


# --------------------------------------------------------------------------- outdated nodes
def test_outdated_nodes_are_replaced(spec: ClusterSpec) -> None:
    current = spec.node_types["cpu_4_ondemand"].launch_hash
    nodes = [
        head(**BUSY_HEAD, launch_hash="old"),
        node("w-old", "cpu_4_ondemand", launch_hash="old", used={"CPU": 3}),
        node("s-old", "cpu_16_spot", launch_hash="old", idle_s=5),
        node("w-new", "cpu_4_ondemand", launch_hash=current, used={"CPU": 4}),
    ]
    decision = decide_detailed(spec, nodes, Demand(), now=NOW)
    plan = decision.plan
    assert sorted(plan.terminate) == ["s-old", "w-old"]
    # w-old's work needs a node of its own again; s-old ran nothing, so nothing replaces it.
    assert plan.launch == {"cpu_4_ondemand": 1}
    new = [b for b in decision.bins if b.node_id is None]
    assert [(b.node_type, list(b.placed.values())) for b in new] == [("cpu_4_ondemand", [1])]
    assert any("head head runs an outdated launch config" in r for r in plan.reasons)


def test_an_outdated_min_worker_is_replaced_to_keep_the_minimum(spec: ClusterSpec) -> None:
    nodes = [head(**BUSY_HEAD), node("w-old", "cpu_4_ondemand", launch_hash="stale")]
    plan = run(spec, nodes, Demand())
    assert plan.terminate == ["w-old"]
    assert plan.launch == {"cpu_4_ondemand": 1}


def test_a_node_whose_type_left_the_file_is_terminated(spec: ClusterSpec) -> None:
    nodes = [head(**BUSY_HEAD), min_worker(), node("x", "gpu_old")]
    plan = run(spec, nodes, Demand())
    assert plan.terminate == ["x"]
    assert any("'gpu_old' is not in the cluster file" in r for r in plan.reasons)


# --------------------------------------------------------------------------- placement groups
def pg(strategy: str, shapes: list[dict[str, float]], count: int = 1) -> Demand:
    return Demand.model_validate(
        {"placement_groups": [{"strategy": strategy, "bundles": shapes, "count": count}]}
    )


def test_strict_pack_puts_every_bundle_on_one_node(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], pg("STRICT_PACK", [{"CPU": 4}] * 4))
    assert plan.launch == {"cpu_16_spot": 1}


def test_pack_and_spread_may_share_nodes(spec: ClusterSpec) -> None:
    for strategy in ("PACK", "SPREAD"):
        plan = run(spec, [head(), min_worker()], pg(strategy, [{"CPU": 1}] * 4))
        assert plan.launch == {}, strategy  # all four fit on the idle head


def test_strict_spread_puts_each_bundle_on_its_own_node(spec: ClusterSpec) -> None:
    decision = decide_detailed(
        spec, [head(), min_worker()], pg("STRICT_SPREAD", [{"CPU": 1}] * 4), now=NOW
    )
    # The idle head takes one; the busy worker none; three new 4-CPU nodes one each.
    assert decision.plan.launch == {"cpu_4_ondemand": 3}
    holders = [b for b in decision.bins if b.placed]
    assert sum(b.count for b in holders) == 4
    assert all(list(b.placed.values()) == [1] for b in holders)


def test_strict_spread_is_all_or_nothing(spec: ClusterSpec) -> None:
    # 30 bundles need 30 nodes; the cluster may have 21 workers and its head.
    plan = run(spec, [head(), min_worker()], pg("STRICT_SPREAD", [{"CPU": 1}] * 30))
    assert plan.launch == {}
    assert sum(b.count for b in plan.waiting) == 30


def test_strict_spread_groups_can_share_nodes_across_groups(spec: ClusterSpec) -> None:
    plan = run(spec, [head(), min_worker()], pg("STRICT_SPREAD", [{"CPU": 1}] * 2, count=3))
    assert plan.launch == {"cpu_4_ondemand": 1}  # head and one new node hold all three


# --------------------------------------------------------------------------- limits
def test_global_max_workers_bounds_the_launches(spec: ClusterSpec) -> None:
    plan = run(
        with_limits(spec, upscaling_speed=1000),
        [head(**BUSY_HEAD), min_worker()],
        bundles(({"CPU": 1}, 10_000)),
    )
    assert sum(plan.launch.values()) == 20  # 21 workers in all, one is there
    assert plan.launch["cpu_16_spot"] == 10  # the biggest CPU type first, up to its max
    assert any("max_workers 21 reached" in r for r in plan.reasons)


def test_workers_above_the_global_max_are_terminated_pending_first(spec: ClusterSpec) -> None:
    small = with_limits(spec, max_workers=3)
    nodes = [head(), min_worker()]
    nodes += [node(f"s{i}", "cpu_16_spot", used={"CPU": 1}) for i in range(3)]
    nodes.append(node("p", "cpu_16_spot", "requested"))
    plan = run(small, nodes, Demand())
    assert len(plan.terminate) == 2
    assert "p" in plan.terminate  # not started yet: the cheapest to give up
    assert "w-min" not in plan.terminate and "head" not in plan.terminate


def test_demand_no_type_can_hold_is_unsatisfiable(spec: ClusterSpec) -> None:
    plan = run(spec, [head(), min_worker()], bundles(({"GPU": 8}, 3), ({"CPU": 1}, 2)))
    assert [(b.resources, b.count) for b in plan.unsatisfiable] == [({"GPU": 8.0}, 3)]
    assert plan.launch == {}  # the two CPU bundles fit on the idle head
    assert any(r.startswith("unsatisfiable: 3 x {GPU: 8}") for r in plan.reasons)


def test_terminating_and_failed_nodes_do_not_count(spec: ClusterSpec) -> None:
    nodes = [
        head(**BUSY_HEAD),
        min_worker(),
        node("t", "cpu_16_spot", "terminating"),
        node("f", "cpu_16_spot", "failed"),
    ]
    plan = run(spec, nodes, bundles(({"CPU": 16}, 1)))
    assert plan.launch == {"cpu_16_spot": 1}
    assert plan.terminate == []


def test_requested_resources_count_whole_nodes_not_free_capacity(spec: ClusterSpec) -> None:
    nodes = [head(**BUSY_HEAD), min_worker()]
    wanted = bundles(({"CPU": 4}, 2))
    as_request = decide(spec, nodes, Demand(), now=NOW, requested=wanted)
    assert as_request.launch == {}  # the two nodes have 4 CPUs each, busy or not
    as_pending = decide(spec, nodes, wanted, now=NOW)
    assert sum(as_pending.launch.values()) >= 1
    more = decide(spec, nodes, Demand(), now=NOW, requested=bundles(({"CPU": 4}, 4)))
    # Two more CPU-4 bundles: two 4-CPU nodes cost less than a 16-CPU one (Ray's choice too).
    assert sum(more.launch.values()) >= 1 and "gpu_8_ondemand" not in more.launch


def test_the_plan_serializes_to_json(spec: ClusterSpec) -> None:
    plan = run(spec, [head(**BUSY_HEAD), min_worker()], bundles(({"GPU": 1}, 1)))
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again == plan
    assert set(plan.summary()) == {"launch", "terminate", "reasons"}
