"""Where the held-out-shaped day's machine-pool passes go: how many passes, how long their
queues are, and one pass's parts (CPU time, the collector paused, best of 7 each).

Usage: ``.venv/bin/python tests/bench/sim_pass_parts.py [REQUESTS]`` (default 3,000). Plays
the day of ``test_bench_sim.test_a_day_shaped_like_the_held_out_one`` once, counting each
pool's passes and the workloads they found waiting; then takes the pass of the ``train`` pool
that saw the most workloads and times it again and again, whole and in parts, as
``pool_passes.machine_pool_pass`` runs them. Replayed, a pass finds every answer it keeps
between passes already kept: these are the parts of a pass over a queue that did not change.
The counts are read through a wrapper of the pass the simulator calls (its answers are
returned as they are). The queue's order is kept between passes (``queue_order``): it is
timed as a replayed pass finds it (nothing new), with one waiting workload another object
each time, and worked out afresh (as before it was kept); the day's count says how many
workloads the train pool's passes keyed afresh.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from held_out_day import load_day

from corral.shared.scheduling import pool_passes, queue_order
from corral.shared.scheduling.fallback import seen_at
from corral.shared.scheduling.ledger import PoolLedger, commit, snapshot_of
from corral.shared.scheduling.machine_pools import _queue, schedule
from corral.shared.scheduling.partitions import PoolState
from corral.shared.scheduling.quiet import machine_pool_quiet_until
from corral.shared.sim import pool_sims
from corral.shared.sim.run import run_policy


def best_us(run: Callable[[], Any], times: int = 7, loops: int = 50) -> float:
    """The least CPU a call of ``run`` took, in microseconds (collector paused)."""
    run()
    out = []
    for _ in range(times):
        gc.collect()
        gc.disable()
        try:
            started = time.process_time()
            for _ in range(loops):
                run()
            out.append((time.process_time() - started) / loops)
        finally:
            gc.enable()
    return min(out) * 1e6


def main(requests: int) -> None:
    scenario, workload = load_day(requests)

    passes: dict[str, list[int]] = defaultdict(list)  # pool -> waiting workloads per pass
    largest: list[Any] = [None, -1]
    real = pool_passes.machine_pool_pass

    def counted(ledger: PoolLedger, types: Any, now: float, knobs: Any, **kw: Any) -> Any:
        waiting = sum(w.phase == "pending" for w in ledger.workloads.values())
        passes[ledger.pool].append(waiting)
        if ledger.pool == "train" and waiting > largest[1]:
            largest[:] = [(ledger, types, now, knobs), waiting]
        return real(ledger, types, now, knobs, **kw)

    keyed: list[int] = []  # per train pass's queue order: the workloads keyed afresh
    real_afresh = queue_order._afresh

    def afresh(state: PoolState, waiting: list[Any], *rest: Any) -> Any:
        if state.snapshot.pool == "train":
            keyed.append(len(waiting))
        return real_afresh(state, waiting, *rest)

    pool_sims.machine_pool_pass = counted  # type: ignore[assignment]
    queue_order._afresh = afresh  # type: ignore[assignment]
    try:
        started = time.process_time()
        run = run_policy(scenario, workload, "corral")
        day_s = time.process_time() - started
    finally:
        pool_sims.machine_pool_pass = real
        queue_order._afresh = real_afresh  # type: ignore[assignment]
    print(f"{requests} requests: {day_s:.1f} s CPU with the counting, {run.events} events")
    for pool, waiting in passes.items():
        print(
            f"  {pool}: {len(waiting)} passes run, waiting workloads per pass mean "
            f"{statistics.mean(waiting):.0f}, max {max(waiting)}"
        )

    print(
        f"  train's queue order: {sum(keyed)} workloads keyed afresh over the day "
        f"({sum(keyed) / max(1, len(passes['train'])):.1f} a pass; the passes found "
        f"{sum(passes['train'])} waiting)"
    )
    ledger, types, now, knobs = largest[0]

    def new_id(node: Any, wid: str, index: int) -> str:
        return f"m-{wid}-{index}"

    after, plan = real(ledger, types, now, knobs, rebalance=False, new_id=new_id)
    snap = snapshot_of(ledger, types)
    changed, backing_off, gone = seen_at(ledger.workloads, ledger.setbacks, now)
    snap = snap.model_copy(
        update={"workloads": pool_passes._narrowed_all(ledger, snap.workloads, changed)}
    )
    kept = tuple(w for w in snap.workloads if w.workload_id not in backing_off)
    seen = snap.model_copy(update={"workloads": kept})
    bare = schedule(seen, now, min_runtime_s=knobs.min_runtime_s, replacement_budget=0)
    # The same pass with one waiting workload another object each time (as after a setback):
    # the kept order lets one out and puts one in.
    first = next(w for w in kept if w.phase == "pending")
    again = first.model_copy()
    one_new = itertools.cycle(
        [
            seen,
            seen.model_copy(
                update={"workloads": tuple(again if w is first else w for w in seen.workloads)}
            ),
        ]
    )
    parts = {
        "the whole pass": lambda: real(ledger, types, now, knobs, rebalance=False, new_id=new_id),
        "snapshot_of": lambda: snapshot_of(ledger, types),
        "seen_at (setbacks)": lambda: seen_at(ledger.workloads, ledger.setbacks, now),
        "schedule": lambda: schedule(
            seen, now, min_runtime_s=knobs.min_runtime_s, replacement_budget=0
        ),
        "  PoolState": lambda: PoolState(seen),
        "  PoolState + _queue": lambda: _queue(PoolState(seen)),
        "  PoolState + _queue, 1 new": lambda: _queue(PoolState(next(one_new))),
        "  PoolState + _queue afresh": lambda: _queue(PoolState(seen), keep=False),
        "_told_of_setbacks": lambda: pool_passes._told_of_setbacks(bare, backing_off, gone),
        "commit": lambda: commit(ledger, plan, types, now, new_id),
        "quiet_until": lambda: machine_pool_quiet_until(after, types, now, knobs, rebalance=False),
    }
    print(
        f"the train pool's pass at {now:.0f} s: {len(ledger.workloads)} workloads, "
        f"{largest[1]} waiting, {len(backing_off)} backing off, {len(kept)} not held back, "
        f"{len(plan.placements)} placed"
    )
    for name, part in parts.items():
        print(f"  {name:<24} {best_us(part):8.0f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
