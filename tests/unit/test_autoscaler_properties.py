"""Seeded property tests of the autoscaler's decision.

Clusters are drawn from small vocabularies (a few resource kinds, small counts) so that types
overlap, limits bind and nodes sit idle often. The checks are written from the rules, not from
the implementation: the packing a decision reports is re-added resource by resource against
each node's capacity, and counts per type are recomputed from the nodes and the plan.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.shared.autoscaler import (
    ClusterSpec,
    Decision,
    Demand,
    Node,
    NodeTypeSpec,
    decide_detailed,
)
from corral.shared.autoscaler.model import head_ids

# 60 seeded examples per property in the default run (drawing them is most of its cost);
# `make fuzz` draws 200 (CORRAL_PROPERTY_EXAMPLES).
EXAMPLES = int(os.environ.get("CORRAL_PROPERTY_EXAMPLES", "60"))
SEEDED = settings(derandomize=True, database=None, max_examples=EXAMPLES, deadline=None)
NOW = 1000.0
KINDS = ("CPU", "GPU", "memory", "Custom1")
GIB = 2**30


# Strategies are built once: building them inside a draw costs more than the decision itself.
TYPE_RESOURCES = st.fixed_dictionaries(
    {"CPU": st.sampled_from([0, 2, 4, 8, 16])},
    optional={
        "GPU": st.sampled_from([0, 1, 4]),
        "memory": st.sampled_from([4 * GIB, 16 * GIB]),
        "Custom1": st.sampled_from([1, 2]),
    },
)
SMALL = st.integers(0, 2)
TYPE_COUNT = st.integers(1, 4)
EXTRA_ROOM = st.integers(0, 8)
NODE_COUNT = st.integers(0, 12)
SPEEDS = st.sampled_from([0.0, 0.5, 1.0, 3.0])
TIMEOUTS = st.sampled_from([None, 30.0])
STATES = st.sampled_from(["RUNNING", "RUNNING", "REQUESTED", "TERMINATING"])
IDLE = st.sampled_from([0.0, 45.0, 120.0])
HASHES = st.sampled_from([None, "h1", "h1", "h0"])
USE = st.sampled_from([0.0, 0.5, 1.0])  # share of a node's resources in use
BUSY = st.booleans()
BUNDLE = st.fixed_dictionaries(
    {
        "resources": st.fixed_dictionaries(
            {"CPU": st.sampled_from([0.5, 1, 2, 4, 8])},
            optional={
                "GPU": st.sampled_from([1, 2]),
                "memory": st.sampled_from([2 * GIB, 8 * GIB]),
                "Custom1": st.just(1),
            },
        ),
        "count": st.integers(1, 40),
    }
)
DEMANDS = st.builds(lambda b: Demand.model_validate({"bundles": b}), st.lists(BUNDLE, max_size=5))


@st.composite
def clusters(draw: st.DrawFn, big_limits: bool = False) -> ClusterSpec:
    names = [f"t{i}" for i in range(draw(TYPE_COUNT))]
    types = {}
    for name in names:
        low = draw(SMALL)
        high = 1000 if big_limits else low + draw(st.integers(0, 5))
        types[name] = NodeTypeSpec(
            resources=draw(TYPE_RESOURCES),
            min_workers=low,
            max_workers=high,
            idle_timeout_s=draw(TIMEOUTS),
            launch_hash="h1",
        )
    floor = sum(min(t.min_workers, t.max_workers) for t in types.values())
    return ClusterSpec(
        head_node_type=names[0],
        max_workers=10_000 if big_limits else floor + draw(EXTRA_ROOM),
        upscaling_speed=1e6 if big_limits else draw(SPEEDS),
        idle_timeout_s=60.0,
        node_types=types,
    )


@st.composite
def cluster_nodes(draw: st.DrawFn, spec: ClusterSpec) -> list[Node]:
    names = list(spec.node_types)
    pick_type = st.sampled_from(names)
    out = [Node(id="head", node_type=spec.head_node_type, state="RUNNING", kind="head")]
    for i in range(draw(NODE_COUNT)):
        name = draw(pick_type)
        share = draw(USE) if draw(BUSY) else 0.0
        total = spec.node_types[name].resources
        out.append(
            Node(
                id=f"n{i}",
                node_type=name,
                state=draw(STATES),
                idle_s=draw(IDLE),
                used={k: v * share for k, v in total.items() if v > 0 and share},
                launch_hash=draw(HASHES),
            )
        )
    return out


def scenario(big_limits: bool = False) -> Any:
    return clusters(big_limits).flatmap(
        lambda spec: st.tuples(
            st.just(spec),
            cluster_nodes(spec),
            DEMANDS,
            st.sets(st.sampled_from(list(spec.node_types))),
        )
    )


def run(spec: ClusterSpec, nodes: list[Node], demand: Demand, cooled: set[str]) -> Decision:
    return decide_detailed(spec, nodes, demand, now=NOW, cooldowns={t: NOW + 5 for t in cooled})


ACTIVE = {"RUNNING", "REQUESTED"}


def workers_after(spec: ClusterSpec, nodes: list[Node], d: Decision) -> Counter[str]:
    """Workers per type once the plan is carried out: the active ones it keeps, plus launches."""
    heads = head_ids(nodes, spec.head_node_type)
    gone = set(d.plan.terminate)
    kept = Counter(
        n.node_type
        for n in nodes
        if n.state.value in ACTIVE
        and n.id not in heads
        and n.id not in gone
        and n.node_type in spec.node_types
    )
    return kept + Counter(d.plan.launch)


def fits(resources: dict[str, float], capacity: dict[str, float]) -> bool:
    return all(v <= capacity.get(k, 0.0) + 1e-9 for k, v in resources.items())


def capacity_of(spec: ClusterSpec, n: Node) -> dict[str, float]:
    total = spec.node_types[n.node_type].resources
    if n.state.value == "REQUESTED":
        return dict(total)
    return {k: max(v - n.used.get(k, 0.0), 0.0) for k, v in total.items()}


def check_packing(spec: ClusterSpec, nodes: list[Node], d: Decision) -> Counter[tuple]:
    """Every node holds no more than it has; returns the bundles placed, by shape."""
    by_id = {n.id: n for n in nodes}
    placed: Counter[tuple] = Counter()
    for b in d.bins:
        if b.node_id is not None:
            capacity = capacity_of(spec, by_id[b.node_id])
        else:
            capacity = dict(spec.node_types[b.node_type].resources)
        load: dict[str, float] = {}
        for shape, per_node in b.placed.items():
            resources = d.index.resources(shape)
            for k, v in resources.items():
                load[k] = load.get(k, 0.0) + v * per_node
            placed[tuple(sorted(resources.items()))] += per_node * b.count
        assert fits(load, capacity), (b.node_type, b.node_id, load, capacity)
    return placed


def demand_counts(demand: Demand) -> Counter[tuple]:
    out: Counter[tuple] = Counter()
    for b in demand.bundles:
        out[tuple(sorted((k, float(v)) for k, v in b.resources.items()))] += b.count
    return out


@SEEDED
@given(scenario(big_limits=True))
def test_launched_plus_free_capacity_holds_every_satisfiable_bundle(case: Any) -> None:
    spec, nodes, demand, _cooled = case
    nodes = [n for n in nodes if n.launch_hash != "h0"]  # outdated work would add demand
    d = run(spec, nodes, demand, set())
    placed = check_packing(spec, nodes, d)
    holders = [t.resources for t in spec.node_types.values()]
    for shape, count in demand_counts(demand).items():
        if any(fits(dict(shape), total) for total in holders):
            assert placed[shape] == count, (shape, placed[shape], count, d.plan.reasons)
    assert d.plan.waiting == []


@SEEDED
@given(scenario())
def test_every_bundle_is_placed_waits_or_is_unsatisfiable(case: Any) -> None:
    spec, nodes, demand, cooled = case
    nodes = [n for n in nodes if n.launch_hash != "h0"]
    d = run(spec, nodes, demand, cooled)
    placed = check_packing(spec, nodes, d)
    plan = d.plan
    waiting = Counter({tuple(sorted(b.resources.items())): b.count for b in plan.waiting})
    never = Counter({tuple(sorted(b.resources.items())): b.count for b in plan.unsatisfiable})
    assert placed + waiting + never == demand_counts(demand)


@SEEDED
@given(scenario())
def test_never_above_any_max(case: Any) -> None:
    spec, nodes, demand, cooled = case
    d = run(spec, nodes, demand, cooled)
    after = workers_after(spec, nodes, d)
    for name, t in spec.node_types.items():
        assert after[name] <= t.max_workers, (name, after, d.plan.reasons)
    assert sum(after.values()) <= spec.max_workers


@SEEDED
@given(scenario())
def test_never_below_any_min(case: Any) -> None:
    spec, nodes, demand, cooled = case
    d = run(spec, nodes, demand, cooled)
    after = workers_after(spec, nodes, d)
    heads = head_ids(nodes, spec.head_node_type)
    for name, t in spec.node_types.items():
        if name in cooled:
            # Nothing of a sold-out type is launched, but nothing idle is taken below its floor.
            before = sum(
                1
                for n in nodes
                if n.node_type == name
                and n.state.value in ACTIVE
                and n.id not in heads
                and n.launch_hash != "h0"
            )
            assert after[name] >= min(t.min_workers, before), (name, d.plan.reasons)
        elif sum(after.values()) < spec.max_workers:  # a full cluster launches nothing more
            assert after[name] >= min(t.min_workers, t.max_workers), (name, d.plan.reasons)


@SEEDED
@given(scenario())
def test_never_terminates_the_head(case: Any) -> None:
    spec, nodes, demand, cooled = case
    d = run(spec, nodes, demand, cooled)
    assert "head" not in d.plan.terminate
    assert set(d.plan.terminate) <= {n.id for n in nodes if n.state.value in ACTIVE}


@SEEDED
@given(scenario())
def test_in_flight_launches_never_exceed_the_cap(case: Any) -> None:
    """Ray's cap, per node type: pending nodes of a type plus its launches stay within
    max(5, upscaling_speed x max(running of the type, 1)), unless the launches restoring the
    type's min_workers alone go beyond it (placement groups and standing requests, also
    exempt, are not in these scenarios' demand... or are: they may only add to the floor)."""
    spec, nodes, demand, cooled = case
    d = run(spec, nodes, demand, cooled)
    gone = set(d.plan.terminate)
    after = workers_after(spec, nodes, d)
    launches = Counter(d.plan.launch)
    kept = after - launches
    exempt_phases = ("min_workers", "requested resources", "placement groups")
    for name, t in spec.node_types.items():
        running = sum(
            1
            for n in nodes
            if n.state.value == "RUNNING" and n.node_type == name and n.id not in gone
        )
        cap = max(5, math.floor(spec.upscaling_speed * max(running, 1)))
        pending = sum(
            1
            for n in nodes
            if n.state.value == "REQUESTED" and n.node_type == name and n.id not in gone
        )
        floor = max(0, min(t.min_workers, t.max_workers) - kept[name])
        exempt = sum(
            b.count
            for b in d.bins
            if b.node_id is None
            and b.node_type == name
            and (b.phase in exempt_phases or b.phase.endswith("(STRICT_SPREAD)"))
        )
        assert pending + launches[name] <= max(cap, pending + max(floor, exempt))
