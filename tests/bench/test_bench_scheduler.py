"""Machine-pool scheduler benchmark: one pass over a seeded pool of 10,000 machines of 400
machine types (1,000 of 40 with CORRAL_BENCH_SCALE=small), by the scheduler and by a naive
baseline in the same run.

The pool: every machine type has a rule-bound partition (``team``: project=a first with a
quota, then any job) and an open one (``any``); about 60% of the machines run services (not
preemptible, so neither side preempts) and the rest idle, some partitions with room to launch
more. Waiting: seeded jobs and services of 1-4 nodes over 3 machine types each.

The baseline is written independently of the scheduler's indexes: it orders the queue the
same way, then for every workload scans every machine of the pool once to count what each of
its partitions holds (per rule, for quotas) and which machines idle, and fills the
workload's groups from that. Both must place the same workloads on the same machines; the
scheduler must be at least FLOOR times faster.

Timing: CPU time of this process (``time.process_time``), so that other work on a shared
machine does not count; the garbage collector runs before each timed call and is paused during
it, as ``timeit`` does, so that neither side pays for a full collection of the test process's
heap that the other happened to trigger. The scheduler's figure is its best of ``RUNS`` passes
over the same snapshot (the pass is pure: every one gives the same plan, which is checked); the
baseline, about a thousand times longer, runs once.
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from corral.shared.scheduling import (
    Machine,
    MachineTypeState,
    PartitionState,
    PoolSnapshot,
    RuleSpec,
    Workload,
    schedule,
)
from corral.shared.scheduling.selectors import compile_selector

# The scheduler must place at least this many times as many workloads per second as the
# baseline; the gap grows with the pool (the baseline scans every machine per workload). Measured
# (2 shared cores): about 17x at the small size and 100x at the full one (the baseline's CPU
# time varies between 3.7 and 6 s); before the pass was reworked, 9x and 34-53x.
FLOOR = 8.0 if os.environ.get("CORRAL_BENCH_SCALE") == "small" else 50.0
RUNS = 5  # scheduler passes timed; the best counts
SEED = 20250605
PER_TYPE = 25  # machines per machine type
TEAM_RULES = (
    RuleSpec(selector="project=a", priority=5, quota=8),
    RuleSpec(selector="workload-type=job", priority=2),
)

pytestmark = pytest.mark.bench

Nodes = tuple[tuple[str, str, str | None], ...]
T = TypeVar("T")


def _cpu_timed(run: Callable[[], T]) -> tuple[T, float]:
    """(what ``run`` returns, the CPU seconds it took), the collector paused as in timeit."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.process_time()
        out = run()
        return out, time.process_time() - start
    finally:
        if was_enabled:
            gc.enable()


def _scale() -> tuple[int, int]:
    """(machine types, waiting workloads)."""
    return (40, 300) if os.environ.get("CORRAL_BENCH_SCALE") == "small" else (400, 2500)


# --------------------------------------------------------------------------- seeded pool
def build_snapshot(rng: random.Random, n_types: int, n_waiting: int) -> PoolSnapshot:
    types = []
    machines = []
    running = []
    for t in range(n_types):
        name = f"type-{t:03d}"
        types.append(
            MachineTypeState(
                machine_type=name,
                market=rng.choice(("reserved", "spot", "on_demand")),
                partitions=(
                    PartitionState(name="team", size=14, rules=TEAM_RULES),
                    PartitionState(name="any", size=rng.choice((13, 15, 18))),
                ),
            )
        )
        for i in range(PER_TYPE):
            partition = "team" if i < 12 else "any"
            owner = None
            if rng.random() < 0.6:
                owner = f"run-{t}-{i}"
                labels = {"project": rng.choice("ab")} if partition == "team" else {}
                running.append(
                    Workload(
                        workload_id=owner,
                        workload_type="service",
                        labels=labels,
                        group_order=(name,),
                        submitted_at=0.0,
                        started_at=1.0,
                        phase="running",
                    )
                )
            machines.append(
                Machine(
                    machine_id=f"m-{t:03d}-{i:02d}",
                    machine_type=name,
                    partition=partition,
                    workload_id=owner,
                    idle_since=None if owner else float(rng.randint(0, 500)),
                )
            )
    waiting = [
        Workload(
            workload_id=f"w{n:05d}",
            workload_type=rng.choice(("job", "job", "service", "workspace")),
            labels=rng.choice(({}, {"project": "a"}, {"project": "b"})),
            priority=rng.randint(0, 3),
            num_nodes=rng.choice((1, 1, 2, 3, 4)),
            group_order=tuple(rng.sample([t.machine_type for t in types], 3)),
            submitted_at=float(rng.randint(0, 10_000)),
        )
        for n in range(n_waiting)
    ]
    return PoolSnapshot(
        pool="bench",
        versions={"bench": 1},
        machine_types=tuple(types),
        machines=tuple(machines),
        workloads=(*running, *waiting),
    )


