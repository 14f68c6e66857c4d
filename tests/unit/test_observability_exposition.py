"""The folders of Prometheus's multiprocess mode: one per worker, named after it, left ones
removed; processes that died without a word are marked dead (live gauges out, counts kept)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from corral.services.observability.exposition import DIR_PREFIX, _Multiprocess, worker_environment
from corral.services.settings import Settings


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_a_worker_without_a_port_gets_nothing(tmp_path: Path) -> None:
    assert worker_environment(Settings(metrics_dir=tmp_path), "schedule", None) == {}
    assert list(tmp_path.iterdir()) == []


def test_each_worker_gets_a_fresh_folder_and_left_ones_go(tmp_path: Path) -> None:
    left = tmp_path / f"{DIR_PREFIX}provision-{_dead_pid()}-abc"
    alive = tmp_path / f"{DIR_PREFIX}schedule-{os.getpid()}-def"
    other = tmp_path / "someone-elses"
    for folder in (left, alive, other):
        folder.mkdir()
    env = worker_environment(Settings(metrics_dir=tmp_path), "provision", 9808)
    folder = Path(env["PROMETHEUS_MULTIPROC_DIR"])
    assert env["CORRAL_METRICS_PORT"] == "9808"
    assert folder.parent == tmp_path and folder.name.startswith(
        f"{DIR_PREFIX}provision-{os.getpid()}-"
    )
    assert list(folder.iterdir()) == []
    assert not left.exists() and alive.exists() and other.exists()


def test_a_killed_process_loses_its_live_gauges_not_its_counts(tmp_path: Path) -> None:
    dead, me = _dead_pid(), os.getpid()
    for name in (f"gauge_livesum_{dead}.db", f"counter_{dead}.db", f"gauge_livesum_{me}.db"):
        (tmp_path / name).write_bytes(b"")
    _Multiprocess(tmp_path).sweep()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"counter_{dead}.db",
        f"gauge_livesum_{me}.db",
    ]
