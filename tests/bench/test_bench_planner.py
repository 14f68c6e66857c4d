"""Planner benchmark: 10,000 seeded tasks (500 with CORRAL_BENCH_SCALE=small) planned against the
whole catalog, by the planner and by a naive baseline in the same run.

The baseline is written independently of the planner's indexes: for every task it scans every
offering, keeps the ones a request accepts, and sorts them with one key that spells out the
chain order (tier, group, run, price, catalog index). Both must produce the same chains; the
planner must be at least FLOOR times faster.
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Iterable
from typing import Any

import pytest

from corral.shared.blocking import Block
from corral.shared.catalog import Catalog, load_catalog
from corral.shared.config.task import Task
from corral.shared.placement import Placement
from corral.shared.planner import PROVIDER_CLOUDS, Candidate, Spec, plan, request_specs

FLOOR = 3.0  # the planner must plan at least this many times as many tasks per second
SEED = 20241011

pytestmark = pytest.mark.bench


# --------------------------------------------------------------------------- naive baseline
def _accepts(spec: Spec, o: Any, allowed: frozenset[str], bare_types: set[tuple[str, str]]) -> bool:
    """Does one spec accept one offering? A plain restatement of the planner's rules."""
    w = spec.where
    if o.cloud not in allowed or (w.cloud is not None and o.cloud != w.cloud):
        return False
    if w.region is not None and o.region != w.region:
        return False
    if w.zone is not None and o.zone != w.zone:
        return False
    if spec.min_cpus is not None and o.vcpus < spec.min_cpus:
        return False
    if spec.min_memory_gib is not None and o.memory_gib < spec.min_memory_gib:
        return False
    if w.instance_type is not None and o.instance_type.lower() != w.instance_type.lower():
        return False
    if spec.accelerator is not None:
        return (o.accelerator, o.accelerator_count) == (
            spec.accelerator.name,
            spec.accelerator.count,
        )
    if w.instance_type is not None:
        # A type sold both bare and with GPUs: without accelerators, only the bare one.
        return o.accelerator is None or (o.cloud, o.instance_type.lower()) not in bare_types
    return o.accelerator is None


def naive_plan(task: Task, catalog: Catalog, blocked: Iterable[Block] = ()) -> list[Candidate]:
    """Scan everything, sort once. Slow on purpose; the reference for the planner's chains."""
    offerings = catalog.offerings
    allowed = frozenset(c for c in catalog.clouds if c in PROVIDER_CLOUDS)
    bare_types = {(o.cloud, o.instance_type.lower()) for o in offerings if o.accelerator is None}
    blocks = list(blocked)
    rows: list[tuple[tuple[int, int], int, str, float]] = []  # (tier, index, market, price)
    for spec in request_specs(task.resources):
        for i, o in enumerate(offerings):
            price = o.spot_price_usd_per_hour if spec.market == "spot" else o.price_usd_per_hour
            if price is not None and _accepts(spec, o, allowed, bare_types):
                rows.append((spec.rank, i, spec.market, price))
    first_tier: dict[tuple[int, str], tuple[int, int]] = {}
    for tier, i, market, _ in rows:
        first_tier[(i, market)] = min(first_tier.get((i, market), tier), tier)
    rows = [r for r in rows if first_tier[(r[1], r[2])] == r[0]]
    rows = list({(r[0], r[1], r[2]): r for r in rows}.values())  # a spec overlap counts once

    def group_of(r: Any) -> Any:
        o = offerings[r[1]]
        return (r[0], o.cloud, o.accelerator, o.accelerator_count, r[2])

    def run_of(r: Any) -> Any:
        o = offerings[r[1]]
        return (*group_of(r), o.region, o.instance_type)

    group_min: dict[Any, tuple[float, int]] = {}
    run_min: dict[Any, tuple[float, int]] = {}
    for r in rows:
        key = (r[3], r[1])
        group_min[group_of(r)] = min(group_min.get(group_of(r), key), key)
        run_min[run_of(r)] = min(run_min.get(run_of(r), key), key)
    rows.sort(
        key=lambda r: (
            r[0],
            *group_min[group_of(r)],
            0 if r[2] == "on_demand" else 1,
            *run_min[run_of(r)],
            r[3],
            r[1],
        )
    )
    out = []
    for _tier, i, market, price in rows:
        o = offerings[i]
        place = Placement(o.cloud, o.region, o.zone, o.instance_type, market)
        if any(b.matches(place) for b in blocks):
            continue
        out.append(
            Candidate(
                place,
                {o.accelerator: o.accelerator_count} if o.accelerator else {},
                o.vcpus,
                o.memory_gib,
                price,
                task.num_nodes,
            )
        )
    return out


# --------------------------------------------------------------------------- seeded tasks
def _accelerator_names(catalog: Catalog) -> list[str]:
    pairs = sorted(
        {(o.accelerator, o.accelerator_count) for o in catalog.offerings if o.accelerator}
    )
    return [f"{name}:{count}" for name, count in pairs] + ["A10:1", "A10:8"]  # Azure-only: none


