"""A Ray cluster file written for ``provider: type: kubernetes`` (the seed's: head and worker
pods, ``restartPolicy: Never``, ``provider.namespace: ray``), and the cluster's GPUs listed
live by ``show-gpus`` and ``plan``.

The API, workers and beat are real processes on the test's own redis-server; pods are created
on the fake API server the tests own (tests/fakes/k8s_api.py) through the real ``kubernetes``
client. Each pod's container is played as test_kubernetes_cloud.py plays it: its command (the
node agent's boot script) runs in a folder of its own; a pod deleted is a container stopped.
Every pod manifest Corral sent is validated against the Kubernetes 1.30 schemas. No real
cluster is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cloud_vms import Fleet, Vm, start_with_agents
from fakes.k8s_api import FakeKube, kubeconfig_for
from harness import System, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "fixtures" / "seeds" / "ray-cluster-kubernetes.yaml"
CORRAL = REPO / ".venv" / "bin" / "corral"
CONTEXT = "lab"
NAME = "ray-k8s"


class PodPlayer:
    """Runs every Corral pod's container as it is created (its command's script, in a folder
    of its own) and stops it when the pod is deleted, as a kubelet would."""

    def __init__(self, kube: FakeKube, fleet: Fleet) -> None:
        self.kube, self.fleet = kube, fleet
        self.played: dict[str, Vm] = {}  # pod name -> its container
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-player", daemon=True)

    def __enter__(self) -> PodPlayer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with self.kube.lock:
                live = {
                    name: str(pod["spec"]["containers"][0]["command"][2])
                    for (_ns, name), pod in self.kube.pods.items()
                    if pod["metadata"].get("labels", {}).get("corral-managed") == "true"
                    and pod["spec"].get("nodeName")
                }
            for name, script in live.items():
                if name not in self.played:
                    self.played[name] = self.fleet.boot(script)
            for name, vm in self.played.items():
                if name not in live and vm.alive():
                    vm.power_off()


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.add_node("cpu-a", cpu="8", memory="32Gi")
        yield fake


def _env(kube: FakeKube, tmp_path: Path) -> dict[str, str]:
    config = kubeconfig_for(kube.url, tmp_path / "kubeconfig", CONTEXT)
    return {
        "CORRAL_CLOUDS": json.dumps(["kubernetes", "local"]),
        "CORRAL_KUBECONFIG": str(config),
        "CORRAL_KUBERNETES_CONTEXTS": json.dumps([CONTEXT]),
        "CORRAL_KUBERNETES_NAMESPACES": json.dumps(["default", "ray"]),
        "CORRAL_KUBERNETES_SCHEDULE_WAIT_S": "2",
        "CORRAL_NODE_HEARTBEAT_S": "0.5",
    }


@pytest.fixture
def system(kube: FakeKube, make_system: Callable[..., System], tmp_path: Path) -> System:
    made = make_system(env=_env(kube, tmp_path), ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6")
    start_with_agents(made)
    made.start_worker("autoscale", name="autoscale-0")
    return made


@pytest.fixture
def player(kube: FakeKube, tmp_path: Path) -> Iterator[PodPlayer]:
    fleet = Fleet(tmp_path / "pods")
    with PodPlayer(kube, fleet) as playing:
        yield playing
    fleet.kill_all()


def _cluster_file(tmp: Path, **top: Any) -> Path:
    """The seed as written, but for a 3 s idle timeout and no Ray start commands (the played
    pods have no Ray: the autoscaler then reads idleness from the agents, not from Ray)."""
    data = yaml.safe_load(SEED.read_text())
    data.update(
        idle_timeout_minutes=0.05, head_start_ray_commands=[], worker_start_ray_commands=[], **top
    )
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _view(system: System) -> dict[str, Any]:
    with system.client() as c:
        resp = c.get(f"/v1/clusters/{NAME}")
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _wait_nodes(system: System, want: dict[str, int], timeout_s: float = 60) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(_view(system))
        running = Counter(n["node_type"] for n in seen["nodes"] if n["state"] == "RUNNING")
        return running == Counter(want) and {n["state"] for n in seen["nodes"]} == {"RUNNING"}

    wait_for(reached, timeout_s, f"nodes {want} (last: {seen.get('nodes')})", system.home / "logs")
    return seen


def _pods(kube: FakeKube, **labels: str) -> list[dict[str, Any]]:
    with kube.lock:
        return [
            p
            for p in kube.pods.values()
            if all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
        ]


def _demand(system: System, tmp: Path, text: str) -> None:
    path = tmp / "demand.yaml"
    path.write_text(text)
    done = system.cli("cluster", "demand", NAME, str(path))
    assert done.returncode == 0, done.stderr


def test_a_ray_kubernetes_file_runs_head_and_worker_pods_the_autoscaler_adds_and_removes(
    kube: FakeKube, system: System, player: PodPlayer, tmp_path: Path
) -> None:
    # A namespace Corral does not launch in is refused up front, naming the field.
    elsewhere = _cluster_file(tmp_path, provider={"type": "kubernetes", "namespace": "prod"})
    done = system.cli("cluster", "up", str(elsewhere))
    assert done.returncode == 2, done.stderr
    assert "provider.namespace" in done.stderr and "'prod'" in done.stderr, done.stderr

    done = system.cli("cluster", "up", str(_cluster_file(tmp_path)), "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert (made["name"], made["cloud"]) == (NAME, "kubernetes")
    # Ray's head-pod autoscaler objects are not made: Corral's autoscaler manages the pods.
    [warning] = made["warnings"]
    assert "provider.autoscaler_service_account" in warning and "namespace ray" in warning

    # Up: the head, as a pod in the file's namespace, named from its node's attempt.
    view = _wait_nodes(system, {"head_node": 1})
    [head_node] = view["nodes"]
    [head] = _pods(kube, **{"corral-request": head_node["id"]})
    meta, spec = head["metadata"], head["spec"]
    assert meta["namespace"] == "ray" and meta["name"].startswith("corral-c-ray-k8s-")
    assert meta["labels"]["component"] == "ray-head"  # the file's own labels stay
    assert meta["labels"]["corral-cluster"] == NAME
    assert meta["labels"]["corral-node-kind"] == "head"
    assert spec["restartPolicy"] == "Never"
    [container] = spec["containers"]  # the file's container, run by Corral's agent
    assert container["name"] == "ray-node" and container["image"] == "rayproject/ray:latest"
    assert container["command"][:2] == ["/bin/sh", "-c"] and "args" not in container
    assert container["resources"] == {
        "requests": {"cpu": "1000m", "memory": "512Mi"},
        "limits": {"memory": "2Gi"},
    }
    assert container["env"][0]["name"] == "MY_CPU_REQUEST"
    assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]

    # Pending demand the head cannot hold grows a worker pod.
    _demand(system, tmp_path, "bundles: [{resources: {CPU: 2}}]\n")
    view = _wait_nodes(system, {"head_node": 1, "worker_node": 1})
    [worker_node] = [n for n in view["nodes"] if n["kind"] == "worker"]
    [worker] = _pods(kube, **{"corral-request": worker_node["id"]})
    assert worker["metadata"]["namespace"] == "ray"
    assert worker["metadata"]["labels"]["component"] == "ray-worker"
    assert worker["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": 2,
        "memory": "1Gi",
    }
    assert worker["spec"]["nodeName"] == "cpu-a"

    # No demand: after the idle timeout (3 s) the worker's pod is deleted; the head stays.
    _demand(system, tmp_path, "")
    wait_for(
        lambda: not _pods(kube, **{"corral-node-kind": "worker"}),
        40,
        "the idle worker's pod deleted",
        system.home / "logs",
    )
    view = _wait_nodes(system, {"head_node": 1})
    assert any(d["terminate"] == [worker_node["id"]] for d in view["decisions"])
    assert _pods(kube, **{"corral-request": head_node["id"]})

    # Down: the head's pod goes too.
    done = system.cli("cluster", "down", NAME)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not _pods(kube, **{"corral-cluster": NAME}), 40, "every pod deleted")
    assert len(kube.created) == 2
    for pod in kube.created:
        kubernetes_validate.validate(pod, "1.30", strict=True)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return subprocess.run(
        [str(CORRAL), *args], env={**full, **env}, capture_output=True, text=True, timeout=120
    )


def test_show_gpus_and_plan_list_the_clusters_gpus_live(kube: FakeKube, tmp_path: Path) -> None:
    kube.add_node(
        "a100-a",
        cpu="48",
        memory="340Gi",
        gpus=4,
        labels={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
    )
    env = {
        **_env(kube, tmp_path),
        "CORRAL_HOME": str(tmp_path / "home"),
        "CORRAL_CLOUDS": json.dumps(["kubernetes", "aws", "gcp", "local"]),
    }
    task = tmp_path / "task.yaml"
    task.write_text("resources: {accelerators: A100:4}\nrun: nvidia-smi\n")
    off = {**env, "CORRAL_CLOUDS": json.dumps(["aws", "gcp", "local"])}
    # The five commands run at once: each only reads the cluster, and each is a Python
    # process's start-up (about a second of CPU) that need not wait for the one before.
    runs = {
        "gpus": (env, "show-gpus", "--json"),
        "a100": (env, "show-gpus", "A100:4", "--cloud", "kubernetes"),
        "plan": (env, "plan", str(task), "--json"),
        "table": (env, "plan", str(task)),
        "off": (off, "show-gpus", "A100", "--json"),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {name: pool.submit(_cli, *run) for name, run in runs.items()}
    ran = {name: future.result() for name, future in futures.items()}

    done = ran["gpus"]
    assert done.returncode == 0, done.stderr
    a100 = next(a for a in json.loads(done.stdout)["accelerators"] if a["name"] == "A100")
    assert "kubernetes" in a100["clouds"] and 4 in a100["counts"]
    here = [o for o in a100["offerings"] if o["cloud"] == "kubernetes"]
    assert [(o["instance_type"], o["count"], o["region"]) for o in here] == [
        ("48CPU--340GB--A100:4", 4, CONTEXT)
    ]
    assert here[0]["price_usd_per_hour"] == 0.0
    done = ran["a100"]
    assert done.returncode == 0, done.stderr
    assert "48CPU--340GB--A100:4" in done.stdout and "kubernetes" in done.stdout

    done = ran["plan"]
    assert done.returncode == 0, done.stderr
    chain = json.loads(done.stdout)["candidates"]
    first = chain[0]
    assert (first["cloud"], first["instance_type"], first["cost_usd_per_hour"]) == (
        "kubernetes",
        "48CPU--340GB--A100:4",
        0.0,
    )
    assert first["chosen"] and first["credentials"]
    assert {c["cloud"] for c in chain[1:]} >= {"gcp"}  # the clouds follow, by price
    table = ran["table"]
    assert table.returncode == 0, table.stderr
    assert table.stdout.index("Kubernetes") < table.stdout.index("GCP")

    # The cloud off: the cluster is not listed (the shipped catalogs only).
    done = ran["off"]
    assert done.returncode == 0, done.stderr
    assert "kubernetes" not in {o["cloud"] for o in json.loads(done.stdout)["offerings"]}
