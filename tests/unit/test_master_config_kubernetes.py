"""Determined's kubernetes resource manager: its fields checked per manager type, and each
pool resolved to pods (slots, namespace, pod template) by
:func:`corral.shared.resource_pools.kube_pods`."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.config.detect import load_as, load_config
from corral.shared.config.master_config import MasterConfig
from corral.shared.configio import ConfigError
from corral.shared.resource_pools import KUBE_POD_IDLE_S, resolve_pools
from corral.shared.scheduling.build import det_limits

MASTER = Path(__file__).resolve().parents[1] / "fixtures" / "pools" / "master-kubernetes.yaml"

BASE = """resource_manager:
  type: kubernetes
  max_slots_per_pod: 4
  default_aux_resource_pool: p
  default_compute_resource_pool: p
resource_pools:
  - pool_name: p
"""


def _issues(tmp_path: Path, text: str) -> list[tuple[str, str]]:
    path = tmp_path / "master.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_as(path, MasterConfig)
    return [(i.loc, i.message) for i in info.value.issues]


def test_the_fixture_resolves_to_gpu_and_cpu_pods() -> None:
    loaded = load_config(MASTER)
    master, notices = loaded.model, loaded.notices
    assert isinstance(master, MasterConfig)
    pools = resolve_pools(master)
    gpu, aux = pools.pool("gpu").provider, pools.pool("aux").provider
    assert gpu is not None and aux is not None
    assert (gpu["type"], gpu["slot_type"], gpu["instance_slots"]) == ("kubernetes", "gpu", 1)
    assert gpu["namespace"] == "det-gpu"  # the pool's kubernetes_namespace
    assert gpu["pod_spec"]["metadata"]["labels"] == {"det-pod": "gpu"}
    assert (aux["slot_type"], aux["instance_slots"], aux["namespace"]) == ("cpu", 0, "det")
    assert aux["pod_spec"]["metadata"]["labels"] == {"det-pod": "cpu"}  # the master's default
    limits = det_limits(pools.pool("gpu"))
    assert limits["slots_per_agent"] == 1 and limits["max_idle_agent_s"] == KUBE_POD_IDLE_S
    # the pod specs are acted on: no "not acted on" notice for task_container_defaults
    assert not any("task_container_defaults" in n for n in notices)


def test_cpu_slots_take_slot_resource_requests(tmp_path: Path) -> None:
    text = BASE.replace(
        "  max_slots_per_pod: 4\n",
        "  max_slots_per_pod: 4\n  slot_type: cpu\n  slot_resource_requests: {cpu: 2}\n"
        "  namespace: old-name\n",
    )
    path = tmp_path / "master.yaml"
    path.write_text(text)
    master, _ = load_as(path, MasterConfig)
    provider = resolve_pools(master).pool("p").provider
    assert provider is not None
    assert (provider["slot_type"], provider["cpu_per_slot"]) == ("cpu", 2.0)
    assert provider["namespace"] == "old-name"
    assert provider["instance_slots"] == 4


@pytest.mark.parametrize(
    ("change", "loc", "message"),
    [
        (("  max_slots_per_pod: 4\n", ""), "resource_manager", "needs max_slots_per_pod"),
        (
            ("  max_slots_per_pod: 4\n", "  max_slots_per_pod: 4\n  slot_type: rocm\n"),
            "resource_manager.slot_type",
            "rocm",
        ),
        (
            ("  max_slots_per_pod: 4\n", "  max_slots_per_pod: 4\n  auth_file: /x\n"),
            "resource_manager",
            "auth_file: not a field of the kubernetes resource manager",
        ),
        (
            ("  - pool_name: p\n", "  - pool_name: p\n    provider: {type: aws}\n"),
            "resource_pools[0].provider",
            "expected no provider",
        ),
        (
            (
                "  - pool_name: p\n",
                "  - pool_name: p\n    task_container_defaults:\n      gpu_pod_spec: [1]\n",
            ),
            "resource_pools[0].task_container_defaults.gpu_pod_spec",
            "expected a Pod",
        ),
        (
            ("  type: kubernetes\n", "  type: agent\n"),
            "resource_manager",
            "max_slots_per_pod: not a field of the agent resource manager",
        ),
    ],
)
def test_mistakes_name_the_field(
    tmp_path: Path, change: tuple[str, str], loc: str, message: str
) -> None:
    issues = _issues(tmp_path, BASE.replace(*change))
    assert any(i[0] == loc and message in i[1] for i in issues), issues
