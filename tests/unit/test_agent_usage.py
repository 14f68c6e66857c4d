"""What a node's agent reports it uses (services/agent/usage.py): CPU busy share between two
samples of /proc/stat, memory from MemTotal and MemAvailable, nothing it cannot read."""

from __future__ import annotations

from pathlib import Path

from corral.services.agent.usage import Usage


def _proc(root: Path, user: int, idle: int, total_kib: int = 1000, free_kib: int = 250) -> None:
    (root / "stat").write_text(f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0\n")
    (root / "meminfo").write_text(
        f"MemTotal:       {total_kib} kB\nMemFree:        1 kB\nMemAvailable:   {free_kib} kB\n"
    )


def test_cpu_is_the_busy_share_between_two_samples_and_memory_what_is_not_available(
    tmp_path: Path,
) -> None:
    _proc(tmp_path, user=100, idle=900)
    seen = Usage(str(tmp_path))
    first = seen.read()
    assert "cpu_percent" not in first  # one sample: no interval yet
    assert first["mem_percent"] == 75.0
    _proc(tmp_path, user=130, idle=970, free_kib=500)  # 30 busy of 100 jiffies
    again = seen.read()
    assert again["cpu_percent"] == 30.0 and again["mem_percent"] == 50.0


def test_a_machine_without_proc_reports_nothing(tmp_path: Path) -> None:
    found = Usage(str(tmp_path / "missing")).read()
    assert not {"cpu_percent", "mem_percent"} & set(found)