def random_task(rng: random.Random, catalog: Catalog) -> dict[str, Any]:
    """One task file (as data) of a random shape."""
    accs = _accelerator_names(catalog)
    regions = sorted({(o.cloud, o.region) for o in catalog.offerings})
    zones = sorted({(o.cloud, o.zone) for o in catalog.offerings})
    types = sorted({(o.cloud, o.instance_type) for o in catalog.offerings})
    shape = rng.choice(["one", "one", "set", "list", "any_of_regions", "ordered", "type", "cpu"])
    res: dict[str, Any] = {}
    if shape == "one":
        res["accelerators"] = rng.choice(accs)
    elif shape in ("set", "list"):
        picked = rng.sample(accs, rng.randint(2, 4))
        res["accelerators"] = (
            {a.split(":")[0]: int(a.split(":")[1]) for a in picked} if shape == "set" else picked
        )
    elif shape == "any_of_regions":
        res["accelerators"] = {
            a.split(":")[0]: 8 for a in rng.sample(["A100:8", "L4:8", "A10G:8", "H100:8"], 3)
        }
        res["any_of"] = [{"region": r} for _, r in rng.sample(regions, rng.randint(2, 6))]
    elif shape == "ordered":
        res["ordered"] = [
            rng.choice(
                [
                    {"accelerators": rng.choice(accs)},
                    {"instance_type": rng.choice(types)[1]},
                    {
                        "cloud": rng.choice(["aws", "gcp", "azure"]),
                        "accelerators": rng.choice(accs),
                    },
                ]
            )
            for _ in range(rng.randint(2, 3))
        ]
    elif shape == "type":
        res["instance_type"] = rng.choice(types)[1]
    else:
        res["cpus"] = f"{rng.choice([1, 2, 4, 8, 16, 32])}+"
        if rng.random() < 0.5:
            res["memory"] = rng.choice([4, 16, 32, 64, 128])
    roll = rng.random()
    if roll < 0.15:
        res["cloud"] = rng.choice(["aws", "gcp"])
    elif roll < 0.25 and "any_of" not in res:
        res["cloud"], res["region"] = rng.choice(regions)
    elif roll < 0.30 and "any_of" not in res:
        res["cloud"], res["zone"] = rng.choice(zones)
    if rng.random() < 0.25:
        res["use_spot"] = True
    return {"name": "bench", "num_nodes": rng.choice([1, 1, 1, 2, 4]), "resources": res}


def random_blocks(rng: random.Random, catalog: Catalog) -> tuple[Block, ...]:
    o = rng.choice(catalog.offerings)
    return rng.choice(
        [
            (),
            (),
            (Block(o.cloud, o.region, o.zone, o.instance_type, "on_demand"),),
            (Block(o.cloud, region=o.region),),
            (Block(o.cloud, instance_type=o.instance_type),),
        ]
    )


def _scale() -> int:
    return 500 if os.environ.get("CORRAL_BENCH_SCALE") == "small" else 10_000


REPEATS = 3


def _best_cpu(run: Any) -> tuple[float, list[Any]]:
    """The least process CPU time of REPEATS runs, the collector paused (as ``timeit``
    does), and what the last run returned."""
    best, out = float("inf"), []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(REPEATS):
            start = time.process_time()
            out = run()
            best = min(best, time.process_time() - start)
    finally:
        if enabled:
            gc.enable()
    return best, out


def test_planner_beats_naive_baseline_and_agrees() -> None:
    rng = random.Random(SEED)
    shipped = load_catalog()
    tasks = [Task.model_validate(random_task(rng, shipped)) for _ in range(_scale())]
    blocks = [random_blocks(rng, shipped) for _ in tasks]

    def planner() -> list[Any]:
        catalog = Catalog(shipped.offerings)  # a fresh catalog: its views built in the time
        return [plan(t, catalog, blocked=b).candidates for t, b in zip(tasks, blocks, strict=True)]

    def naive() -> list[Any]:
        catalog = Catalog(shipped.offerings)
        return [naive_plan(t, catalog, b) for t, b in zip(tasks, blocks, strict=True)]

    # CPU time with the collector paused, best of REPEATS, each side in turn: at the small
    # size a pass is some 40 ms, and one wall-clock pass on the shared machine measured the
    # other processes (2.8x in one CI run, 10-11x on a quiet machine).
    fast_s, fast = _best_cpu(planner)
    slow_s, slow = _best_cpu(naive)

    mismatches = [n for n, (a, b) in enumerate(zip(fast, slow, strict=True)) if a != b]
    assert not mismatches, f"{len(mismatches)} chains differ, first task: {tasks[mismatches[0]]!r}"
    ratio = slow_s / fast_s
    candidates = sum(len(c) for c in fast)
    print(
        f"\nplanner: {len(tasks) / fast_s:,.0f} tasks/s ({fast_s:.2f} s), "
        f"naive: {len(tasks) / slow_s:,.0f} tasks/s ({slow_s:.2f} s), "
        f"ratio {ratio:.1f}x; {candidates:,} candidates, "
        f"{sum(1 for c in fast if not c)} empty plans"
    )
    assert ratio >= FLOOR, f"planner only {ratio:.1f}x the naive baseline (floor {FLOOR}x)"
