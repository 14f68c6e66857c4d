"""One simulated day as sorted JSON, and two trees' days side by side (issue #46 item 4).

A change that makes the simulator faster must not change its decisions: this plays a day
with one tree's code and writes what it decided (figures, series, event count; no wall
time) as JSON with sorted keys, and with ``--against`` plays the same day with a second tree
at the same time (two processes at once, so the shared host's load falls on both) and says
whether the two are identical and how much CPU (``time.process_time``) each took.

Usage::

    .venv/bin/python tests/bench/sim_day_json.py 3000                       # this tree alone
    .venv/bin/python tests/bench/sim_day_json.py 3000 --split   # and where its CPU went
    .venv/bin/python tests/bench/sim_day_json.py 1000 --policy greedy --day bench
    .venv/bin/python tests/bench/sim_day_json.py 3000 --against /tmp/main-tree
    .venv/bin/python tests/bench/sim_day_json.py 1000 --against /tmp/main-tree --all

``--day held-out`` (the default) is ``day-workload.yaml`` on ``day-scenario.yaml`` with the
region outage of ``test_bench_sim.test_a_day_shaped_like_the_held_out_one``; ``--day bench``
is ``bench-workload.yaml`` on the same scenario. ``--all`` runs every policy on both days,
one pair of processes at a time. A tree is any checkout of this repository (``git worktree
add --detach``): its ``shared/``, ``services/`` and ``workers/`` are symlinked as
``corral/...`` into a folder put first on ``PYTHONPATH``, and it runs under this venv.
Exits 1 when two days differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from held_out_day import cpu_timed, load_day

ROOT = Path(__file__).resolve().parents[2]
DAYS = {"held-out": "day-workload.yaml", "bench": "bench-workload.yaml"}
POLICIES = ("corral", "corral-wide-blocks", "greedy", "oracle", "static")
FOLDERS = ("shared", "services", "workers")


SPLIT = (
    ("machine_pool_pass", "machine-pool passes"),
    ("machine_pool_quiet_until", "machine-pool quiet times"),
    ("determined_pass", "Determined passes"),
    ("determined_quiet_until", "Determined quiet times"),
)


def play(requests: int, day: str, policy: str, out: Path, split: bool = False) -> None:
    """Play the day with whichever ``corral`` is importable; write its JSON to ``out``.
    ``split``: print the CPU the pool passes and the machine pools' sync took in it."""
    from corral.shared.sim import pool_sims
    from corral.shared.sim.run import run_policy

    spent = dict.fromkeys([label for _, label in SPLIT] + ["machine-pool syncs"], 0.0)

    if split:  # this process only: the names pool_sims calls, wrapped
        for name, label in SPLIT:
            setattr(pool_sims, name, cpu_timed(getattr(pool_sims, name), label, spent))
        sync = pool_sims.MachinePoolSim.sync
        pool_sims.MachinePoolSim.sync = cpu_timed(sync, "machine-pool syncs", spent)  # type: ignore[method-assign]

    scenario, workload = load_day(requests, DAYS[day])
    started, cpu_started = time.perf_counter(), time.process_time()
    run = run_policy(scenario, workload, policy)
    cpu_s, wall_s = time.process_time() - cpu_started, time.perf_counter() - started
    decided = {"figures": run.figures, "series": run.series, "events": run.events}
    out.write_text(json.dumps(decided, sort_keys=True, default=str))
    if split:
        for label, total in spent.items():
            print(f"  {label:<26} {total:7.1f} s CPU ({total / cpu_s:.0%})")
    print(json.dumps({"cpu_s": round(cpu_s, 2), "wall_s": round(wall_s, 1), "events": run.events}))


def _path_dir(tree: Path) -> Path:
    into = Path(tempfile.mkdtemp(prefix="simday-path-"))
    (into / "corral").mkdir()
    for folder in FOLDERS:
        (into / "corral" / folder).symlink_to(tree.resolve() / folder, target_is_directory=True)
    return into


def _start(tree: Path, requests: int, day: str, policy: str, out: Path) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(_path_dir(tree)), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    argv = [sys.executable, __file__, str(requests), "--day", day, "--policy", policy]
    argv += ["--play", str(out)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)


def compare(requests: int, day: str, policy: str, against: Path) -> bool:
    """This tree's day and ``against``'s, played at once; True when identical."""
    scratch = Path(tempfile.mkdtemp(prefix="simday-"))
    runs = {
        "this": _start(ROOT, requests, day, policy, scratch / "this.json"),
        "against": _start(against, requests, day, policy, scratch / "against.json"),
    }
    cpu = {}
    for label, proc in runs.items():
        stdout, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{label}: exited {proc.returncode}")
        cpu[label] = json.loads(stdout.strip().splitlines()[-1])
    same = (scratch / "this.json").read_text() == (scratch / "against.json").read_text()
    ratio = cpu["against"]["cpu_s"] / max(cpu["this"]["cpu_s"], 1e-9)
    print(
        f"{day} {requests} {policy}: {'identical' if same else 'DIFFERENT'} "
        f"({cpu['this']['events']} events); CPU this {cpu['this']['cpu_s']} s, "
        f"against {cpu['against']['cpu_s']} s ({ratio:.2f}x); wall "
        f"{cpu['this']['wall_s']} / {cpu['against']['wall_s']} s",
        flush=True,
    )
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("requests", type=int, nargs="?", default=1000)
    parser.add_argument("--day", choices=sorted(DAYS), default="held-out")
    parser.add_argument("--policy", choices=POLICIES, default="corral")
    parser.add_argument("--against", type=Path, help="a second tree, played at the same time")
    parser.add_argument("--all", action="store_true", help="every policy on both days")
    parser.add_argument("--split", action="store_true", help="alone: where the CPU went")
    parser.add_argument("--play", type=Path, help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.play is not None:
        play(args.requests, args.day, args.policy, args.play)
        return
    if args.against is None:
        out = Path(tempfile.mkdtemp(prefix="simday-")) / "day.json"
        play(args.requests, args.day, args.policy, out, args.split)
        print(out)
        return
    pairs = [(d, p) for d in DAYS for p in POLICIES] if args.all else [(args.day, args.policy)]
    results = [compare(args.requests, d, p, args.against) for d, p in pairs]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
