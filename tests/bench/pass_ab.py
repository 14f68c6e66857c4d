"""A machine-pool pass's CPU against another tree's, interleaved in one process.

Two processes side by side on a shared host disagree by 20-30% on the same code (a load of
5-8 on two cores): a change worth 5% is lost in that. Here both sides run in one process,
pass by pass, in turns (ABAB, then BABA), so a slow spell falls on both: two runs agree to
about 1%.

It plays the held-out-shaped day once (``sim_pass_parts``' day; this tree's code) and
keeps ``--count`` consecutive ``train`` passes' inputs from the ``--start``-th pass the
simulator runs (the ledgers as the passes got them, copied together at the end), then runs
each of them with this tree's ``pool_passes.machine_pool_pass`` and with the other tree's
(``--against``; the modules named in ``--modules`` are loaded from its files beside this
tree's, the rest of the package shared), ``--rounds`` times, the first round a warm-up: the
memos kept between passes (answers told again, the queue's order) then stand as they do in
the day. After a settled pass, ``machine_pool_quiet_until`` is timed too, as the simulator
calls it.

Usage::

    .venv/bin/python tests/bench/pass_ab.py --against /tmp/main-tree
    .venv/bin/python tests/bench/pass_ab.py --parts
    .venv/bin/python tests/bench/pass_ab.py --against /tmp/main-tree --requests 3000 \\
        --start 6000 --count 300 --rounds 5 --modules machine_pools pool_passes quiet

``--parts`` instead times this tree's pass alone, split into its parts (each wrapped with
``time.process_time``; the parts of ``schedule`` indented), and prints no comparison.

The two sides' plans are compared as they run (every pass's plan equal, the wall-clock
field aside); it exits 1 when one differs.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import pickle
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

from held_out_day import cpu_timed, load_day

from corral.shared import scheduling
from corral.shared.scheduling import machine_pools, pool_passes, quiet
from corral.shared.sim import pool_sims
from corral.shared.sim.run import run_policy

PACKAGE = "corral.shared.scheduling"


def passes_of_the_day(requests: int, start: int, count: int) -> list[tuple[Any, ...]]:
    """The inputs of ``count`` consecutive train passes from the ``start``-th pass run."""
    scenario, workload = load_day(requests)
    real = pool_sims.machine_pool_pass
    kept: list[tuple[Any, ...]] = []
    seen = [0]

    def counted(ledger: Any, types: Any, now: float, knobs: Any, **kw: Any) -> Any:
        if ledger.pool == "train":
            seen[0] += 1
            if start <= seen[0] < start + count:
                kept.append((ledger, types, now, knobs, kw["rebalance"]))
        return real(ledger, types, now, knobs, **kw)

    pool_sims.machine_pool_pass = counted  # type: ignore[assignment]
    try:
        run_policy(scenario, workload, "corral")
    finally:
        pool_sims.machine_pool_pass = real
    # Copied together: a workload the passes share stays one object, as the memos kept
    # between passes find it in the day (a pass's ledger is not changed once it ran).
    copied: list[tuple[Any, ...]] = pickle.loads(pickle.dumps(kept))
    return copied


def other_side(tree: Path, names: list[str]) -> dict[str, ModuleType]:
    """``names`` (modules of the scheduling package) loaded from ``tree``'s files, in order:
    while each runs, the ones loaded before stand in for this tree's (so its relative imports
    find them); this tree's are put back after."""
    loaded: dict[str, ModuleType] = {}
    saved = {n: sys.modules[f"{PACKAGE}.{n}"] for n in names}
    try:
        for name in names:
            path = tree / "shared" / "scheduling" / f"{name}.py"
            spec = importlib.util.spec_from_file_location(f"{PACKAGE}.{name}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            setattr(scheduling, name, module)
            spec.loader.exec_module(module)
            loaded[name] = module
    finally:
        for name, module in saved.items():
            sys.modules[f"{PACKAGE}.{name}"] = module
            setattr(scheduling, name, module)
    return loaded


def _new_id(node: Any, wid: str, index: int) -> str:
    return f"m-{wid}-{index}"


def _plan_fields(plan: Any) -> dict[str, Any]:
    return {k: v for k, v in plan.__dict__.items() if k != "computed_at"}


PARTS = (
    (pool_passes, "snapshot_of", "snapshot_of"),
    (pool_passes, "seen_at", "seen_at (setbacks)"),
    (pool_passes, "_narrowed_all", "_narrowed_all"),
    (pool_passes, "schedule", "schedule"),
    (machine_pools, "PoolState", "  PoolState"),
    (machine_pools, "ordered", "  the queue's order"),
    (machine_pools, "_decide", "  _decide"),
    (machine_pools, "plan_replacements", "  replacements"),
    (machine_pools, "plan_machine_reaps", "  reaps"),
    (pool_passes, "_told_of_setbacks", "_told_of_setbacks"),
    (pool_passes, "commit", "commit"),
)


def parts(passes: list[tuple[Any, ...]], rounds: int) -> None:
    """This tree's passes, whole and in parts (CPU a pass, the first round a warm-up)."""
    spent: dict[str, float] = defaultdict(float)

    saved = [(module, name, getattr(module, name)) for module, name, _ in PARTS]
    for module, name, label in PARTS:
        setattr(module, name, cpu_timed(getattr(module, name), label, spent))
    try:
        for round_ in range(rounds):
            gc.collect()
            gc.disable()
            for ledger, types, now, knobs, rebalance in passes:
                started = time.process_time()
                after, plan = pool_passes.machine_pool_pass(
                    ledger, types, now, knobs, rebalance=rebalance, new_id=_new_id
                )
                whole = time.process_time() - started
                if quiet.machine_pool_settled(ledger, after, plan):
                    started = time.process_time()
                    quiet.machine_pool_quiet_until(after, types, now, knobs, rebalance=rebalance)
                    spent["quiet_until (after a settled pass)"] += time.process_time() - started
                spent["the whole pass"] += whole
            gc.enable()
            if round_ == 0:
                spent.clear()
    finally:
        for module, name, real in saved:
            setattr(module, name, real)
    n = len(passes) * (rounds - 1)
    print(f"{len(passes)} consecutive train passes, CPU a pass ({rounds - 1} rounds):")
    for label, total in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {label:<36} {total / n * 1e6:7.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="the other tree")
    parser.add_argument("--parts", action="store_true", help="this tree's pass in parts")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--start", type=int, default=6000, help="the first train pass kept")
    parser.add_argument("--count", type=int, default=300, help="consecutive passes kept")
    parser.add_argument("--rounds", type=int, default=5, help="the first one a warm-up")
    parser.add_argument("--modules", nargs="+", default=["machine_pools", "pool_passes"])
    args = parser.parse_args()
    passes = passes_of_the_day(args.requests, args.start, args.count)
    if not passes:
        raise SystemExit("no pass kept: the day ran fewer train passes than --start")
    if args.parts:
        parts(passes, args.rounds)
        return
    if args.against is None:
        raise SystemExit("--against (or --parts) is needed")
    other = other_side(args.against, args.modules)
    sides = {
        "this": (pool_passes.machine_pool_pass, quiet.machine_pool_quiet_until),
        "against": (
            (other.get("pool_passes") or pool_passes).machine_pool_pass,
            (other.get("quiet") or quiet).machine_pool_quiet_until,
        ),
    }
    settled = quiet.machine_pool_settled
    cpu = dict.fromkeys(sides, 0.0)
    differ = 0
    for round_ in range(args.rounds):
        gc.collect()
        gc.disable()
        turns = ("this", "against") if round_ % 2 else ("against", "this")
        for ledger, types, now, knobs, rebalance in passes:
            plans = []
            for side in turns:
                run, quiet_until = sides[side]
                started = time.process_time()
                after, plan = run(ledger, types, now, knobs, rebalance=rebalance, new_id=_new_id)
                if settled(ledger, after, plan):
                    quiet_until(after, types, now, knobs, rebalance=rebalance)
                if round_:
                    cpu[side] += time.process_time() - started
                plans.append(_plan_fields(plan))
            differ += plans[0] != plans[1]
        gc.enable()
    n = len(passes) * (args.rounds - 1)
    waiting = sum(sum(w.phase == "pending" for w in p[0].workloads.values()) for p in passes) / len(
        passes
    )
    print(
        f"{len(passes)} consecutive train passes of the {args.requests}-request day from the "
        f"{args.start}th (mean {waiting:.0f} waiting), {args.rounds - 1} rounds timed: this "
        f"{cpu['this'] / n * 1e6:.0f} us a pass, against {cpu['against'] / n * 1e6:.0f} us "
        f"({cpu['against'] / cpu['this']:.3f}x); plans that differ: {differ}"
    )
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