# --------------------------------------------------------------------------- naive baseline
def _decision(partition: PartitionState, w: Workload) -> tuple[int | None, int, int | None]:
    """(rule index or None, priority (0: shut out), quota) by reading the rules in order."""
    if not partition.rules:
        return None, 1, None
    for i, rule in enumerate(partition.rules):
        if compile_selector(rule.selector).matches(w.selector_labels()):
            priority = 1 if rule.priority is None else rule.priority
            if priority <= 0 or rule.quota == 0:
                return i, 0, rule.quota
            return i, priority, rule.quota
    return None, 0, None


def naive_schedule(snap: PoolSnapshot) -> list[tuple[str, Nodes]]:
    """Place waiting workloads by scanning every machine once per workload."""
    by_type = {t.machine_type: t for t in snap.machine_types}
    owners = {w.workload_id: w for w in snap.workloads}
    owner_of = {m.machine_id: m.workload_id for m in snap.machines}
    launched: dict[tuple[str, str], list[str]] = {}  # partition -> workloads given new machines

    def best_priority(w: Workload) -> int:
        return max(
            (
                _decision(p, w)[1]
                for t in dict.fromkeys(w.group_order)
                if t in by_type
                for p in by_type[t].partitions
            ),
            default=0,
        )

    queue = sorted(
        (w for w in snap.workloads if w.phase == "pending"),
        key=lambda w: (-best_priority(w), -w.priority, w.submitted_at, w.workload_id),
    )
    out = []
    for w in queue:
        wanted = [
            (t, p)
            for t in dict.fromkeys(w.group_order)
            if t in by_type
            for p in by_type[t].partitions
        ]
        keys = {(t, p.name) for t, p in wanted}
        held: dict[tuple[str, str], int] = {k: len(launched.get(k, ())) for k in keys}
        used: dict[tuple[str, str, int | None], int] = {}
        idle: dict[tuple[str, str], list[Machine]] = {k: [] for k in keys}
        for owner, k in ((o, k) for k, os_ in launched.items() if k in keys for o in os_):
            rule = _decision(_partition(by_type, k), owners[owner])[0]
            used[(*k, rule)] = used.get((*k, rule), 0) + 1
        for m in snap.machines:  # the one scan over every machine
            k = (m.machine_type, m.partition)
            if k not in keys:
                continue
            owner = owner_of[m.machine_id]
            if owner is None:
                idle[k].append(m)
                continue
            held[k] += 1
            rule = _decision(_partition(by_type, k), owners[owner])[0]
            used[(*k, rule)] = used.get((*k, rule), 0) + 1
        takes, remaining = [], w.num_nodes
        for t, p in wanted:
            rule, priority, quota = _decision(p, w)
            if remaining == 0 or priority == 0:
                continue
            room = p.size - held[(t, p.name)]
            if quota is not None:
                room = min(room, quota - used.get((t, p.name, rule), 0))
            n = max(0, min(remaining, room))
            if n:
                takes.append((t, p.name, n))
                remaining -= n
        if remaining:
            continue
        nodes = []
        for t, name, n in takes:
            pool = sorted(idle[(t, name)], key=lambda m: (m.idle_since or 0.0, m.machine_id))
            for _ in range(n):
                if pool:
                    machine = pool.pop()
                    owner_of[machine.machine_id] = w.workload_id
                    nodes.append((t, name, machine.machine_id))
                else:
                    launched.setdefault((t, name), []).append(w.workload_id)
                    nodes.append((t, name, None))
        out.append((w.workload_id, tuple(nodes)))
    return out


