"""A cloud registered from the tests alone (``tests/fakes/lambda_cloud``: one package, and one
registry line) plans from the offerings its provider lists (it ships no catalog CSV), launches
through the runtime's one launch path, and fails over: between its zones and regions, and on to
the next cloud."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from runtime_driver import Driver

from corral.services.providers import registry
from corral.services.providers.registry import Cloud, register_cloud
from corral.services.queues import dispatch
from corral.services.runtime import requests
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import plan_launch
from corral.shared.catalog import load_catalog
from corral.shared.config.task import Task
from corral.shared.errors import CapacityError
from corral.shared.lifecycle import RequestState

from fakes import lambda_cloud
from fakes.provider import FakeProvider


@pytest.fixture
def lambda_driver(
    make_deps: Callable[..., Deps], fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Driver]:
    register_cloud(lambda_cloud.NAME, Cloud(lambda_cloud.build))  # the one registry line
    deps = make_deps()
    deps.settings = deps.settings.model_copy(update={"clouds": [lambda_cloud.NAME, "local"]})
    drv = Driver(deps, fake)
    monkeypatch.setattr(dispatch, "send", drv.send)
    yield drv
    registry.CLOUDS.pop(lambda_cloud.NAME)


def _lambda(driver: Driver) -> Any:
    return driver.deps.provider(lambda_cloud.NAME)  # built by the registry, as in a worker


def _submit(driver: Driver, resources: dict[str, Any]) -> str:
    task = Task.model_validate({"name": "svc", "resources": resources})
    return requests.submit(driver.deps, task).id


def test_the_shipped_catalog_knows_nothing_of_the_cloud() -> None:
    assert lambda_cloud.NAME not in load_catalog().clouds
    assert lambda_cloud.NAME not in registry.registered_clouds()


def test_a_cloud_without_a_catalog_plans_from_the_offerings_its_provider_lists(
    lambda_driver: Driver,
) -> None:
    task = Task.model_validate({"resources": {"accelerators": "A10:1"}})
    chain = plan_launch(lambda_driver.deps, task).candidates
    assert [(c.cloud, c.instance_type, c.zone) for c in chain] == [
        ("lambda", "gpu_1x_a10", "us-west-1a"),
        ("lambda", "gpu_1x_a10", "us-west-1b"),
        ("lambda", "gpu_1x_a10", "us-east-1a"),
    ]
    assert chain[0].cost_usd_per_hour == pytest.approx(0.75)
    assert _lambda(lambda_driver).lists >= 1


def test_it_launches_and_fails_over_between_its_zones_and_regions(lambda_driver: Driver) -> None:
    cloud = _lambda(lambda_driver)
    for zone in ("us-west-1a", "us-west-1b"):
        cloud.fail_next(CapacityError(f"{zone}: no capacity", code="insufficient-capacity"), zone)
    rid = _submit(lambda_driver, {"cloud": "lambda", "accelerators": "A10:1"})
    lambda_driver.run()
    req = lambda_driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING, req
    assert [(a.zone, a.outcome) for a in req.attempts] == [
        ("us-west-1a", "capacity"),
        ("us-west-1b", "capacity"),
        ("us-east-1a", "ok"),
    ]
    assert [s.zone for s in cloud.launched()] == ["us-west-1a", "us-west-1b", "us-east-1a"]
    (inst,) = lambda_driver.deps.store.list_instances(request_id=rid)
    assert (inst.cloud, inst.zone, inst.instance_type) == ("lambda", "us-east-1a", "gpu_1x_a10")
    assert lambda_driver.fake.launched() == []  # the local cloud was never asked


def test_an_exhausted_new_cloud_fails_over_to_the_next_cloud(lambda_driver: Driver) -> None:
    cloud = _lambda(lambda_driver)
    cloud.fail_next(CapacityError("us-east-1a: no capacity", code="insufficient-capacity"))
    rid = _submit(lambda_driver, {"cpus": 8, "memory": 32})
    lambda_driver.run()
    req = lambda_driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING, req
    assert [(a.cloud, a.instance_type, a.outcome) for a in req.attempts][:1] == [
        ("lambda", "cpu_8x", "capacity")
    ]
    assert req.attempts[-1].cloud == "local" and req.attempts[-1].outcome == "ok"
    assert [s.instance_type for s in cloud.launched()] == ["cpu_8x"]


def test_its_machines_logs_are_read_through_its_provider(lambda_driver: Driver) -> None:
    rid = _submit(lambda_driver, {"cloud": "lambda", "instance_type": "cpu_8x"})
    lambda_driver.run()
    (inst,) = lambda_driver.deps.store.list_instances(request_id=rid)
    _lambda(lambda_driver).logs[inst.provider_id] = b"hello from the moon of lambda\n"
    text = requests.read_logs(lambda_driver.deps, rid)
    assert text == f"==> {inst.id} ({inst.provider_id}) <==\nhello from the moon of lambda\n"


RAY_FILE = {
    "cluster_name": "moon",
    "provider": {"type": "lambda", "region": "us-west-1"},
    "head_node_type": "head",
    "available_node_types": {
        "head": {
            "node_config": {"InstanceType": "cpu_8x", "SshKeyName": "moon-key"},
            "resources": {"CPU": 8},
            "max_workers": 0,
        },
    },
}


def _ray_node(cloud: str | None) -> tuple[Any, Any]:
    from corral.services.state.clusters import ClusterNode, ClusterRecord

    rec = ClusterRecord(
        name="moon",
        uid="u1",
        file_name="moon.yaml",
        cluster=RAY_FILE,
        cloud=cloud,
        created_at=0.0,
        updated_at=0.0,
    )
    node = ClusterNode(
        request_id="r-1", node_type="head", kind="head", launch_hash="h", committed_at=0.0
    )
    return rec, node


def test_a_ray_file_for_the_new_cloud_launches_its_node_config_as_written(
    lambda_driver: Driver,
) -> None:
    """No rules of its own: its node configs go to its provider as written, in the file's
    region (what Ray's cluster launcher does for any cloud's file)."""
    from corral.services.runtime.autoscaling import node_task

    assert registry.stand_in_clouds() == ("local",)  # it plays no other cloud's files
    task = node_task(lambda_driver.deps, *_ray_node(None))
    res = task.resources
    assert (res.cloud, res.region, res.instance_type) == ("lambda", "us-west-1", "cpu_8x")
    assert task.advanced_instance_config == {"InstanceType": "cpu_8x", "SshKeyName": "moon-key"}


def test_the_local_cloud_plays_a_ray_file_written_for_the_new_cloud(
    lambda_driver: Driver,
) -> None:
    """Played on the local cloud, the file's node configs and region are the other cloud's:
    the node launches a local type with its resources, with no node config."""
    from corral.services.runtime.autoscaling import cluster_spec, node_task

    rec, node = _ray_node("local")
    assert cluster_spec(lambda_driver.deps, rec).node_types["head"].instance_type is not None
    task = node_task(lambda_driver.deps, rec, node)
    res = task.resources
    assert res.cloud == "local" and res.region is None
    assert (
        res.instance_type == cluster_spec(lambda_driver.deps, rec).node_types["head"].instance_type
    )
    assert task.advanced_instance_config is None


def test_the_registry_line_gives_it_its_queue_and_its_place_in_every_list(
    lambda_driver: Driver,
) -> None:
    """Nothing else names it: its provisioning queue, the workers' queues, the clouds
    ``cluster --cloud`` and the API accept, all derive from the registry; its provider
    declares no optional feature (the fake's ``Features()``), so it is probed for none."""
    from corral.services.providers.base import Features, can_stop, node_work_of
    from corral.services.queues.task_names import role_queues

    assert lambda_cloud.NAME in registry.registered_clouds()
    assert "provision.lambda" in role_queues(registry.registered_clouds())["provision"]
    rid = _submit(lambda_driver, {"cloud": "lambda", "instance_type": "cpu_8x"})
    assert [(p.name, p.queue) for p in lambda_driver.queue] == [
        (dispatch.ADMIT, "provision.lambda")
    ]
    lambda_driver.run()
    req = lambda_driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    cloud = _lambda(lambda_driver)
    assert cloud.features == Features() and not can_stop(cloud) and node_work_of(cloud) is None
