"""A demo-like run shared by the console's browser tests and the CLI-habit tests: one real
installation (API, the three worker roles, beat) on the packaged local cloud, as `corral up`
runs it, with what ops/demo.sh launches (a job, a service, a GPU job that fails over twice),
plus a machine pool, a Determined master and a Ray cluster. Started once per session, the
first time a test asks for it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corral.services.settings import PACKAGED_LOCAL_CLOUD

from harness import System, kill_agents, wait_for

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


@pytest.fixture(scope="session")
def demo(redis_server: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    redis_server.flush()  # type: ignore[attr-defined]
    home = tmp_path_factory.mktemp("demo-home")
    system = System(home, redis_server.url, PACKAGED_LOCAL_CLOUD)  # type: ignore[attr-defined]
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

        def cluster_has_nodes() -> bool:
            shown = system.cli("cluster", "status", "local-lab", "--json")
            return shown.returncode == 0 and len(json.loads(shown.stdout)["nodes"]) >= 2

        wait_for(cluster_has_nodes, 120, "the cluster's head and worker")
        yield demo
    finally:
        system.cli("cluster", "down", "local-lab")
        system.stop()
        kill_agents(system)