def _partition(by_type: dict[str, MachineTypeState], key: tuple[str, str]) -> PartitionState:
    return next(p for p in by_type[key[0]].partitions if p.name == key[1])


# --------------------------------------------------------------------------- the floor
def floor_s(snap: PoolSnapshot, plan: Any) -> float:
    """CPU seconds of the least any pass must do, best of RUNS: read each machine's four fields
    and each workload's three, and build the plan's placements and nodes unvalidated
    (``trusted``). The pass against it is a ratio the host's speed moves little."""
    from corral.shared.scheduling import trusted

    nodes = [(n.machine_type, n.partition, n.machine_id) for p in plan.placements for n in p.nodes]

    def least() -> None:
        for m in snap.machines:
            d = m.__dict__
            d["machine_type"], d["partition"], d["workload_id"], d["idle_since"]
        for w in snap.workloads:
            d = w.__dict__
            d["phase"], d["workload_id"], d["labels"]
        [trusted.node(*n) for n in nodes]
        [trusted.placement(p.workload_id, p.nodes, p.reason) for p in plan.placements]

    return min(_cpu_timed(least)[1] for _ in range(RUNS))


# --------------------------------------------------------------------------- the race
def test_scheduler_beats_naive_baseline_and_agrees() -> None:
    n_types, n_waiting = _scale()
    snap = build_snapshot(random.Random(SEED), n_types, n_waiting)
    assert len(snap.machines) == n_types * PER_TYPE

    passes = [
        _cpu_timed(lambda: schedule(snap, 1_000.0, replacement_budget=0)) for _ in range(RUNS)
    ]
    plan, first_s = passes[0]
    fast_s = min(s for _, s in passes)
    assert all(p == plan for p, _ in passes), "a pure pass gave two plans"
    fast: list[tuple[str, Any]] = [
        (p.workload_id, tuple((n.machine_type, n.partition, n.machine_id) for n in p.nodes))
        for p in plan.placements
    ]

    slow, slow_s = _cpu_timed(lambda: naive_schedule(snap))
    least_s = floor_s(snap, plan)

    assert plan.preemptions == ()
    assert len(fast) == len(slow), f"{len(fast)} placements vs the baseline's {len(slow)}"
    mismatches = [i for i, (a, b) in enumerate(zip(fast, slow, strict=True)) if a != b]
    assert not mismatches, f"first difference: {fast[mismatches[0]]} vs {slow[mismatches[0]]}"
    assert len(fast) > n_waiting // 3  # a real share of the queue is placed
    ratio = slow_s / fast_s
    print(
        f"\n{len(snap.machines):,} machines, {n_types} machine types, {n_waiting:,} waiting "
        f"(CPU time): scheduler {len(fast) / fast_s:,.0f} placements/s ({fast_s * 1000:.1f} ms, "
        f"best of {RUNS}; first pass {first_s * 1000:.1f} ms), "
        f"naive {len(slow) / slow_s:,.0f} placements/s ({slow_s:.2f} s), ratio {ratio:.1f}x; "
        f"{len(fast):,} placed, {len(plan.pending):,} left waiting; the pass is "
        f"{fast_s / least_s:.1f}x the least any pass does ({least_s * 1000:.1f} ms: reading "
        f"every machine and workload, building the plan's models), and 100,000 placements/s "
        f"asks for {len(fast) / 100_000 / least_s:.1f}x it on this host"
    )
    assert ratio >= FLOOR, f"scheduler only {ratio:.1f}x the naive baseline (floor {FLOOR}x)"
