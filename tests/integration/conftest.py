"""A demo-like run for the console's browser tests and the CLI-habit tests: one real
installation (API, the three worker roles, beat) on the packaged local cloud, as `corral up`
runs it, with what ops/demo.sh launches (a job, a service, a GPU job that fails over twice),
plus a machine pool, a Determined master and a Ray cluster. One per test module that asks for
it, on a redis-server of its own: other tests flush the session's Redis."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corral.services.settings import PACKAGED_LOCAL_CLOUD

from harness import System, free_port, kill_agents, wait_for

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "examples" / "workload"


@dataclass
class Demo:
    system: System
    ids: dict[str, str] = field(default_factory=dict)  # example name -> request id


def _launch(system: System, path: Path) -> str:
    # The API's first submit loads the clouds' SDKs and credential chains, seconds on a busy
    # machine: a timed-out try is tried again under the same key, so it launches once.
    for _ in range(3):
        done = system.cli("launch", str(path), "--json", "--idempotency-key", f"demo-{path.stem}")
        if "cannot reach the Corral API" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def _redis_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed; run `make setup` (ops/setup.sh)")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for(lambda: _pings(port), 10, "the demo's redis-server")
    return proc, f"redis://127.0.0.1:{port}/0"


def _pings(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as c:
            c.sendall(b"PING\r\n")
            return c.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    home = tmp_path_factory.mktemp("demo-home")
    redis_proc, redis_url = _redis_server(tmp_path_factory.mktemp("demo-redis"))
    system = System(home, redis_url, PACKAGED_LOCAL_CLOUD)
    try:
        system.start_api()
        for role in ("schedule", "provision", "autoscale"):
            system.start_worker(role)
        system.start_beat()
        demo = Demo(system)
        for name in ("hello-job", "train-a100", "web-service"):
            demo.ids[name] = _launch(system, WORKLOAD / f"{name}.yaml")
        pools = (
            ("demo-machine-pool", REPO / "examples" / "pools" / "machine-pool.yaml"),
            ("determined", REPO / "tests" / "fixtures" / "pools" / "master-local.yaml"),
        )
        for name, path in pools:
            done = system.cli("pools", "apply", str(path), "--name", name)
            assert done.returncode == 0, done.stderr
        lab = REPO / "examples" / "clusters" / "local-lab.yaml"
        done = system.cli("cluster", "up", str(lab), "--cloud", "local")
        assert done.returncode == 0, done.stderr
        system.wait_state(demo.ids["hello-job"], {"SUCCEEDED"}, 120)
        system.wait_state(demo.ids["train-a100"], {"RUNNING", "SUCCEEDED"}, 120)
        system.wait_state(demo.ids["web-service"], {"RUNNING"}, 120)

        # Asked of the API: a `corral cluster status` per look started a Python process ten
        # times a second (the console and CLI tests show the nodes themselves).
        def cluster_has_nodes() -> bool:
            shown = system.get("/v1/clusters/local-lab")
            return shown.status_code == 200 and len(shown.json()["nodes"]) >= 2

        wait_for(cluster_has_nodes, 120, "the cluster's head and worker")
        yield demo
    finally:
        system.cli("cluster", "down", "local-lab")
        system.stop(grace_s=0)
        kill_agents(system)
        redis_proc.terminate()
        redis_proc.wait(10)
