"""What the simulator's scripts in this folder share: the held-out-shaped day (the examples'
day with the region outage of ``test_bench_sim.test_a_day_shaped_like_the_held_out_one``),
loaded with whichever ``corral`` is importable, and a CPU timer for a wrapped function."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"
REGION_OUTAGE = (
    "  - {cloud: gcp, region: us-central1, from: 15h, to: 17h, error: timeout, "
    "lose_running: true}\n"
)


def load_day(requests: int, workload_file: str = "day-workload.yaml") -> tuple[Any, Any]:
    """The scenario (with the outage) and ``requests`` generated requests of the workload."""
    from corral.services.sim.runner import load  # the tree under test's, as it is importable

    folder = Path(tempfile.mkdtemp())
    for name in os.listdir(EXAMPLES):
        (folder / name).write_bytes((EXAMPLES / name).read_bytes())
    scenario_file = folder / "day-scenario.yaml"
    scenario_file.write_text(scenario_file.read_text() + REGION_OUTAGE)
    return load(scenario_file, folder / workload_file, generate_n=requests)


def cpu_timed(
    real: Callable[..., Any], label: str, spent: MutableMapping[str, float]
) -> Callable[..., Any]:
    """``real``, adding the CPU each call takes to ``spent[label]``."""

    def run(*args: Any, **kw: Any) -> Any:
        started = time.process_time()
        try:
            return real(*args, **kw)
        finally:
            spent[label] += time.process_time() - started

    return run
