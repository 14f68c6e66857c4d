"""Machine pools on a Kubernetes-backed cloud, end to end: the seed's machine pool whose
instance type is a node shape of the cluster (tests/fixtures/pools/seed-pool-kubernetes.yaml),
registered with ``--cloud kubernetes``; its machines are pods on the fake API server the tests
own (tests/fakes/k8s_api.py), created through the real client by the real API, workers and
beat. The test plays each pod's container (the node agent's boot script) as the AWS tests play
a VM. No real cluster is used."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
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
SEED_POOL_K8S = FIXTURES / "pools" / "seed-pool-kubernetes.yaml"
CONTEXT = "lab"
POOL = "k8s-pool"
POD_NS = "default"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        for name in ("node-a", "node-b", "node-c"):
            fake.add_node(name, cpu="4", memory="16Gi", labels={"corral.dev/pool": "ml"})
        yield fake


@pytest.fixture
def player(kube: FakeKube, tmp_path: Path) -> Iterator[PodPlayer]:
    played = PodPlayer(kube, tmp_path / "pods")
    yield played
    played.stop()


@pytest.fixture
def system(
    kube: FakeKube, player: PodPlayer, make_system: Callable[..., System], tmp_path: Path
) -> Iterator[System]:
    config = kubeconfig_for(kube.url, tmp_path / "kubeconfig", CONTEXT)
    env = {
        "CORRAL_CLOUDS": json.dumps(["kubernetes", "local"]),
        "CORRAL_KUBECONFIG": str(config),
        "CORRAL_KUBERNETES_CONTEXTS": json.dumps([CONTEXT]),
        "CORRAL_KUBERNETES_SCHEDULE_WAIT_S": "2",
        "CORRAL_NODE_HEARTBEAT_S": "0.5",
    }
    system = make_system(
        env=env,
        ATTEMPT_DEADLINE_S="60",
        HEARTBEAT_TIMEOUT_S="6",
        MIN_RUNTIME_S="1",
        POOL_REBALANCE_INTERVAL_S="0.5",
    )
    yield start_with_agents(system)


def _workload(tmp: Path, name: str, run: str) -> Path:
    """A workload on the pool whose worker group sets its own advanced_instance_config: a
    strategic merge patch over the launch template's Pod."""
    patch = {
        "metadata": {"labels": {"workload": name}},
        "spec": {
            "containers": [
                {
                    "name": "corral",
                    "env": [
                        {"name": "SHARED", "value": "workload"},
                        {"name": "WORKLOAD_ENV", "value": name},
                    ],
                }
            ],
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    compute = {
        "worker_nodes": [
            {
                "instance_type": "cpu-pod",
                "flags": {"cloud_deployment": {"machine_pool": POOL}},
                "advanced_instance_config": patch,
            }
        ]
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "compute_config": compute, "run": run}))
    return path


def _launch(system: System, path: Path) -> str:
    done = system.cli("launch", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def _pods_of(kube: FakeKube, workload: str) -> list[dict[str, Any]]:
    with kube.lock:
        return [p for p in kube.created if p["metadata"]["labels"].get("workload") == workload]


def _why(system: System, rid: str) -> dict[str, Any]:
    done = system.cli("why", rid, "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_seed_pool_on_kubernetes_places_two_pods_queues_a_third_and_merges_the_patch(
    kube: FakeKube, player: PodPlayer, system: System, tmp_path: Path
) -> None:
    done = system.cli("pools", "apply", str(SEED_POOL_K8S), "--name", POOL, "--cloud", "kubernetes")
    assert done.returncode == 0, done.stderr
    assert "cloud kubernetes" in done.stdout

    gate = tmp_path / "gate"
    hold = f"while [ ! -f {gate} ]; do sleep 0.2; done; echo released"
    first = _launch(system, _workload(tmp_path, "w1", hold))
    second = _launch(system, _workload(tmp_path, "w2", f"{hold}; sleep 30"))
    for rid in (first, second):
        system.wait_state(rid, {"RUNNING"}, 90)
    third = _launch(system, _workload(tmp_path, "w3", "echo third ran"))

    # Two machines (pods), the pool's size: the third waits on the queue, no pod for it.
    wait_for(lambda: _why(system, third).get("code") not in (None, "queued"), 30, "a verdict")
    verdict = _why(system, third)
    assert verdict["code"] != "placed", verdict
    assert system.request(third)["state"] == "PENDING"
    assert _pods_of(kube, "w3") == []
    assert len(kube.created) == 2, [p["metadata"]["name"] for p in kube.created]

    # The workload's patch merged strategically over the template's Pod.
    pod = _pods_of(kube, "w1")[0]
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "ml" and meta["labels"]["workload"] == "w1"
    assert meta["labels"]["corral-pool"] == POOL and meta["labels"]["corral-managed"] == "true"
    machine = meta["labels"]["corral-machine"]
    assert meta["name"].startswith(f"corral-{machine}-")  # from the attempt (machine) id
    [container] = spec["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"POOL_ENV": "from-template", "SHARED": "workload", "WORKLOAD_ENV": "w1"}
    assert container["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert container["command"][:2] == ["/bin/sh", "-c"]  # Corral's own, kept
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert spec["nodeSelector"] == {"corral.dev/pool": "ml"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["restartPolicy"] == "Never"

    # The first ends: its pod, which carries the first's patch, is deleted, and the third is
    # placed in the room it leaves, on a pod of its own with its own patch.
    gate.write_text("go")
    assert system.wait_state(first, {"SUCCEEDED", "FAILED"}, 60)["state"] == "SUCCEEDED"
    done3 = system.wait_state(third, {"SUCCEEDED", "FAILED"}, 90)
    assert done3["state"] == "SUCCEEDED", done3
    assert done3["instances"][0]["cloud"] == "kubernetes"
    wait_for(lambda: "third ran" in system.cli("logs", third).stdout, 20, "the third's output")
    [pod3] = _pods_of(kube, "w3")
    env3 = {e["name"]: e["value"] for e in pod3["spec"]["containers"][0]["env"]}
    assert env3 == {"POOL_ENV": "from-template", "SHARED": "workload", "WORKLOAD_ENV": "w3"}
    assert len(kube.created) == 3
    assert player.most_live <= 2  # the pool never held more than its two pods
    wait_for(lambda: (POD_NS, pod["metadata"]["name"]) not in kube.pods, 30, "w1's pod deleted")
    for created in kube.created:
        kubernetes_validate.validate(created, "1.30", strict=True)
