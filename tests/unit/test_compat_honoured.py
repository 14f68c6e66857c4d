"""Fields docs/compatibility.md calls honoured that no other test reached: each test here is
named by its field's entry in shared/config/compat/."""

from __future__ import annotations

from typing import Any

import pytest

from corral.shared.autoscaler.resources import docker_settings
from corral.shared.config.cluster import Cluster
from corral.shared.config.master_config import MasterConfig, ResourceManager


def _cluster(docker: dict[str, Any]) -> Cluster:
    return Cluster.model_validate(
        {
            "cluster_name": "c",
            "provider": {"type": "local"},
            "docker": docker,
            "head_node_type": "head",
            "available_node_types": {
                "head": {"node_config": {}, "max_workers": 0},
                "cpu": {"node_config": {}, "max_workers": 2},
            },
        }
    )


def test_ray_head_image_and_head_run_options_are_the_heads() -> None:
    # Ray's schema: head_image "takes precedence over 'image'"; head_run_options are
    # "appended to run_options" (worker_* likewise for workers).
    cluster = _cluster(
        {
            "image": "img:all",
            "head_image": "img:head",
            "run_options": ["--ulimit nofile=65536:65536"],
            "head_run_options": ["--cpus=2"],
            "worker_run_options": ["--cpus=1"],
        }
    )
    head = docker_settings(cluster, "head", head=True)
    worker = docker_settings(cluster, "cpu")
    assert head["image"] == "img:head"
    assert head["run_options"] == ["--ulimit nofile=65536:65536", "--cpus=2"]
    assert worker["image"] == "img:all"
    assert worker["run_options"] == ["--ulimit nofile=65536:65536", "--cpus=1"]


def test_determined_old_default_pool_names_and_namespace() -> None:
    # Determined reads default_cpu/gpu_resource_pool as the older names of the aux and
    # compute defaults, and namespace as the older name of default_namespace.
    old = ResourceManager(default_cpu_resource_pool="aux", default_gpu_resource_pool="gpu")
    assert (old.aux_pool(), old.compute_pool()) == ("aux", "gpu")
    master = MasterConfig.model_validate(
        {
            "resource_manager": {"default_cpu_resource_pool": "aux"},
            "resource_pools": [{"pool_name": "aux"}, {"pool_name": "default"}],
        }
    )
    assert master.problems() == []  # the old name points at a pool that exists
    kube = {"type": "kubernetes", "max_slots_per_pod": 1}
    assert ResourceManager.model_validate({**kube, "namespace": "ml"}).kube_namespace() == "ml"
    newer = ResourceManager.model_validate({**kube, "default_namespace": "team"})
    assert newer.kube_namespace() == "team"


def test_determined_max_cpu_containers_per_agent_is_the_aux_limit() -> None:
    # Determined's ResourcePoolConfig.UnmarshalJSON (master/internal/resourcemanagers) copies
    # a written max_cpu_containers_per_agent over max_aux_containers_per_agent: the older
    # name wins when both are written, and an unwritten one leaves the newer as it is.
    from corral.shared.resource_pools import resolve_pools

    master = MasterConfig.model_validate(
        {
            "resource_pools": [
                {"pool_name": "default", "max_cpu_containers_per_agent": 3},
                {"pool_name": "newer", "max_aux_containers_per_agent": 7},
                {
                    "pool_name": "both",
                    "max_cpu_containers_per_agent": 3,
                    "max_aux_containers_per_agent": 7,
                },
            ]
        }
    )
    resolved = resolve_pools(master)
    assert [p.max_aux_containers_per_agent for p in resolved.pools] == [3, 7, 3]


def test_skypilot_spot_recovery_is_read_as_job_recovery() -> None:
    # SkyPilot's Resources.from_yaml_config: "spot_recovery is deprecated. Use job_recovery
    # instead (the system is defaulting to that for you)"; its schema allows one of the two.
    from pydantic import ValidationError

    from corral.shared.config.task import Task

    old = Task.model_validate({"run": "x", "resources": {"spot_recovery": "FAILOVER"}})
    recovery = old.recovery()
    assert recovery is not None and recovery.strategy == "FAILOVER"
    mapping = {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 2}
    again = Task.model_validate({"run": "x", "resources": {"spot_recovery": mapping}})
    assert (
        again.recovery()
        == Task.model_validate({"run": "x", "resources": {"job_recovery": mapping}}).recovery()
    )
    # Round trip: what the API stores validates again.
    assert Task.model_validate(again.model_dump(exclude_unset=True)).recovery() == again.recovery()
    none = Task.model_validate({"run": "x", "resources": {"spot_recovery": "none"}})
    assert none.recovery() is None
    with pytest.raises(ValidationError, match="not both"):
        Task.model_validate(
            {"run": "x", "resources": {"spot_recovery": "FAILOVER", "job_recovery": "FAILOVER"}}
        )
