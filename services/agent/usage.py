"""What a node's machine is using, for its heartbeat: CPU and memory from ``/proc``, GPUs from
``nvidia-smi`` when the machine has it. The console draws these per node (Ray's dashboard
shows the same per node: CPU, memory, GPU utilisation and GPU memory).

CPU is the share of time not idle across every CPU since the last sample (the first sample
has no interval: none). A machine without ``/proc`` (not Linux) reports nothing; one without
``nvidia-smi`` reports no GPU fields. The local cloud's machines share their host: each
reports the host's numbers. Standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

GPU_QUERY = "utilization.gpu,memory.used,memory.total"
GPU_EVERY_S = 5.0  # nvidia-smi costs tens of milliseconds: asked at most this often


class Usage:
    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._last: tuple[int, int] | None = None  # (busy, total) jiffies at the last sample
        self._gpu: dict[str, Any] = {}
        self._gpu_at = 0.0
        self._smi = shutil.which("nvidia-smi")

    def read(self) -> dict[str, Any]:
        """``cpu_percent``, ``mem_percent`` (and ``gpu_percent``, ``gpu_mem_percent``), each
        rounded to a tenth; a field it cannot read is left out."""
        out: dict[str, Any] = {}
        cpu = self._cpu()
        if cpu is not None:
            out["cpu_percent"] = cpu
        mem = self._mem()
        if mem is not None:
            out["mem_percent"] = mem
        out.update(self._gpus())
        return out

    def _cpu(self) -> float | None:
        try:
            with open(f"{self.proc}/stat") as fh:
                fields = [int(x) for x in fh.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])  # guest time is counted in user already
        last, self._last = self._last, (total - idle, total)
        if last is None or total <= last[1]:
            return None
        return round(100.0 * (total - idle - last[0]) / (total - last[1]), 1)

    def _mem(self) -> float | None:
        seen: dict[str, int] = {}
        try:
            with open(f"{self.proc}/meminfo") as fh:
                for line in fh:
                    name, _, rest = line.partition(":")
                    if name in ("MemTotal", "MemAvailable"):
                        seen[name] = int(rest.split()[0])
        except (OSError, ValueError, IndexError):
            return None
        total, free = seen.get("MemTotal"), seen.get("MemAvailable")
        if not total or free is None:
            return None
        return round(100.0 * (total - free) / total, 1)

    def _gpus(self) -> dict[str, Any]:
        """Every GPU's utilisation and memory, averaged over the machine's GPUs."""
        if self._smi is None or time.monotonic() - self._gpu_at < GPU_EVERY_S:
            return self._gpu
        self._gpu_at = time.monotonic()
        try:
            done = subprocess.run(
                [self._smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=5, check=False,
            )  # fmt: skip
            rows = [[float(x) for x in line.split(",")] for line in done.stdout.splitlines()]
        except (OSError, ValueError, subprocess.TimeoutExpired):
            rows = []
        if not rows or any(len(r) != 3 or r[2] <= 0 for r in rows):
            self._gpu = {}
            return self._gpu
        self._gpu = {
            "gpu_count": len(rows),
            "gpu_percent": round(sum(r[0] for r in rows) / len(rows), 1),
            "gpu_mem_percent": round(100.0 * sum(r[1] for r in rows) / sum(r[2] for r in rows), 1),
        }
        return self._gpu
