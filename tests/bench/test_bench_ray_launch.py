"""Benchmark: from a Ray task's submission to it running on a freshly launched worker, Corral
against Ray's own autoscaler, side by side in one run on the same cluster (a head that takes
no tasks, one worker type that alone has the task's resource).

Corral: the local cloud, Ray from the tests' Ray venv on the nodes (tests/ray_venv.py), the
demand read from Ray's GCS by the head's agent. Its time is broken down from the decision record
and the worker's log (each launcher step is stamped): Corral's decision (submission to the tick
that launched the worker), launch (to the machine running its first step), setup, `ray start`,
then Ray joining and running the task.
Ray: its autoscaler with the fake multi-node provider (tests/bench/ray_launch_baseline.py),
which starts a raylet in its own process: no machine, no setup, no `ray start`; so only the
decision times compare like for like, and the totals show what a real node's start costs.

The floor: Corral's decision takes at most max(5 s, 3 x Ray's). Needs Ray (a download):
skipped at CORRAL_BENCH_SCALE=small.

    .venv/bin/python -m pytest tests/bench/test_bench_ray_launch.py -m bench -q -s
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.shared.autoscaler.launcher import step_times

from harness import System, free_port, wait_for

pytestmark = pytest.mark.bench

HERE = Path(__file__).resolve().parent
OBJECT_STORE = 80 * 1024 * 1024
FLOOR_DECISION_S = 5.0
FLOOR_DECISION_RATIO = 3.0
LOCAL_CLOUD = """\
instance_types:
  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.1}
regions:
  - name: lab
    zones: [{name: lab-a, capacity: {cpu-2: 4}, launch_delay_s: 0.2}]
"""
DRIVER = """\
import json, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0, resources={"A": 1})
def task():
    return time.time()

submitted = time.time()
started = ray.get(task.remote(), timeout=280)
print(json.dumps({"submitted": submitted, "started": started}))
"""


def _cluster(tmp: Path, port: int) -> Path:
    data = {
        "cluster_name": "bench",
        "max_workers": 1,
        "idle_timeout_minutes": 5,
        "provider": {"type": "local"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "cpu-2"}, "resources": {"CPU": 0}},
            "wa": {
                "node_config": {"InstanceType": "cpu-2"},
                "resources": {"CPU": 1, "A": 1},
                "max_workers": 1,
            },
        },
        "setup_commands": ["true"],
        "head_start_ray_commands": [
            f"ray start --head --port={port} --num-cpus=0 --include-dashboard=false "
            f"--dashboard-port={free_port()} --object-store-memory={OBJECT_STORE} "
            f"--temp-dir=/tmp/cb-{port} --disable-usage-stats"
        ],
        "worker_start_ray_commands": [
            f"ray start --address=$RAY_HEAD_IP:{port} --object-store-memory={OBJECT_STORE} "
            f"--disable-usage-stats --dashboard-agent-listen-port={free_port()}"
        ],
    }
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _view(system: System) -> dict[str, Any]:
    done = system.cli("cluster", "status", "bench", "--json")
    assert done.returncode == 0, done.stderr
    view: dict[str, Any] = json.loads(done.stdout)
    return view


def run_corral(make_system: Callable[..., System], tmp: Path, ray_python: Path) -> dict[str, float]:
    cloud = tmp / "cloud.yaml"
    cloud.write_text(LOCAL_CLOUD)
    system = make_system(
        cloud,
        env={"PATH": f"{ray_python.parent}:{os.environ.get('PATH', '')}"},
        HEARTBEAT_TIMEOUT_S="15",
        TERMINATE_GRACE_S="8",
        ATTEMPT_DEADLINE_S="60",
    )
    system.start_api()
    for role in ("schedule", "provision", "autoscale"):
        system.start_worker(role)
    system.start_beat()
    port = free_port()
    assert system.cli("cluster", "up", str(_cluster(tmp, port))).returncode == 0
    wait_for(lambda: bool(_view(system).get("ray")), 180, "the head's Ray", system.home / "logs")
    gcs = _view(system)["ray"]["gcs_address"]
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    ran = subprocess.run(
        [str(ray_python), str(driver), gcs], capture_output=True, text=True, timeout=290
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    times = json.loads(ran.stdout.strip().splitlines()[-1])
    view = _view(system)
    decided = next(d["at"] for d in view["decisions"] if d["launch"].get("wa"))
    [worker] = [n["id"] for n in view["nodes"] if n["node_type"] == "wa"]
    steps = step_times(system.cli("logs", worker).stdout)
    first = steps[0][1]
    start_ray = next(at for phase, at in steps if phase == "start_ray")
    up = next(at for phase, at in steps if phase == "node up")
    system.cli("cluster", "down", "bench")
    wait_for(
        lambda: not json.loads(system.cli("cluster", "list", "--json").stdout)["clusters"],
        60,
        "the cluster to go",
    )
    shutil.rmtree(f"/tmp/cb-{port}", ignore_errors=True)  # Ray's session folder
    return {
        "decision": decided - times["submitted"],
        "launch": first - decided,
        "setup": start_ray - first,
        "ray start": up - start_ray,
        "join and run": times["started"] - up,
        "total": times["started"] - times["submitted"],
    }


def run_ray(tmp: Path, ray_python: Path) -> dict[str, float]:
    out = tmp / "ray.json"
    port = free_port()
    ran = subprocess.run(
        [
            str(ray_python),
            str(HERE / "ray_launch_baseline.py"),
            "--port",
            str(port),
            "--dashboard-port",
            str(free_port()),
            "--temp-dir",
            f"/tmp/rb-{port}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    shutil.rmtree(f"/tmp/rb-{port}", ignore_errors=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    got = json.loads(out.read_text())
    logged = got["launch_logged"] or got["started"]
    return {
        "decision": logged - got["submitted"],
        "launch to running": got["started"] - logged,
        "total": got["started"] - got["submitted"],
    }


@pytest.mark.timeout(900)
def test_time_to_a_task_running_on_a_fresh_worker_against_rays_autoscaler(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    if os.environ.get("CORRAL_BENCH_SCALE") == "small":
        pytest.skip("needs Ray (a download); run without CORRAL_BENCH_SCALE=small")
    from ray_venv import ray_python

    python, how = ray_python()
    if python is None:
        pytest.skip(how)
    corral = run_corral(make_system, tmp_path, python)
    ray = run_ray(tmp_path, python)
    print("\nsubmission -> running on a fresh worker (s)")
    for name, seconds in corral.items():
        print(f"  corral {name:14s} {seconds:7.2f}")
    for name, seconds in ray.items():
        print(f"  ray    {name:14s} {seconds:7.2f}  (fake multi-node provider)")
    print(
        f"  decision ratio corral/ray: {corral['decision'] / max(ray['decision'], 1e-3):.2f}; "
        f"total ratio: {corral['total'] / max(ray['total'], 1e-3):.2f}"
    )
    assert corral["decision"] <= max(FLOOR_DECISION_S, FLOOR_DECISION_RATIO * ray["decision"])
