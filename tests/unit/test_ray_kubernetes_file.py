"""Ray cluster files written for ``provider: type: kubernetes``: node configs are pod
manifests. Their resources are read as Ray's legacy Kubernetes provider reads them
(python/ray/autoscaler/_private/kubernetes/config.py, ``get_autodetected_resources``: CPU and
GPU the smaller of request and limit rounded up, memory from the limit); the node's launch
request carries the pod, less Ray's keep-alive command, in the file's namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.services.runtime.autoscaling import node_task
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings
from corral.services.state.clusters import ClusterNode, ClusterRecord
from corral.shared.autoscaler.kube_pods import (
    CONTAINER_ANNOTATION,
    pod_of,
    pod_patch,
    pod_resources,
    quantity,
)
from corral.shared.autoscaler.resources import LEGACY_HEAD, LEGACY_WORKER, resolve_cluster
from corral.shared.catalog import load_catalog
from corral.shared.config.cluster import Cluster
from corral.shared.configio import parse_text, validate_doc

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "fixtures" / "seeds" / "ray-cluster-kubernetes.yaml"
LOCAL = REPO / "tests" / "fixtures" / "localcloud" / "cluster.yaml"
GIB = 2**30


def _seed() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SEED.read_text())
    return data


def _cluster(data: dict[str, Any]) -> Cluster:
    return validate_doc(Cluster, parse_text(yaml.safe_dump(data), "k8s.yaml"))


def test_quantities() -> None:
    assert quantity("500m") == 0.5 and quantity(2) == 2 and quantity("1.5") == 1.5
    assert quantity("2Gi") == 2 * GIB and quantity("1G") == 1e9 and quantity("512Mi") == 2**29
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity("lots")


def test_the_pods_resources_are_the_node_types_as_ray_reads_them() -> None:
    resolved = resolve_cluster(_cluster(_seed()), load_catalog())
    assert resolved.problems == []
    spec = resolved.spec
    assert spec.head_node_type == "head_node" and spec.max_workers == 2
    head, worker = spec.node_types["head_node"], spec.node_types["worker_node"]
    # 1000m CPU; a 2Gi limit, of which 70% is Ray's `memory` (the object store takes 30%).
    assert head.resources == {"CPU": 1.0, "memory": float(int(2 * GIB * 0.7))}
    assert worker.resources == {"CPU": 2.0, "memory": float(int(4 * GIB * 0.7))}
    assert (worker.min_workers, worker.max_workers) == (0, 2)
    assert worker.price_usd_per_hour == 0.0 and worker.instance_type is None


def test_cpu_and_gpu_are_the_smaller_of_request_and_limit_rounded_up() -> None:
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "ray-node",
                    "resources": {
                        "requests": {"cpu": "1500m", "memory": "1Gi"},
                        "limits": {"cpu": "3", "nvidia.com/gpu": 2},
                    },
                }
            ]
        }
    }
    assert pod_resources(pod) == (2.0, 1.0, 2)


def test_keys_the_file_writes_win_and_a_gpu_pod_offers_its_gpus() -> None:
    data = _seed()
    worker = data["available_node_types"]["worker_node"]
    worker["resources"] = {"Custom1": 1, "CPU": 3}
    worker["node_config"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    spec = resolve_cluster(_cluster(data), load_catalog()).spec
    got = spec.node_types["worker_node"].resources
    assert (got["CPU"], got["GPU"], got["Custom1"]) == (3, 1, 1)


def test_a_node_config_that_is_no_pod_or_states_no_cpu_is_refused_with_its_path() -> None:
    data = _seed()
    data["available_node_types"]["worker_node"]["node_config"] = {"InstanceType": "m5.large"}
    problems = resolve_cluster(_cluster(data), load_catalog()).problems
    assert problems == [
        (
            ("available_node_types", "worker_node", "node_config"),
            "expected a pod manifest with a spec (spec.containers)",
        )
    ]
    data = _seed()
    head = data["available_node_types"]["head_node"]["node_config"]
    head["spec"]["containers"][0]["resources"] = {"limits": {"memory": "2Gi"}}
    [(path, message)] = resolve_cluster(_cluster(data), load_catalog()).problems
    assert path == (
        "available_node_types",
        "head_node",
        "node_config",
        "spec",
        "containers",
        0,
        "resources",
    )
    assert "cpu and memory" in message
    head["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "one"}}
    [(_path, message)] = resolve_cluster(_cluster(data), load_catalog()).problems
    assert "'one' is not a Kubernetes quantity" in message


def test_the_older_head_node_and_worker_nodes_pods_read_too() -> None:
    """Ray's first Kubernetes example: ``head_node`` and ``worker_nodes`` are the pods."""
    data = _seed()
    types = data.pop("available_node_types")
    data.pop("head_node_type")
    data["head_node"] = types["head_node"]["node_config"]
    data["worker_nodes"] = types["worker_node"]["node_config"]
    spec = resolve_cluster(_cluster(data), load_catalog()).spec
    assert spec.node_types[LEGACY_HEAD].resources["CPU"] == 1.0
    assert spec.node_types[LEGACY_WORKER].resources["CPU"] == 2.0


