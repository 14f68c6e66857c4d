"""The Kubernetes provider against a fake API server the tests own (tests/fakes/k8s_api.py),
through the real ``kubernetes`` client over HTTP and a real kubeconfig file. No Kubernetes
API server installs here: every pod manifest Corral sends is checked against the Kubernetes
schemas instead (kubernetes-validate, strict), as the Helm chart's are."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from corral.services.providers.base import LaunchSpec
from corral.services.providers.kubernetes.pods import accelerator_name, pod_name
from corral.services.providers.kubernetes.provider import KubernetesProvider
from corral.shared.errors import CapacityError, QuotaError, Scope
from corral.shared.pod_shapes import parse_shape, shape_name

from fakes.k8s_api import FakeKube, kubeconfig_for

pytestmark = pytest.mark.integration

KUBE_VERSION = "1.30"
CONTEXT = "lab"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.add_node("cpu-a", cpu="8", memory="32Gi")
        fake.add_node(
            "gpu-a",
            cpu="16",
            memory="64Gi",
            gpus=1,
            labels={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
        )
        yield fake


@pytest.fixture
def provider(kube: FakeKube, tmp_path: Path) -> KubernetesProvider:
    config = kubeconfig_for(kube.url, tmp_path / "kubeconfig", CONTEXT)
    return KubernetesProvider(
        contexts=[CONTEXT], kubeconfig=str(config), schedule_wait_s=2.0, namespaces=["default"]
    )


def spec(**kw: Any) -> LaunchSpec:
    request = f"r-{uuid.uuid4().hex[:8]}"
    fields: dict[str, Any] = {
        "request_id": request,
        "attempt_id": f"{request}-0-0-0",
        "cloud": "kubernetes",
        "region": CONTEXT,
        "zone": "default",
        "instance_type": "4CPU--16GB",
        "run": "echo hi",
        **kw,
    }
    return LaunchSpec(**fields)


def _valid(kube: FakeKube) -> None:
    for pod in kube.created:
        kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)


def test_a_launch_is_pods_named_from_the_attempt_idempotent_and_deleted_on_terminate(
    kube: FakeKube, provider: KubernetesProvider
) -> None:
    s = spec(count=2)
    got = provider.launch(s)
    assert [g.state for g in got] == ["running", "running"]
    names = [pod_name(s.attempt_id, r) for r in (0, 1)]
    assert [g.provider_id for g in got] == [f"{CONTEXT}/default/{n}" for n in names]
    assert {(g.region, g.zone, g.instance_type) for g in got} == {
        (CONTEXT, "default", "4CPU--16GB")
    }
    assert got[0].tags["corral-attempt"] == s.attempt_id
    pod = kube.pods[("default", names[0])]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"]["corral-managed"] == "true"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert provider.launch(s) == got and len(kube.created) == 2  # a second delivery: no pod
    assert {i.provider_id for i in provider.describe({"corral-attempt": s.attempt_id})} == {
        g.provider_id for g in got
    }
    provider.terminate([g.provider_id for g in got])
    assert kube.pods == {}
    provider.terminate([got[0].provider_id])  # gone already: fine
    _valid(kube)


def test_a_pod_that_exits_is_terminated_with_its_exit_code(
    kube: FakeKube, provider: KubernetesProvider
) -> None:
    [inst] = provider.launch(spec())
    _ctx, ns, name = inst.provider_id.split("/")
    kube.end_pod(ns, name, 4)
    [seen] = provider.describe()
    assert (seen.state, seen.exit_code) == ("terminated", 4)


def test_a_gpu_pod_goes_to_the_node_labelled_with_its_kind(
    kube: FakeKube, provider: KubernetesProvider
) -> None:
    [inst] = provider.launch(spec(instance_type="16CPU--64GB--T4:1", accelerators={"T4": 1}))
    pod = kube.pods[("default", inst.provider_id.rsplit("/", 1)[1])]
    assert pod["spec"]["nodeName"] == "gpu-a"
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["spec"]["containers"][0]["image"].startswith("pytorch/pytorch:")
    _valid(kube)


def test_a_pod_no_node_can_hold_is_a_capacity_error_for_its_shape_and_is_deleted(
    kube: FakeKube, provider: KubernetesProvider
) -> None:
    with pytest.raises(CapacityError) as info:
        provider.launch(spec(instance_type="16CPU--64GB--T4:2", accelerators={"T4": 2}))
    # Its shape in the namespace, not the whole context: a CPU pod still fits there (#46).
    assert info.value.scope is Scope.ZONE
    assert "FailedScheduling" in str(info.value) and "Insufficient nvidia.com/gpu" in str(
        info.value
    )
    assert kube.pods == {}


def test_a_resource_quota_refusal_is_a_quota_error_for_the_namespace(
    kube: FakeKube, provider: KubernetesProvider
) -> None:
    kube.quotas[("default", "gpus")] = {"spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    with pytest.raises(QuotaError) as info:
        provider.launch(spec(instance_type="16CPU--64GB--T4:1", accelerators={"T4": 1}))
    # The resource the ResourceQuota names, in the namespace (its quota family, #46 item 1).
    assert info.value.scope is Scope.FAMILY and "exceeded quota: gpus" in str(info.value)
    assert kube.pods == {}


def test_throttling_is_retried_in_place(kube: FakeKube, provider: KubernetesProvider) -> None:
    kube.throttle(2)
    [inst] = provider.launch(spec())
    assert inst.state == "running"


def test_offerings_are_listed_live_from_the_nodes(provider: KubernetesProvider) -> None:
    shapes = {(o.instance_type, o.accelerator, o.nodes) for o in provider.offerings_of(CONTEXT)}
    assert shapes == {("8CPU--32GB", None, 1), ("16CPU--64GB--T4:1", "T4", 1)}
    assert provider.regions() == (CONTEXT,) and provider.zones(CONTEXT) == ("default",)
    assert provider.has_credentials()


def test_the_workloads_patch_is_merged_strategically_under_corrals_fields(
    kube: FakeKube, provider: KubernetesProvider
) -> None:
    """Anyscale's Kubernetes-backed machine pools: the workload's advanced_instance_config is a
    strategic merge patch over the pod (containers by name, env by name); Corral's name,
    labels and restart policy stay."""
    patch = {
        "metadata": {"labels": {"team": "ml", "corral-managed": "no"}},
        "spec": {
            "restartPolicy": "Always",
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "corral", "env": [{"name": "HF_HOME", "value": "/cache"}]}],
        },
    }
    [inst] = provider.launch(spec(advanced_instance_config=patch))
    pod = kube.pods[("default", inst.provider_id.rsplit("/", 1)[1])]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"]["corral-managed"] == "true"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["tolerations"][0]["key"] == "gpu"
    [container] = pod["spec"]["containers"]
    assert container["env"] == [{"name": "HF_HOME", "value": "/cache"}]
    assert container["command"][:2] == ["/bin/sh", "-c"]  # Corral's, the patch named no command
    _valid(kube)


def test_shapes_and_accelerator_labels() -> None:
    assert shape_name(8, 32, "T4", 1) == "8CPU--32GB--T4:1"
    assert parse_shape("8CPU--32GB--T4:1") == (8.0, 32.0, "T4", 1)
    assert parse_shape("0.5CPU--2GB") == (0.5, 2.0, None, 0)
    assert accelerator_name("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB") == "A100-80GB"
    assert accelerator_name("cloud.google.com/gke-accelerator", "nvidia-l4") == "L4"
    assert accelerator_name("karpenter.k8s.aws/instance-gpu-name", "a10g") == "A10G"
    assert accelerator_name("nvidia.com/gpu.product", "mystery") is None
    assert len(pod_name("x" * 200, 7)) <= 63
