"""Where one pass of the scheduler benchmark's full-size pool goes, against the least any pass
does, measured in the same process (CPU time, the collector paused, best of 9 each).

Usage: ``.venv/bin/python tests/bench/scheduler_parts.py [ROUNDS]``. Prints per round the pass,
its parts (reading the snapshot into ``PoolState``, ordering the queue, placing and building
the plan) and the floor (``test_bench_scheduler.floor_s``'s reads and models, apart).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_bench_scheduler import SEED, _cpu_timed, build_snapshot

from corral.shared.scheduling import schedule, trusted
from corral.shared.scheduling.machine_pools import queue
from corral.shared.scheduling.partitions import PoolState


def best(run: Any, times: int = 9) -> float:
    return min(_cpu_timed(run)[1] for _ in range(times))


def main(rounds: int) -> None:
    snap = build_snapshot(random.Random(SEED), 400, 2500)
    plan = schedule(snap, 1_000.0, replacement_budget=0)
    nodes = [(n.machine_type, n.partition, n.machine_id) for p in plan.placements for n in p.nodes]

    def machines() -> None:
        for m in snap.machines:
            d = m.__dict__
            d["machine_type"], d["partition"], d["workload_id"], d["idle_since"]

    def workloads() -> None:
        for w in snap.workloads:
            d = w.__dict__
            d["phase"], d["workload_id"], d["labels"]

    def models() -> None:
        [trusted.node(*n) for n in nodes]
        [trusted.placement(p.workload_id, p.nodes, p.reason) for p in plan.placements]

    for _ in range(rounds):
        full = best(lambda: schedule(snap, 1_000.0, replacement_budget=0))
        state = best(lambda: PoolState(snap))
        ordered = best(lambda: queue(PoolState(snap)))
        m, w, b = best(machines), best(workloads), best(models)
        print(
            f"pass {full * 1e3:.1f} ms = {len(plan.placements) / full:,.0f} placements/s | "
            f"reading the snapshot {state * 1e3:.1f} ms (bare reads: machines {m * 1e3:.1f}, "
            f"workloads {w * 1e3:.1f}) | queue {(ordered - state) * 1e3:.1f} ms | placing and "
            f"the plan {(full - ordered) * 1e3:.1f} ms (bare models for "
            f"{len(plan.placements)} placements, {len(nodes)} nodes: {b * 1e3:.1f}) | floor "
            f"{(m + w + b) * 1e3:.1f} ms, the pass {full / (m + w + b):.1f}x it"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
