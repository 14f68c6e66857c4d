"""Ray's own autoscaler on the benchmark's cluster: the time from a task's submission to it
running on a freshly launched worker, with Ray's fake multi-node provider (its raylets are
local processes, started by the autoscaler itself: no setup commands, no `ray start`).

    RAY_PYTHON ray_launch_baseline.py --port P --temp-dir DIR --out FILE

Run with the tests' Ray venv's Python by tests/bench/test_bench_ray_launch.py. It writes the
config Ray's ``AutoscalingCluster`` would (without its ``ray stop --force``, which would stop
every Ray on this shared host), starts a head with ``RAY_FAKE_CLUSTER=1`` and
``AUTOSCALER_UPDATE_INTERVAL_S=1``, submits one task needing a resource only the worker type
has, and writes JSON: submitted, started (epoch s) and when the autoscaler logged its launch.
Every process it started carries a marker in its environment and is killed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

OBJECT_STORE = 80 * 1024 * 1024


def config(port: int) -> dict[str, object]:
    ip = "127.0.0.1"
    return {
        "cluster_name": "fake-bench",
        "max_workers": 2,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 5,
        "provider": {"type": "fake_multinode", "gcs_address": f"{ip}:{port}"},
        "auth": {"ssh_user": "ubuntu"},
        "head_node_type": "ray.head.default",
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "wa": {
                "resources": {"CPU": 1, "A": 1, "object_store_memory": OBJECT_STORE},
                "node_config": {},
                "min_workers": 0,
                "max_workers": 1,
            },
        },
        "file_mounts": {},
        "cluster_synced_files": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def kill_marked(marker: str) -> None:
    needle = f"CORRAL_BENCH_RAY={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


_ADDING = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}).*Adding \d+ node\(s\) of type wa")


def launch_logged_at(temp_dir: Path) -> float | None:
    """When Ray's autoscaler logged its decision to add the wa node (epoch s)."""
    for log in sorted(temp_dir.glob("session_*/logs/monitor.log")):
        for line in log.read_text(errors="replace").splitlines():
            found = _ADDING.match(line)
            if found:
                return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dashboard-port", type=int, required=True)
    parser.add_argument("--temp-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    temp_dir = Path(args.temp_dir)
    temp_dir.mkdir(parents=True, exist_ok=True)
    cfg = temp_dir / "autoscaling.json"
    cfg.write_text(json.dumps(config(args.port)))
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "RAY_FAKE_CLUSTER": "1",
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        "CORRAL_BENCH_RAY": marker,
    }
    os.environ["CORRAL_BENCH_RAY"] = marker  # the driver's own workers carry it too
    ray_bin = str(Path(sys.executable).with_name("ray"))
    try:
        subprocess.run(
            [
                ray_bin,
                "start",
                "--head",
                f"--port={args.port}",
                f"--autoscaling-config={cfg}",
                "--num-cpus=0",
                "--include-dashboard=false",
                f"--dashboard-port={args.dashboard_port}",
                f"--object-store-memory={OBJECT_STORE}",
                f"--temp-dir={temp_dir}",
                "--disable-usage-stats",
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=240,
        )
        import ray

        ray.init(address=f"127.0.0.1:{args.port}", log_to_driver=False)

        @ray.remote(num_cpus=0, resources={"A": 1})
        def task() -> float:
            return time.time()

        submitted = time.time()
        started = ray.get(task.remote(), timeout=300)
        ray.shutdown()
        result = {
            "ray_version": ray.__version__,
            "submitted": submitted,
            "started": started,
            "launch_logged": launch_logged_at(temp_dir),
        }
        Path(args.out).write_text(json.dumps(result))
        return 0
    finally:
        kill_marked(marker)


if __name__ == "__main__":
    sys.exit(main())
