#!/usr/bin/env python3
"""The launch-path benchmarks of two revisions side by side, in turns, in the same hour.

    .venv/bin/python ops/bench_side_by_side.py                      # 4d149f5 against this tree
    .venv/bin/python ops/bench_side_by_side.py --before main --rounds 3 --scale full
    .venv/bin/python ops/bench_side_by_side.py --only launch_cost,failover --json out.json

"Before" is a git revision, checked out with ``git worktree add --detach`` in a temporary
folder (removed at the end unless ``--keep``); "after" is this working tree as it is, or
another revision (``--after``). Both run under this venv: each side's ``shared/``,
``services/`` and ``workers/`` are symlinked as ``corral/...`` into a folder put first on
``PYTHONPATH`` (as ``make typecheck`` does for mypy), which every process the benchmarks start
inherits (the API, workers, beat, the local cloud's launcher and agents). A side's modules are
compiled to bytecode first, as ``make setup`` does, so neither pays for compiling at each start.

The instrument is one: the benchmark files of *this* checkout (``tests/bench/``, with its
``tests/harness.py``) run against each side's code, so a change to a benchmark's counting
cannot pass for a change of the code. Each round runs every chosen benchmark once for each side,
before then after in odd rounds and after then before in even ones (A B, B A, ...), so slow
spells of the shared host, and whatever a run's place in its pair brings, fall on both. A run
of one revision against itself (``--before X --after X``) shows how far the host moves a
figure: on 2026-12-08, 0.88-1.04 of after/before over four rounds. The table gives,
per figure, the median of each side's runs (every run in brackets), after / before, the target
and whether the after median meets it; "worse" marks a figure whose after median is past every
before run in the bad direction.

Standard library only. Exit code: 0 when every benchmark run ran (a figure off target is
reported, not an error), 1 when a run printed no figure (its output is kept under ``--logs``),
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("shared", "services", "workers")
DEFAULT_BEFORE = "4d149f5"  # the first commit of issue #48's work
RUN_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Figure:
    """One number a benchmark prints: ``pattern``'s first group, as a float (commas dropped).
    ``lower``: whether less is better. ``target``: the bound the after side should meet."""

    name: str
    pattern: str
    lower: bool = True
    target: float | None = None

    def read(self, text: str) -> float | None:
        found = re.search(self.pattern, text)
        return None if found is None else float(found.group(1).replace(",", ""))


@dataclass(frozen=True)
class Bench:
    """A benchmark: the pytest node id(s) at each scale and the figures its output carries."""

    name: str
    full: str
    small: str
    figures: tuple[Figure, ...]


_BOOTS = "tests/bench/test_bench_boots.py::test_time_to_running_is_the_boot_not_the_worker_slots"
BENCHES = {
    b.name: b
    for b in (
        Bench(
            "launch_cost",
            "tests/bench/test_bench_launch_cost.py",
            "tests/bench/test_bench_launch_cost.py",
            (
                Figure(
                    "launch: control-plane CPU ms/launch",
                    r"control-plane CPU ([\d.]+) ms per launch \(target",
                    target=5.0,
                ),
                Figure(
                    "launch: Redis commands/launch",
                    r"Redis (-?[\d.]+) commands per launch",
                    target=40.0,
                ),
                Figure(
                    "launch: Celery task messages/launch",
                    r"Celery task messages (-?[\d.]+) per launch",
                    target=3.0,
                ),
                Figure(
                    "launch: reference loop us (host speed)", r"reference loop .*?: ([\d.]+) us"
                ),
            ),
        ),
        Bench(
            "boots",
            f"{_BOOTS}[1000-10.0]",
            f"{_BOOTS}[50-4.0]",
            (
                Figure("boots: all RUNNING, x the boot", r"= ([\d.]+) x the boot", target=1.3),
                Figure(
                    "boots: control-plane CPU ms/launch",
                    r"control-plane CPU ([\d.]+) ms per launch =",
                    target=5.0,
                ),
                Figure(
                    "boots: CPU per launch in no-op tasks", r"= ([\d.]+) no-op tasks", target=3.0
                ),
                Figure(
                    "boots: no-op task CPU ms (host speed)", r"no-op tasks \(([\d.]+) ms each\)"
                ),
            ),
        ),
        Bench(
            "failover",
            "tests/bench/test_bench_failover.py",
            "tests/bench/test_bench_failover.py",
            (
                Figure(
                    "failover: overhead ms per failed zone",
                    r"Corral's own overhead (-?[\d.]+) ms",
                    target=1.0,
                ),
                Figure("failover: provider ms per zone", r"the provider took ([\d.]+) ms"),
            ),
        ),
        Bench(
            "failover_cpu",
            "tests/bench/test_bench_failover_cpu.py",
            "tests/bench/test_bench_failover_cpu.py",
            (
                Figure(
                    "failover CPU: ms per failed zone (in process)",
                    r"failover CPU: (-?[\d.]+) ms per failed zone",
                    target=1.0,
                ),
                Figure(
                    "failover CPU: runtime ms per launch", r"a launch ([\d.]+) ms of the runtime"
                ),
            ),
        ),
        Bench(
            "local_cpu",
            "tests/bench/test_bench_local_launch_cpu.py",
            "tests/bench/test_bench_local_launch_cpu.py",
            (
                Figure(
                    "local launch CPU: runtime ms/launch (in process)",
                    r"local launch CPU: ([\d.]+) ms of the runtime per launch",
                ),
                Figure("local launch CPU: admission ms", r"admission with its attempt ([\d.]+)"),
                Figure("local launch CPU: boot watch ms", r", boot watch ([\d.]+);"),
            ),
        ),
        Bench(
            "api_submit",
            "tests/bench/test_bench_api_submit_cpu.py",
            "tests/bench/test_bench_api_submit_cpu.py",
            (
                Figure(
                    "API submit CPU: ms per submit served (in process)",
                    r"API submit CPU: ([\d.]+) ms per submit",
                ),
                Figure("API submit CPU: its send ms", r"its admission's send ([\d.]+) ms"),
            ),
        ),
        Bench(
            "api_http",
            "tests/bench/test_bench_api_http.py",
            "tests/bench/test_bench_api_http.py",
            (
                Figure("API over HTTP: CPU ms per /healthz", r"([\d.]+) ms of the API's CPU per"),
                Figure("API over HTTP: CPU ms per submit", r"call\), ([\d.]+) ms per submit"),
            ),
        ),
        Bench(
            "pool_pass",
            "tests/bench/test_bench_pool_pass.py",
            "tests/bench/test_bench_pool_pass.py",
            (Figure("pool pass: ms per pass", r"waiting: ([\d.]+) ms; naive"),),
        ),
        Bench(
            "scheduler",
            "tests/bench/test_bench_scheduler.py",
            "tests/bench/test_bench_scheduler.py",
            (Figure("scheduler: placements/s", r"scheduler ([\d,]+) placements/s", lower=False),),
        ),
    )
}


@dataclass
class Side:
    """One side of the comparison: its label, its revision and the folder on PYTHONPATH."""

    label: str
    rev: str
    tree: Path
    path_dir: Path
    values: dict[str, list[float]] = field(default_factory=dict)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _package_dir(tree: Path, into: Path) -> Path:
    """``into/corral/{shared,services,workers}`` as symlinks to ``tree``'s folders."""
    pkg = into / "corral"
    pkg.mkdir(parents=True, exist_ok=True)
    for folder in FOLDERS:
        (pkg / folder).symlink_to(tree / folder, target_is_directory=True)
    return into


