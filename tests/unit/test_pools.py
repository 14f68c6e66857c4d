"""Determined's pool rules: all-or-nothing pool schedulers, legacy format, task routing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.shared.config.detect import load_as
from corral.shared.config.master_config import MasterConfig
from corral.shared.config.task import Task
from corral.shared.resource_pools import (
    ResolvedPools,
    SchedulerSettings,
    UnknownPoolError,
    resolve_pools,
    route_task,
)

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def _resolve(name: str) -> ResolvedPools:
    master, _ = load_as(SEEDS / name, MasterConfig)
    return resolve_pools(master)


def _task(resources: dict[str, Any]) -> Task:
    return Task.model_validate({"resources": resources})


def test_seed_pool_scheduler_inherits_nothing() -> None:
    # The seed: cluster round_robin/best, pool sets only fitting_policy: worst -> the pool
    # ends up priority/worst, because an unset type means priority (Determined's
    # scheduler_config.go since its PR #9385; fair_share before).
    pools = _resolve("determined-master-round-robin-worst.yaml")
    [pool] = pools.pools
    assert (pool.pool_name, pool.scheduler.type, pool.scheduler.fitting_policy) == (
        "pool1",
        "priority",
        "worst",
    )
    assert pool.scheduler.inherited is False
    assert (pools.default_aux_resource_pool, pools.default_compute_resource_pool) == (
        "pool1",
        "pool1",
    )


def test_seed_corrected_example_is_round_robin_worst() -> None:
    [pool] = _resolve("determined-master-corrected.yaml").pools
    assert (pool.scheduler.type, pool.scheduler.fitting_policy) == ("round_robin", "worst")


def test_seed_legacy_format_is_one_default_pool_for_both() -> None:
    pools = _resolve("determined-master-legacy.yaml")
    assert pools.names() == ("default",)
    assert (pools.default_aux_resource_pool, pools.default_compute_resource_pool) == (
        "default",
        "default",
    )
    [pool] = pools.pools
    assert pool.scheduler == SchedulerSettings(
        type="priority", fitting_policy="best", preemption=True, default_priority=42
    )
    assert pool.provider is not None
    assert (pool.provider["type"], pool.provider["instance_type"]) == ("aws", "p3dn.24xlarge")
    assert pool.provider["max_idle_agent_period_s"] == 1200.0


def test_pool_without_scheduler_inherits_the_whole_cluster_scheduler() -> None:
    pools = _resolve("determined-master-two-pools.yaml")
    for pool in pools.pools:
        assert pool.scheduler == SchedulerSettings(
            type="priority", fitting_policy="best", preemption=True, inherited=True
        )


def test_blank_pool_scheduler_also_inherits() -> None:
    master = MasterConfig.model_validate(
        {
            "resource_manager": {"scheduler": {"type": "priority", "fitting_policy": "worst"}},
            "resource_pools": [{"pool_name": "default", "scheduler": {}}],
        }
    )
    [pool] = resolve_pools(master).pools
    assert (pool.scheduler.type, pool.scheduler.fitting_policy, pool.scheduler.inherited) == (
        "priority",
        "worst",
        True,
    )


def test_no_scheduler_anywhere_is_priority_best() -> None:
    # Determined's DefaultSchedulerConfig (scheduler_config.go): priority, best fit.
    [pool] = resolve_pools(MasterConfig.model_validate({})).pools
    assert (pool.pool_name, pool.scheduler.type, pool.scheduler.fitting_policy) == (
        "default",
        "priority",
        "best",
    )


def test_routing_on_the_seed_pools() -> None:
    pools = _resolve("determined-master-two-pools.yaml")
    assert route_task(pools, _task({"slots": 0})) == "aws-cpu"  # a TensorBoard
    assert route_task(pools, _task({})) == "aws-v100"  # slots unset: 1
    assert route_task(pools, _task({"accelerators": "V100:8"})) == "aws-v100"
    assert route_task(pools, _task({"slots": 0, "resource_pool": "aws-v100"})) == "aws-v100"
    with pytest.raises(UnknownPoolError) as info:
        route_task(pools, _task({"resource_pool": "pool1"}))
    assert (
        str(info.value) == "resource pool 'pool1' does not exist; expected one of aws-cpu, aws-v100"
    )


def test_missing_default_pool_is_refused() -> None:
    master = MasterConfig.model_validate(
        {
            "resource_manager": {"default_compute_resource_pool": "gpu"},
            "resource_pools": [{"pool_name": "default"}],
        }
    )
    with pytest.raises(UnknownPoolError, match="default_compute_resource_pool 'gpu'"):
        resolve_pools(master)


# --- properties over random master configs -------------------------------------------------

SCHEDULER_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["fair_share", "priority", "round_robin"]),
        "fitting_policy": st.sampled_from(["best", "worst"]),
        "preemption": st.booleans(),
        "allow_heterogeneous_fits": st.booleans(),
        "default_priority": st.integers(1, 99),
    },
)
POOL_NAMES = st.lists(
    st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), min_size=1, max_size=5, unique=True
)


@st.composite
def masters(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(POOL_NAMES)
    pools = []
    for name in names:
        pool: dict[str, Any] = {"pool_name": name}
        choice = draw(st.sampled_from(["absent", "null", "blank", "set"]))
        if choice == "null":
            pool["scheduler"] = None
        elif choice == "blank":
            pool["scheduler"] = {}
        elif choice == "set":
            pool["scheduler"] = draw(SCHEDULER_FIELDS.filter(bool))
        pools.append(pool)
    manager: dict[str, Any] = {
        "default_aux_resource_pool": draw(st.sampled_from(names)),
        "default_compute_resource_pool": draw(st.sampled_from(names)),
    }
    if draw(st.booleans()):
        manager["scheduler"] = draw(SCHEDULER_FIELDS)
    return {"resource_manager": manager, "resource_pools": pools}


@settings(max_examples=200, deadline=None)
@given(masters())
def test_a_pool_with_any_scheduler_field_never_inherits(data: dict[str, Any]) -> None:
    resolved = resolve_pools(MasterConfig.model_validate(data))
    cluster = data["resource_manager"].get("scheduler") or {}
    for written, pool in zip(data["resource_pools"], resolved.pools, strict=True):
        own = written.get("scheduler") or {}
        settings_ = pool.scheduler
        if own:
            assert not settings_.inherited
            assert settings_.type == own.get("type", "priority")
            assert settings_.fitting_policy == own.get("fitting_policy", "best")
            assert settings_.preemption == own.get("preemption")
            assert settings_.default_priority == own.get("default_priority")
            assert settings_.allow_heterogeneous_fits == own.get("allow_heterogeneous_fits")
        else:
            assert settings_.inherited
            assert settings_.type == cluster.get("type", "priority")
            assert settings_.fitting_policy == cluster.get("fitting_policy", "best")
            assert settings_.preemption == cluster.get("preemption")


TASK_RESOURCES = st.fixed_dictionaries(
    {},
    optional={
        "slots": st.integers(0, 16),
        "accelerators": st.sampled_from(["A100", "A100:8", "L4:2", "{A10:1, L4:1}"]),
    },
)


@settings(max_examples=200, deadline=None)
@given(masters(), TASK_RESOURCES, st.one_of(st.none(), st.text("abcxyz-", min_size=1, max_size=6)))
def test_routing_invariants(
    data: dict[str, Any], resources: dict[str, Any], explicit: str | None
) -> None:
    pools = resolve_pools(MasterConfig.model_validate(data))
    if explicit is not None:
        resources = {**resources, "resource_pool": explicit}
    task = _task(resources)
    if explicit is not None and explicit not in pools.names():
        with pytest.raises(UnknownPoolError) as info:
            route_task(pools, task)
        assert info.value.known == pools.names()
        return
    chosen = route_task(pools, task)
    assert chosen in pools.names()
    if explicit is not None:
        assert chosen == explicit
    elif task.slots() == 0:
        assert chosen == pools.default_aux_resource_pool
    else:
        assert chosen == pools.default_compute_resource_pool
