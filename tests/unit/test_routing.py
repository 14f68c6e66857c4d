"""Routing as data: where a task goes, decided by a pure function of the task and the registry
(shared/routing.py), and the route as stored on a request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.shared.catalog import load_catalog
from corral.shared.config.localcloud import load_local_cloud
from corral.shared.config.machine_pool import MachinePool
from corral.shared.config.master_config import MasterConfig
from corral.shared.config.task import Task
from corral.shared.records import LaunchRequest
from corral.shared.routing import (
    DeterminedRoute,
    Direct,
    MachinePoolRoute,
    MasterView,
    Refusal,
    RegistryView,
    pool_of,
    reads_pools,
    route,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IN_SEED = {"cloud_deployment": {"machine_pool": "seed"}}
SMALL = {"worker_nodes": [{"instance_type": "ondemand-a100", "flags": IN_SEED}]}


def _view(*, pools: bool = True, master: bool = False) -> RegistryView:
    local = load_local_cloud(FIXTURES / "localcloud" / "pools.yaml")
    spec = yaml.safe_load((FIXTURES / "pools" / "seed-pool-local.yaml").read_text())
    config = yaml.safe_load((FIXTURES / "pools" / "master-local.yaml").read_text())
    return RegistryView(
        catalog=load_catalog().with_offerings(local.offerings()),
        clouds=("local", "aws", "gcp"),
        machine_pools={"seed": MachinePool.model_validate(spec)} if pools else {},
        master=MasterView("det", MasterConfig.model_validate(config)) if master else None,
    )


def _task(**fields: Any) -> Task:
    return Task.model_validate({"name": "t", "run": "true", **fields})


def test_a_plain_task_goes_direct_and_an_impossible_one_is_refused() -> None:
    assert route(_task(resources={"cpus": 1}), _view()) == Direct()
    refused = route(_task(resources={"accelerators": "H100:64"}), _view())
    assert isinstance(refused, Refusal) and refused.reasons


@pytest.mark.parametrize(
    "fields",
    [
        {"resources": {"cpus": 1}},
        {"resources": {"accelerators": "H100:64"}},
        {"resources": {"cloud": "local"}, "num_nodes": 2},
        {"compute_config": SMALL},
        {"compute_config": "compute.yaml"},
        {"resources": {"resource_pool": "default"}},
        {"resources": {"slots": 1}},
    ],
)
def test_a_task_that_does_not_read_the_pools_routes_the_same_without_them(
    fields: dict[str, Any],
) -> None:
    # Submit reads the registered pools from Redis only for a task routing looks them up for.
    task = _task(**fields)
    full, bare = _view(master=True), _view(pools=False, master=False)
    if not reads_pools(task):
        assert route(task, bare) == route(task, full)
    else:  # each of these goes to (or is refused by) a pool once one is registered
        assert route(task, full) != Direct()


def test_a_compute_config_naming_a_pool_is_its_workload() -> None:
    decided = route(_task(compute_config=SMALL), _view())
    assert decided == MachinePoolRoute(pool="seed")
    assert pool_of(decided) == "seed"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"compute_config": "compute.yaml"}, "is a path"),
        (
            {
                "compute_config": {
                    **SMALL,
                    "worker_nodes": [{"instance_type": "x", "flags": IN_SEED}],
                }
            },
            "not in pool 'seed'",
        ),
        ({"compute_config": SMALL, "num_nodes": 3}, "hold at most 2"),
    ],
)
def test_a_workload_that_could_never_run_is_refused(fields: dict[str, Any], expected: str) -> None:
    decided = route(_task(**fields), _view())
    assert isinstance(decided, Refusal) and expected in decided.reasons[0], decided


def test_an_unregistered_pool_is_refused_with_the_command_that_registers_it() -> None:
    decided = route(_task(compute_config=SMALL), _view(pools=False))
    assert isinstance(decided, Refusal)
    assert "corral pools apply FILE --name seed" in decided.reasons[0]


def test_slots_go_to_the_masters_pools_only_when_a_master_is_registered() -> None:
    assert route(_task(resources={"slots": 1}), _view(master=True)) == DeterminedRoute(
        master="det", resource_pool="compute"
    )
    assert route(_task(resources={"slots": 0}), _view(master=True)) == DeterminedRoute(
        master="det", resource_pool="aux"
    )
    assert isinstance(route(_task(resources={"slots": 1}), _view()), Direct)


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"resource_pool": "aux", "slots": 1}, "has no slots"),
        ({"slots": 6}, "can never give 6 slots"),
        ({"resource_pool": "nope", "slots": 1}, "'nope' does not exist"),
        ({"resource_pool": "static", "slots": 1}, "static pool"),
    ],
)
def test_determined_refusals_name_the_reason(resources: dict[str, Any], expected: str) -> None:
    decided = route(_task(resources=resources), _view(master=True))
    assert isinstance(decided, Refusal) and expected in decided.reasons[0], decided


def test_a_named_pool_without_a_master_is_refused() -> None:
    decided = route(_task(resources={"resource_pool": "compute", "slots": 1}), _view())
    assert isinstance(decided, Refusal) and "no master config is registered" in decided.reasons[0]


def test_the_route_is_stored_on_the_request_and_old_records_read_as_routes() -> None:
    base = {"id": "r-1", "task": {}, "created_at": 0.0, "updated_at": 0.0}
    stored = LaunchRequest.model_validate(
        {**base, "route": {"kind": "determined", "master": "det", "resource_pool": "aux"}}
    )
    again = LaunchRequest.model_validate_json(stored.model_dump_json())
    assert again.route == DeterminedRoute(master="det", resource_pool="aux")
    assert LaunchRequest.model_validate({**base, "pool": "seed"}).route == MachinePoolRoute(
        pool="seed"
    )
    old = LaunchRequest.model_validate({**base, "master": "det", "resource_pool": "aux"})
    assert old.route == DeterminedRoute(master="det", resource_pool="aux")
    assert "pool" not in old.model_dump() and LaunchRequest.model_validate(base).route == Direct()
