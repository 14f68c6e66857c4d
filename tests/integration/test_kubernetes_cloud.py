"""Kubernetes as a cloud, end to end: a task with ``cloud: kubernetes`` through the real API,
workers and beat; the provider creates pods on the fake API server the tests own
(tests/fakes/k8s_api.py) through the real client; the test plays each pod's container as the
AWS tests play a VM: it takes the pod's command (the node agent's boot script) and runs it in a
sandbox. No real cluster is used."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cloud_vms import Fleet, Vm, start_with_agents
from fakes.k8s_api import FakeKube, kubeconfig_for
from harness import System, wait_for

pytestmark = pytest.mark.integration

CONTEXT = "lab"
TASK = {"resources": {"cloud": "kubernetes", "cpus": 2}}


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.add_node("cpu-a", cpu="4", memory="16Gi")
        fake.add_node(
            "gpu-a",
            cpu="8",
            memory="32Gi",
            gpus=1,
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
        "CORRAL_KUBERNETES_SCHEDULE_WAIT_S": "2",
        "CORRAL_NODE_HEARTBEAT_S": "0.5",
    }
    yield start_with_agents(make_system(env=env, ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6"))


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Callable[[str], Vm]]:
    fleet = Fleet(tmp_path)
    yield fleet.boot
    fleet.kill_all()


def _script_of(kube: FakeKube, request_id: str) -> str:
    def created() -> list[dict[str, Any]]:
        return [
            p for p in kube.created if p["metadata"]["labels"].get("corral-request") == request_id
        ]

    wait_for(lambda: bool(created()), 60, f"a pod for {request_id}")
    return str(created()[-1]["spec"]["containers"][0]["command"][2])


def _live_pods(kube: FakeKube, request_id: str) -> list[str]:
    with kube.lock:
        return [
            name
            for (_ns, name), p in kube.pods.items()
            if p["metadata"]["labels"].get("corral-request") == request_id
        ]


def test_a_job_on_kubernetes_ends_by_its_exit_code_with_its_logs_and_its_pod_goes(
    kube: FakeKube, system: System, pods: Callable[[str], Vm]
) -> None:
    rid = system.submit({**TASK, "name": "hello", "run": "echo hello from the pod"})
    pods(_script_of(kube, rid))
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0, done
    assert done["instances"][0]["cloud"] == "kubernetes"
    assert "hello from the pod" in system.cli("logs", rid).stdout
    wait_for(lambda: _live_pods(kube, rid) == [], 30, "the pod deleted")

    bad = system.submit({**TASK, "name": "bad", "run": "echo failing; exit 5"})
    pods(_script_of(kube, bad))
    done = system.wait_state(bad, {"SUCCEEDED", "FAILED"}, 90)
    assert (done["state"], done["exit_code"]) == ("FAILED", 5), done
    wait_for(lambda: _live_pods(kube, bad) == [], 30, "the failed job's pod deleted")
    for pod in kube.created:
        kubernetes_validate.validate(pod, "1.30", strict=True)


def test_a_gpu_job_no_node_can_hold_fails_over_to_the_next_cloud(
    kube: FakeKube, system: System, pods: Callable[[str], Vm]
) -> None:
    """The cluster's only A100 node is taken by a pod Corral does not own: Corral's pod is
    Unschedulable, the launch is a capacity error for the context (its pod deleted), and the
    chain moves on to the local cloud, which has one A100 machine free."""
    kube.add_node(
        "a100-a", cpu="96", memory="1024Gi", gpus=8, labels={"corral.dev/accelerator": "A100"}
    )
    taker = {"limits": {"nvidia.com/gpu": "8"}}
    kube.handle(
        "POST",
        "/api/v1/namespaces/default/pods",
        {},
        {
            "metadata": {"name": "someone-else", "labels": {}},
            "spec": {"containers": [{"name": "x", "image": "x", "resources": taker}]},
        },
    )
    rid = system.submit({"name": "gpu", "resources": {"accelerators": "A100:8"}, "run": "true"})
    done = system.wait_state(rid, {"RUNNING", "SUCCEEDED", "FAILED"}, 120)
    first = done["attempts"][0]
    assert first["cloud"] == "kubernetes" and first["outcome"] == "capacity", done["attempts"]
    assert "Insufficient nvidia.com/gpu" in (first["error"] or "")
    assert done["state"] in ("RUNNING", "SUCCEEDED"), done
    assert done["instances"][-1]["cloud"] == "local"
    assert _live_pods(kube, rid) == []
    # Issue #46: the A100 shape is blocked there, not the cluster: a CPU job still runs on it.
    cpu = system.submit({**TASK, "name": "cpu-after", "run": "true"})
    pods(_script_of(kube, cpu))  # the pod's container: the node agent
    done = system.wait_state(cpu, {"SUCCEEDED", "FAILED"}, 120)
    assert done["state"] == "SUCCEEDED", done
    assert [(a["cloud"], a["outcome"]) for a in done["attempts"]] == [("kubernetes", "ok")]
    wait_for(lambda: _live_pods(kube, cpu) == [], 30, "the CPU job's pod deleted")


def test_a_quota_refusal_blocks_the_namespace_and_the_chain_moves_on(
    kube: FakeKube, system: System
) -> None:
    """A ResourceQuota the pod would exceed: the API server's 403 "exceeded quota" is a quota
    error, the namespace's scope is blocked (a second request does not try it while the block
    lasts) and both requests run on the local cloud, the next candidate."""
    kube.quotas[("default", "cpu")] = {"spec": {"hard": {"requests.cpu": "1"}}}
    anywhere = {"resources": {"cpus": 2}}  # the cluster (priced 0) first, then the local cloud
    first = system.submit({**anywhere, "name": "over-quota", "run": "sleep 30"})
    done = system.wait_state(first, {"RUNNING", "SUCCEEDED", "FAILED"}, 120)
    tried = done["attempts"][0]
    assert tried["cloud"] == "kubernetes" and tried["outcome"] == "quota", done["attempts"]
    assert "exceeded quota: cpu" in (tried["error"] or "")
    assert done["state"] == "RUNNING" and done["instances"][-1]["cloud"] == "local", (
        done["error"],
        done["attempts"],
    )
    second = system.submit({**anywhere, "name": "after-the-block", "run": "sleep 30"})
    done = system.wait_state(second, {"RUNNING", "SUCCEEDED", "FAILED"}, 120)
    assert done["state"] == "RUNNING" and done["instances"][-1]["cloud"] == "local", done
    assert [a["cloud"] for a in done["attempts"] if a["outcome"] not in (None, "ok")] == [] or all(
        a["outcome"] == "blocked" for a in done["attempts"] if a["cloud"] == "kubernetes"
    ), done["attempts"]
    assert kube.pods == {}
    for rid in (first, second):
        assert system.cli("terminate", rid).returncode == 0
