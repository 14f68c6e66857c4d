"""Beat's serving pass (services/runtime/serving.py) on the fake provider: a replicated service's
replicas submitted as their own requests, idempotently, and cancelled with the service."""

from __future__ import annotations

import dataclasses

from runtime_driver import Driver

from corral.services.queues import dispatch
from corral.services.runtime import provisioning, requests, serving
from corral.shared.config.task import Task
from corral.shared.lifecycle import RequestState
from corral.shared.records import Instance, LaunchRequest

SERVICE = {
    "name": "web",
    "workload_type": "service",
    "resources": {"cloud": "local", "instance_type": "cpu-2", "ports": 9000},
    "service": {"readiness_probe": "/", "replicas": 3, "load_balancing_policy": "round_robin"},
    "envs": {"MODEL": "m"},
    "run": "serve",
}


def _submit(driver: Driver) -> str:
    return requests.submit(driver.deps, Task.model_validate(SERVICE)).id


def test_the_pass_submits_each_missing_replica_once(driver: Driver) -> None:
    # The local cloud's machines share this host's network: each replica gets its own port.
    driver.fake.features = dataclasses.replace(driver.fake.features, shared_network=True)
    rid = _submit(driver)
    assert serving.index(driver.deps).members() == [rid]
    driver.queue.clear()
    counts = serving.tick(driver.deps)
    assert counts == {"launched": 2}
    for n, port in ((2, 9001), (3, 9002)):
        child = driver.deps.store.get_request(f"{rid}-r{n}")
        assert child is not None and child.state == RequestState.PENDING
        task = Task.model_validate(child.task)
        assert task.envs == {"MODEL": "m", "SKYPILOT_SERVE_REPLICA_ID": str(n)}
        assert task.service_port() == port
        assert task.labels[serving.LABEL_SERVICE] == rid
        assert task.labels[serving.LABEL_REPLICA] == str(n)
        spec = task.service_spec()
        assert spec is not None and not spec.replicated  # a replica is one plain service
        assert task.readiness_probe() is not None
        assert serving.index(driver.deps).members() == [rid]  # replicas are not services
    assert sorted(p.args[0] for p in driver.queue if p.name == dispatch.ADMIT) == [
        f"{rid}-r2",
        f"{rid}-r3",
    ]
    parent = driver.deps.store.get_request(rid)
    assert parent is not None and parent.serving is not None
    assert parent.serving.replicas == [1, 2, 3] and parent.serving.next_id == 4
    assert parent.serving.target == 3 and parent.serving.ready == []
    # Nothing is up yet: the next pass launches nothing more.
    assert serving.tick(driver.deps).get("launched", 0) == 0


def test_the_services_own_request_is_replica_1_in_its_envs(driver: Driver) -> None:
    envs = provisioning._envs(Task.model_validate(SERVICE))
    assert envs["SKYPILOT_SERVE_REPLICA_ID"] == "1"
    assert envs["CORRAL_SERVICE_PORT"] == "9000"
    assert "9000" in envs["CORRAL_READINESS_PROBE"]


def test_a_cancelled_service_cancels_its_replicas_and_leaves_the_index(driver: Driver) -> None:
    rid = _submit(driver)
    serving.tick(driver.deps)
    requests.cancel(driver.deps, rid)
    serving.tick(driver.deps)
    for n in (2, 3):
        child = driver.deps.store.get_request(f"{rid}-r{n}")
        assert child is not None and child.state == RequestState.CANCELLED
    serving.tick(driver.deps)
    assert serving.index(driver.deps).members() == []


def test_a_retiring_replica_is_out_of_rotation_and_replaced(driver: Driver) -> None:
    task = {**SERVICE, "service": {"replicas": 2}}  # no probe: a running replica is ready
    rid = requests.submit(driver.deps, Task.model_validate(task)).id
    serving.tick(driver.deps)
    driver.run()
    for n, request_id in enumerate((rid, f"{rid}-r2")):  # the fake's machines have no address

        def place(i: Instance, n: int = n) -> bool:
            i.address = f"10.0.0.{n + 1}"
            return True

        for inst in driver.deps.store.list_instances(request_id=request_id):
            driver.deps.store.update_instance(inst.id, place)
    serving.tick(driver.deps)
    parent = driver.deps.store.get_request(rid)
    assert parent is not None and parent.serving is not None
    assert [(r.replica, r.url) for r in parent.serving.ready] == [
        (1, "http://10.0.0.1:9000"),
        (2, "http://10.0.0.2:9000"),  # each machine its own network: the same port
    ]
    now = driver.deps.now()

    def retire(r: LaunchRequest) -> bool:
        assert r.serving is not None
        r.serving = r.serving.model_copy(update={"retiring": {"2": now}})
        return True

    driver.deps.store.update_request(rid, retire)
    assert serving.tick(driver.deps) == {"launched": 1}
    parent = driver.deps.store.get_request(rid)
    assert parent is not None and parent.serving is not None
    assert [r.replica for r in parent.serving.ready] == [1]  # 2 is going: out of rotation
    assert parent.serving.replicas == [1, 2, 3] and parent.serving.retiring == {"2": now}
    assert driver.deps.store.get_request(f"{rid}-r3") is not None
