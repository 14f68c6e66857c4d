"""Determined master configs: current and legacy format, providers, default pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.config.detect import load_as, load_config
from corral.shared.config.master_config import GcpInstanceType, MasterConfig
from corral.shared.configio import ConfigError, parse_text, validate_doc

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def _master(text: str) -> MasterConfig:
    return validate_doc(MasterConfig, parse_text(text, "master.yaml"))


def _problems(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    path = tmp_path / "master.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_as(path, MasterConfig)
    return [(i.line, i.loc, i.message) for i in info.value.issues]


def test_seed_round_robin_example_as_written() -> None:
    master, _ = load_as(SEEDS / "determined-master-round-robin-worst.yaml", MasterConfig)
    assert master.resource_manager is not None
    assert master.resource_manager.type == "agent"
    scheduler = master.resource_manager.scheduler
    assert scheduler is not None and (scheduler.type, scheduler.fitting_policy) == (
        "round_robin",
        "best",
    )
    assert master.resource_pools is not None
    pool_scheduler = master.resource_pools[0].scheduler
    assert pool_scheduler is not None
    assert (pool_scheduler.type, pool_scheduler.fitting_policy) == (None, "worst")
    assert not master.is_legacy()


def test_legacy_seed_is_one_default_pool() -> None:
    master, _ = load_as(SEEDS / "determined-master-legacy.yaml", MasterConfig)
    assert master.is_legacy()
    assert master.pool_names() == ["default"]
    assert master.provisioner is not None
    assert master.provisioner.type == "aws"
    assert master.provisioner.max_idle_agent_period_s == 1200.0


def test_two_pool_seed_providers() -> None:
    loaded = load_config(SEEDS / "determined-master-two-pools.yaml")
    master = loaded.model
    assert isinstance(master, MasterConfig)
    assert master.pool_names() == ["aws-cpu", "aws-v100"]
    assert master.resource_pools is not None
    v100 = master.resource_pools[1].provider
    assert v100 is not None
    assert (v100.instance_type, v100.spot, v100.spot_max_price) == ("p3dn.24xlarge", True, "12.50")
    assert v100.max_idle_agent_period_s == 300.0
    # The provider's launch fields (region, key, spot price, network) are what the cloud
    # receives now (issue #45 item 4): only the fields Corral does otherwise are noticed.
    assert [n.split(": ")[1] for n in loaded.notices] == [
        "port",
        "db",
        "checkpoint_storage",
        "resource_pools[0].description",
        "resource_pools[1].description",
    ]


def test_gcp_provider_instance_type_is_a_mapping() -> None:
    master, _ = load_as(SEEDS / "determined-master-gcp.yaml", MasterConfig)
    assert master.resource_pools is not None
    provider = master.resource_pools[0].provider
    assert provider is not None
    assert isinstance(provider.instance_type, GcpInstanceType)
    assert (provider.instance_type.gpu_type, provider.instance_type.gpu_num) == (
        "nvidia-tesla-t4",
        1,
    )
    assert provider.operation_timeout_period_s == 300.0


def test_very_old_provisioner_spelling() -> None:
    master = _master("provisioner:\n  provider: gcp\n  project: p\n")
    assert master.provisioner is not None and master.provisioner.type == "gcp"


def test_empty_master_is_one_default_pool() -> None:
    assert _master("port: 8080\n").pool_names() == ["default"]


@pytest.mark.parametrize(
    ("text", "line", "loc", "needle"),
    [
        (
            "resource_manager:\n  scheduler:\n    type: fifo\n",
            3,
            "resource_manager.scheduler.type",
            "expected one of fair_share, priority, round_robin",
        ),
        (
            "resource_manager:\n  scheduler:\n    fitting_policy: first\n",
            3,
            "resource_manager.scheduler.fitting_policy",
            "expected one of best, worst",
        ),
        (
            "resource_manager:\n  scheduler:\n    default_priority: 100\n",
            3,
            "resource_manager.scheduler.default_priority",
            "less than or equal to 99",
        ),
        (
            "resource_manager:\n  type: yarn\n",
            2,
            "resource_manager.type",
            "expected one of agent, kubernetes, slurm, pbs",
        ),
        (
            "resource_pools:\n  - pool_name: p\n    provider:\n      type: azure\n",
            4,
            "resource_pools[0].provider.type",
            "expected one of aws, gcp, hpc, local",
        ),
        (
            "resource_pools:\n  - pool_name: p\n    provider:\n      type: aws\n"
            "      max_idle_agent_period: 20\n",
            5,
            "resource_pools[0].provider.max_idle_agent_period",
            "expected a duration",
        ),
        (
            "resource_pools:\n  - pool_name: p\n    provider:\n      type: aws\n      project: x\n",
            3,
            "resource_pools[0].provider",
            "project: not a field of a aws",
        ),
        (
            "resource_pools:\n  - pool_name: p\n    provider:\n      type: gcp\n"
            "      instance_type: n1-standard-8\n",
            3,
            "resource_pools[0].provider",
            "instance_type of a gcp provider is a mapping",
        ),
        (
            "resource_pools:\n  - pool_name: p\n    provider:\n      type: aws\n"
            "      min_instances: 3\n      max_instances: 1\n",
            3,
            "resource_pools[0].provider",
            "max_instances is below min_instances",
        ),
        ("resource_pools:\n  - pool_nam: p\n", 2, "resource_pools[0].pool_nam", "unknown field"),
    ],
)
def test_mistakes(text: str, line: int, loc: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        _master(text)
    issues = [(i.line, i.loc) for i in info.value.issues]
    assert (line, loc) in issues
    assert any(needle in i.message for i in info.value.issues)


def test_default_pools_must_exist(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        "resource_manager:\n  default_aux_resource_pool: cpu\n"
        "  default_compute_resource_pool: gpus\nresource_pools:\n"
        "  - pool_name: cpu\n  - pool_name: gpu\n",
    )
    assert problems == [
        (
            3,
            "resource_manager.default_compute_resource_pool",
            "names no pool 'gpus'; expected one of cpu, gpu",
        ),
    ]


def test_unset_default_pool_is_default_which_must_exist(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "resource_pools:\n  - pool_name: gpu\n")
    assert [p[2] for p in problems] == [
        "default_aux_resource_pool is unset, so it is 'default', which names no pool; "
        "set it to one of gpu",
        "default_compute_resource_pool is unset, so it is 'default', which names no pool; "
        "set it to one of gpu",
    ]


def test_duplicate_pools_and_mixed_formats(tmp_path: Path) -> None:
    duplicate = _problems(
        tmp_path, "resource_pools:\n  - pool_name: default\n  - pool_name: default\n"
    )
    assert duplicate == [(3, "resource_pools[1].pool_name", "pool 'default' is defined twice")]
    mixed = _problems(tmp_path, "scheduler:\n  type: priority\nresource_pools: []\n")
    assert [(p[0], p[1]) for p in mixed] == [(3, "resource_pools")]
    assert "legacy top-level scheduler" in mixed[0][2]


def test_unknown_key_with_a_block_value_is_reported_at_the_key_line() -> None:
    with pytest.raises(ConfigError) as info:
        _master("dbb:\n  user: x\n")
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (1, "dbb")
