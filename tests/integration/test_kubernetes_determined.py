"""Determined masters with ``resource_manager: type: kubernetes``, end to end: the master
file (tests/fixtures/pools/master-kubernetes.yaml) validates and registers as written, and
its pools' tasks run as pods on the fake API server the tests own (tests/fakes/k8s_api.py),
created through the real client by the real API, workers and beat; the test plays each pod's
container (the node agent's boot script) as the AWS tests play a VM. A field Determined's
kubernetes manager does not have is a clear error, exit 2. No real cluster is used."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cloud_vms import start_with_agents
from fakes.k8s_api import FakeKube, kubeconfig_for
from fakes.k8s_pods import PodPlayer
from harness import System, wait_for

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MASTER = FIXTURES / "pools" / "master-kubernetes.yaml"
CONTEXT = "lab"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.add_node("cpu-a", cpu="4", memory="16Gi")
        fake.add_node(
            "t4-a",
            cpu="8",
            memory="32Gi",
            gpus=2,
            labels={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
        )
        yield fake


@pytest.fixture
def system(kube: FakeKube, make_system: Callable[..., System], tmp_path: Path) -> Iterator[System]:
    config = kubeconfig_for(kube.url, tmp_path / "kubeconfig", CONTEXT)
    env = {
        "CORRAL_CLOUDS": json.dumps(["kubernetes", "local"]),
        "CORRAL_KUBECONFIG": str(config),
        "CORRAL_KUBERNETES_CONTEXTS": json.dumps([CONTEXT]),
        "CORRAL_KUBERNETES_NAMESPACES": json.dumps(["det", "det-gpu"]),
        "CORRAL_KUBERNETES_SCHEDULE_WAIT_S": "2",
        "CORRAL_NODE_HEARTBEAT_S": "0.5",
    }
    system = make_system(
        env=env, ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6", POOL_REBALANCE_INTERVAL_S="0.5"
    )
    player = PodPlayer(kube, tmp_path / "pods")
    yield start_with_agents(system)
    player.stop()


def _launch(system: System, tmp: Path, name: str, **fields: Any) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **fields}))
    done = system.cli("launch", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def _pod_in(kube: FakeKube, namespace: str) -> dict[str, Any]:
    with kube.lock:
        found = [p for p in kube.created if p["metadata"]["namespace"] == namespace]
    assert len(found) == 1, [p["metadata"]["name"] for p in kube.created]
    return found[0]


def test_a_kubernetes_master_runs_its_pools_tasks_as_pods(
    kube: FakeKube, system: System, tmp_path: Path
) -> None:
    checked = system.cli("validate", str(MASTER))
    assert checked.returncode == 0, checked.stderr
    assert "ok (master_config)" in checked.stdout
    done = system.cli("pools", "apply", str(MASTER), "--name", "determined")
    assert done.returncode == 0, done.stderr
    assert "cloud kubernetes" in done.stdout

    # A one-slot task goes to the compute pool: a pod of one GPU in the pool's namespace.
    gpu = _launch(system, tmp_path, "train", resources={"slots": 1}, run="echo trained")
    ended = system.wait_state(gpu, {"SUCCEEDED", "FAILED"}, 120)
    assert ended["state"] == "SUCCEEDED", ended
    assert ended["instances"][0]["cloud"] == "kubernetes"
    assert ended["instances"][0]["instance_type"] == "8CPU--32GB--T4:2"  # the GPU node's shape
    # The output is shipped beside the exit, not before it: read once it is there.
    wait_for(lambda: "trained" in system.cli("logs", gpu).stdout, 20, "the task's output")
    pod = _pod_in(kube, "det-gpu")
    [container] = pod["spec"]["containers"]
    assert container["name"] == "corral"  # Determined's determined-container, merged into it
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["requests"] == {"cpu": "4000m", "memory": "16384Mi"}
    assert {e["name"]: e["value"] for e in container["env"]} == {"POD_KIND": "gpu"}
    assert pod["metadata"]["labels"]["det-pod"] == "gpu"
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"

    # A zero-slot task goes to the aux pool: a CPU pod from cpu_pod_spec, in the default
    # namespace, on the CPU node.
    board = _launch(system, tmp_path, "board", resources={"slots": 0}, run="echo board")
    ended = system.wait_state(board, {"SUCCEEDED", "FAILED"}, 120)
    assert ended["state"] == "SUCCEEDED", ended
    pod = _pod_in(kube, "det")
    [container] = pod["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert {e["name"]: e["value"] for e in container["env"]} == {"POD_KIND": "cpu"}
    assert ended["instances"][0]["instance_type"] == "4CPU--16GB"
    for created in kube.created:
        kubernetes_validate.validate(created, "1.30", strict=True)


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        ({"max_slot_per_pod": 1}, "resource_manager.max_slot_per_pod", "max_slots_per_pod"),
        ({"job_storage_root": "/x"}, "resource_manager", "not a field of the kubernetes"),
        ({"slot_type": "tpu"}, "resource_manager.slot_type", "expected one of gpu, cuda"),
        ({"max_slots_per_pod": None}, "resource_manager", "needs max_slots_per_pod"),
    ],
)
def test_a_field_the_kubernetes_manager_lacks_is_a_clear_error(
    make_system: Callable[..., System],
    tmp_path: Path,
    change: dict[str, Any],
    field: str,
    expected: str,
) -> None:
    doc = yaml.safe_load(MASTER.read_text())
    manager = doc["resource_manager"]
    for key, value in change.items():
        if value is None:
            manager.pop(key)
        else:
            manager[key] = value
    bad = tmp_path / "master-bad.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    system = make_system()
    commands = (("validate", str(bad)), ("pools", "apply", str(bad), "--name", "determined"))
    # Both at once: neither needs the other (no API runs here: the file is refused before one
    # would be asked), and each is a Python process's start-up, about a second of CPU.
    with ThreadPoolExecutor(len(commands)) as pool:
        ran = list(pool.map(lambda args: system.cli(*args), commands))
    for args, done in zip(commands, ran, strict=True):
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "master-bad.yaml" in done.stderr and field in done.stderr, done.stderr
        assert expected in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
