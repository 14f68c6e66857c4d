"""CLI start-up benchmark: what `corral` costs before it does anything, against a bare
interpreter (`python -c pass`) run side by side, interleaved, in the same test.

Cases: `corral --version`, `corral status --help`, and `corral status` and `corral launch
TASK` against an API address nothing listens on (start-up, settings, the task file read and
checked, the API client and one refused connection: everything the real commands do but the
answer). Reported per case: the median wall and CPU seconds
(user + system, from the child's rusage, which a loaded machine disturbs less than wall), and
the CPU as a multiple of the bare interpreter's.

The issue's target (issue 23, item 6): `corral status` and `corral launch` under 0.3 s of wall
on the shared two-core machine, where they took 0.39 s and 0.43 s, which this bench measured as
21x and 24x the bare interpreter's CPU. The same target in the bench's own terms, the CPU
multiple scaled by 0.3 / 0.39 and 0.3 / 0.43: 16x and 17x, asserted for both commands. After
the client's HTTP moved to the standard library (no httpx, httpcore, trio or anyio), its
settings were read without pydantic-settings and `corral NAME` loaded only NAME's command
module: about 9-13x and 12-15x on a machine at a load average of 6 to 16.

``CORRAL_BENCH_SCALE=small``: 5 runs per case; full: 9.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

CORRAL = str(Path(sys.executable).with_name("corral"))
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "corral --version": [CORRAL, "--version"],
    "corral status --help": [CORRAL, "status", "--help"],
    "corral status (no API)": [CORRAL, "status"],
    "corral launch (no API)": [CORRAL, "launch", "TASK"],
}
# CPU as a multiple of a bare interpreter's, at most: the 0.3 s target in the bench's terms
# (the docstring says how; before the target was met these were 21x and 24x).
TARGET_X = {"corral status (no API)": 16.0, "corral launch (no API)": 17.0}


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    assert proc.returncode in (0, 1), f"{argv}: exit {proc.returncode}"  # 1: the API refused
    return wall, usage.ru_utime + usage.ru_stime


def test_cli_start_against_a_bare_interpreter(tmp_path: Path) -> None:
    # Five at the small size: of three, one slow sample of the bare interpreter or a quick one
    # moved the ratio past its ceiling once (20.3x where runs read 14.8-15.5x).
    runs = 5 if os.environ.get("CORRAL_BENCH_SCALE") == "small" else 9
    env = {
        **os.environ,
        "CORRAL_HOME": str(tmp_path / "home"),
        "CORRAL_API_URL": "http://127.0.0.1:9",  # the discard port: nothing answers
    }
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nresources: {cloud: local, instance_type: cpu-2}\nrun: echo hi\n")
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, argv in CASES.items():  # interleaved: the machine's load hits all alike
            samples[name].append(_once([str(task) if a == "TASK" else a for a in argv], env))
    medians = {
        name: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
        for name, s in samples.items()
    }
    base_cpu = max(medians["python -c pass"][1], 1e-3)
    for name, (wall, cpu) in medians.items():
        print(f"{name:26s} wall {wall:6.3f} s   cpu {cpu:6.3f} s   {cpu / base_cpu:5.1f}x")
    over = {
        name: medians[name][1] / base_cpu
        for name, ceiling in TARGET_X.items()
        if medians[name][1] / base_cpu > ceiling
    }
    assert not over, ", ".join(f"{n} costs {x:.1f}x a bare interpreter" for n, x in over.items())