def test_a_pod_under_a_pod_key_is_read_as_ray_reads_it() -> None:
    inner = _seed()["available_node_types"]["worker_node"]["node_config"]
    pod, problem = pod_of({"pod": inner, "service": {"kind": "Service"}})
    assert problem is None and pod == inner
    _pod, problem = pod_of({"pod": {"kind": "Deployment", "spec": {}}})
    assert problem == (("pod", "kind"), "expected Pod (a pod manifest), got 'Deployment'")


def test_the_launch_patch_keeps_the_pod_less_its_name_and_rays_keep_alive_command() -> None:
    pod = _seed()["available_node_types"]["head_node"]["node_config"]
    patch = pod_patch(pod)
    assert "generateName" not in patch["metadata"]
    assert patch["metadata"]["labels"] == {"component": "ray-head"}
    assert patch["metadata"]["annotations"] == {CONTAINER_ANNOTATION: "ray-node"}
    [container] = patch["spec"]["containers"]
    assert "command" not in container and "args" not in container
    assert container["resources"] == pod["spec"]["containers"][0]["resources"]
    assert container["image"] == "rayproject/ray:latest"
    assert pod["spec"]["containers"][0]["command"]  # the file's own pod is left as it was


def test_a_nodes_launch_request_carries_its_pod_into_the_files_namespace(tmp_path: Path) -> None:
    cluster = _cluster(_seed())
    rec = ClusterRecord(
        name="ray-k8s",
        uid="u1",
        file_name="k8s.yaml",
        cluster=cluster.model_dump(mode="json", exclude_none=True),
        cloud="kubernetes",
        created_at=0.0,
        updated_at=0.0,
    )
    node = ClusterNode(
        request_id="c-ray-k8s-u1-v2-0",
        node_type="worker_node",
        kind="worker",
        launch_hash="h",
        committed_at=0.0,
    )
    deps = Deps(Settings(home=tmp_path, local_cloud_file=LOCAL))
    task = node_task(deps, rec, node, head_ip="10.0.0.5")
    resources = task.resources
    assert (resources.cloud, resources.zone, resources.instance_type) == (
        "kubernetes",
        "ray",
        None,
    )
    assert (float(resources.cpus or 0), float(resources.memory or 0)) == (2.0, 4.0)
    config = task.advanced_instance_config or {}
    assert config["metadata"]["annotations"][CONTAINER_ANNOTATION] == "ray-node"
    labels = config["metadata"]["labels"]  # the file's, then the cluster's own
    assert labels["component"] == "ray-worker" and labels["corral-cluster"] == "ray-k8s"
    assert (labels["corral-node-type"], labels["corral-node-kind"]) == ("worker_node", "worker")
    assert config["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": 2,
        "memory": "1Gi",
    }
    assert task.labels is not None and task.labels["corral-cluster"] == "ray-k8s"


def test_a_gpu_pod_plans_on_the_gpu_kind_its_node_selector_names(tmp_path: Path) -> None:
    data = _seed()
    pod = data["available_node_types"]["worker_node"]["node_config"]
    pod["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    rec = ClusterRecord(
        name="ray-k8s",
        uid="u1",
        file_name="k8s.yaml",
        cluster=_cluster(data).model_dump(mode="json", exclude_none=True),
        cloud="kubernetes",
        created_at=0.0,
        updated_at=0.0,
    )
    node = ClusterNode(
        request_id="r-1", node_type="worker_node", kind="worker", launch_hash="h", committed_at=0.0
    )
    deps = Deps(Settings(home=tmp_path, local_cloud_file=LOCAL))
    task = node_task(deps, rec, node, head_ip="10.0.0.5")
    assert task.resources.accelerators == {"T4": 1}
    # Without a label naming the kind, the pod's own limit and selector decide its node.
    del pod["spec"]["nodeSelector"]
    rec.cluster = _cluster(data).model_dump(mode="json", exclude_none=True)
    assert node_task(deps, rec, node, head_ip="10.0.0.5").resources.accelerators is None