def _side(label: str, rev: str | None, scratch: Path, made: list[Path]) -> Side:
    """A side at ``rev`` (None: this working tree as it is)."""
    if rev is None:
        tree, shown = ROOT, f"{_git('rev-parse', '--short', 'HEAD')}+worktree"
    else:
        sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
        tree = scratch / label
        _git("worktree", "add", "--detach", str(tree), sha)
        made.append(tree)
        shown = f"{rev} ({sha[:9]})"
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *FOLDERS],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    return Side(label, shown, tree, _package_dir(tree, scratch / f"{label}-path"))


def _run(bench: Bench, side: Side, scale: str, logs: Path, n: int) -> dict[str, float | None]:
    """One run of ``bench`` against ``side``'s code; its figures (None: not printed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(side.path_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["CORRAL_BENCH_SCALE"] = scale
    node = bench.small if scale == "small" else bench.full
    argv = [sys.executable, "-m", "pytest", node, "-m", "bench", "-q", "-s", "-p", "no:randomly"]
    argv += ["-p", "no:cacheprovider", "--timeout", str(int(RUN_TIMEOUT_S))]
    started = time.monotonic()
    # Its own process group: a Ctrl-C here is passed on as one SIGINT to pytest, whose
    # benchmark then stops what it started (its `finally`), rather than killing pytest alone.
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S + 60)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _stop(proc)
        out, rc = f"{proc.communicate()[0]}\n(timed out)", -1
    except KeyboardInterrupt:
        _stop(proc)
        raise
    log = logs / f"{n:02d}-{bench.name}-{side.label}.log"
    log.write_text(out)
    figures = {f.name: f.read(out) for f in bench.figures}
    took = time.monotonic() - started
    shown = ", ".join(f"{k.split(': ', 1)[1]} {v:g}" for k, v in figures.items() if v is not None)
    print(f"  {bench.name:<12} {side.label:<6} rc={rc} {took:5.0f}s  {shown or '-'}  ({log})")
    return figures


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGINT to the run's process group, then SIGKILL if it has not ended within a minute."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _row(fig: Figure, before: list[float], after: list[float]) -> list[str]:
    def show(vals: list[float]) -> str:
        if not vals:
            return "-"
        each = ", ".join(f"{v:g}" for v in vals)
        return f"{statistics.median(vals):g} [{each}]"

    ratio = "-"
    mark = ""
    if before and after:
        b, a = statistics.median(before), statistics.median(after)
        ratio = f"{a / b:.2f}" if b else "-"
        past = a > max(before) if fig.lower else a < min(before)
        mark = "worse" if past else ""
    target = "-"
    if fig.target is not None:
        op = "<=" if fig.lower else ">="
        target = f"{op} {fig.target:g}"
        if after:
            a = statistics.median(after)
            met = a <= fig.target if fig.lower else a >= fig.target
            mark = ", ".join(filter(None, [mark, "met" if met else "not met"]))
    return [fig.name, show(before), show(after), ratio, target, mark]


def _table(rows: list[list[str]], heads: list[str]) -> str:
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join([line, rule, *body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--before", default=DEFAULT_BEFORE, help=f"a revision (default {DEFAULT_BEFORE})"
    )
    parser.add_argument("--after", default=None, help="a revision (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side (default 2)")
    parser.add_argument(
        "--scale",
        choices=("small", "full"),
        default="small",
        help="CORRAL_BENCH_SCALE: small (CI's sizes) or full (boots: 1,000)",
    )
    parser.add_argument(
        "--only",
        default=",".join(BENCHES),
        help=f"comma-separated, of {', '.join(BENCHES)} (default: all)",
    )
    parser.add_argument("--logs", default=None, help="where each run's output is kept")
    parser.add_argument("--json", default=None, help="write every run's figures here")
    parser.add_argument("--keep", action="store_true", help="keep the checked-out revisions")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown or args.rounds < 1:
        what = f"unknown benchmark(s) {', '.join(unknown)}" if unknown else "--rounds below 1"
        print(f"bench_side_by_side: {what} (benchmarks: {', '.join(BENCHES)})", file=sys.stderr)
        return 2
    try:
        _git("rev-parse", "--verify", f"{args.before}^{{commit}}")
        if args.after is not None:
            _git("rev-parse", "--verify", f"{args.after}^{{commit}}")
    except subprocess.CalledProcessError:
        print(
            f"bench_side_by_side: no such revision: {args.before} / {args.after}", file=sys.stderr
        )
        return 2

    scratch = Path(tempfile.mkdtemp(prefix="corral-side-by-side-"))
    logs = Path(args.logs) if args.logs else scratch / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    missing = 0
    try:
        sides = [
            _side("before", args.before, scratch, made),
            _side("after", args.after, scratch, made),
        ]
        print(
            f"before: {sides[0].rev}; after: {sides[1].rev}; scale {args.scale}; "
            f"{args.rounds} round(s) of {', '.join(chosen)}; logs in {logs}"
        )
        n = 0
        for round_no in range(args.rounds):
            print(f"round {round_no + 1}:")
            # The order turns each round (A B, then B A): a run's place in a pair (the host's
            # caches and Redis's, warm or cold, after the other side) falls on both sides.
            order = sides if round_no % 2 == 0 else sides[::-1]
            for name in chosen:
                for side in order:
                    n += 1
                    for fig, value in _run(BENCHES[name], side, args.scale, logs, n).items():
                        if value is None:
                            missing += 1
                        else:
                            side.values.setdefault(fig, []).append(value)
    finally:
        if not args.keep:
            for tree in made:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                    capture_output=True,
                )
    before, after = sides
    rows = [
        _row(fig, before.values.get(fig.name, []), after.values.get(fig.name, []))
        for name in chosen
        for fig in BENCHES[name].figures
    ]
    print()
    print(
        _table(
            rows,
            ["figure", f"before {before.rev}", f"after {after.rev}", "after/before", "target", ""],
        )
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "before": before.rev,
                    "after": after.rev,
                    "scale": args.scale,
                    "runs": {"before": before.values, "after": after.values},
                },
                indent=1,
            )
        )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
