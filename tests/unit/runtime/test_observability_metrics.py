"""The metrics of the runtime's steps on the fake provider: event counters move once per event
however often it is written, and the scrape-time gauges read the store and the pool ledgers."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY
from runtime_driver import SMALL_POOL, Driver
from runtime_driver import SMALL_POOL_WORKLOAD as WORKLOAD

from corral.services.observability.state_metrics import StateCollector
from corral.services.runtime import requests
from corral.services.runtime.attempt_record import finish_attempt
from corral.services.runtime.pooled.registry import apply_pool
from corral.shared.config.task import Task
from corral.shared.errors import CapacityError
from corral.shared.lifecycle import RequestState


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Sample values now, to compare with later ones (counters are per process)."""

    def __init__(self, *samples: tuple[str, dict[str, str]]) -> None:
        self.samples = samples
        self.before = [value(n, **lab) for n, lab in samples]

    def __call__(self) -> list[float]:
        return [value(n, **lab) - b for (n, lab), b in zip(self.samples, self.before, strict=True)]


def gauges(driver: Driver) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in StateCollector(driver.deps).collect():
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def _submit(driver: Driver, task: dict[str, Any]) -> str:
    return requests.submit(driver.deps, Task.model_validate(task)).id


TASK = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}


def test_a_failover_counts_each_attempt_once_and_its_depth(driver: Driver) -> None:
    delta = Delta(
        ("corral_attempts_total", {"cloud": "local", "region": "lab-east", "outcome": "capacity"}),
        ("corral_attempts_total", {"cloud": "local", "region": "lab-east", "outcome": "ok"}),
        ("corral_failover_depth_count", {"result": "running"}),
        ("corral_failover_depth_sum", {"result": "running"}),
        ("corral_time_to_capacity_seconds_count", {"route": "direct"}),
        ("corral_requests_created_total", {"route": "direct"}),
    )
    driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    rid = _submit(driver, TASK)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert delta() == [1, 1, 1, 1, 1, 1]
    # The same outcome written again (a redelivered task) changes nothing, so counts nothing.
    finish_attempt(driver.deps, rid, req.attempts[0].attempt_id, "capacity", "again")
    assert delta() == [1, 1, 1, 1, 1, 1]


def test_an_exhausted_chain_counts_its_whole_depth(driver: Driver) -> None:
    delta = Delta(
        ("corral_failover_depth_count", {"result": "exhausted"}),
        ("corral_failover_depth_sum", {"result": "exhausted"}),
        ("corral_requests_ended_total", {"route": "direct", "state": "FAILED"}),
    )
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    _submit(driver, {**TASK, "retry_until_up": False})  # fail fast: the request ends
    driver.run()
    assert delta() == [1, 3, 1]


def test_an_exhausted_chain_that_waits_counts_its_depth_and_ends_nothing(
    driver: Driver,
) -> None:
    delta = Delta(
        ("corral_failover_depth_count", {"result": "exhausted"}),
        ("corral_requests_ended_total", {"route": "direct", "state": "FAILED"}),
    )
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    rid = _submit(driver, TASK)
    driver.run()
    assert driver.deps.store.get_request(rid).state == RequestState.WAITING  # type: ignore[union-attr]
    assert delta() == [1, 0]


def test_state_gauges_read_requests_instances_cost_and_blocks(driver: Driver) -> None:
    driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    _submit(driver, TASK)
    _submit(driver, {**TASK, "resources": {**TASK["resources"], "use_spot": True}})
    driver.run()
    g = gauges(driver)
    assert g[("corral_store_up", ())] == 1
    assert g[("corral_requests", (("state", "RUNNING"),))] == 2
    assert g[("corral_requests_live", (("route", "direct"), ("state", "RUNNING")))] == 2
    markets = {dict(lab)["market"]: v for (n, lab), v in g.items() if n == "corral_instances"}
    assert markets == {"on_demand": 1, "spot": 1}
    cost = {dict(lab)["market"]: v for (n, lab), v in g.items() if n == "corral_cost_usd_per_hour"}
    assert cost == pytest.approx({"on_demand": 0.10, "spot": 0.03})  # runtime.yaml's cpu-2
    blocked = (("cloud", "local"), ("outcome", "capacity"), ("scope", "zone"))
    assert g[("corral_blocked_scopes", blocked)] == 1


def test_pool_gauges_show_partitions_machines_and_their_cost(driver: Driver) -> None:
    apply_pool(
        driver.deps, name="small", kind="machine_pool", file_name="small.yaml",
        spec=SMALL_POOL, cloud="local",
    )  # fmt: skip
    driver.queue.clear()
    delta = Delta(("corral_time_to_capacity_seconds_count", {"route": "machine_pool"}))
    first = _submit(driver, {**WORKLOAD, "name": "first"})
    _submit(driver, {**WORKLOAD, "name": "second"})

    def placed() -> bool:
        req = driver.deps.store.get_request(first)
        return req is not None and req.state == RequestState.RUNNING

    driver.run(until=placed)
    g = gauges(driver)
    part = (("machine_type", "cpu"), ("partition", "shared"), ("pool", "small"))
    assert g[("corral_pool_partition_size_machines", part)] == 1
    assert g[("corral_pool_partition_held_machines", part)] == 1
    up = (("cloud", "local"), ("market", "on_demand"), ("pool", "small"), ("status", "up"))
    assert g[("corral_pool_machines", up)] == 1
    phases = {dict(lab)["phase"]: v for (n, lab), v in g.items() if n == "corral_pool_workloads"}
    assert phases == {"running": 1, "pending": 1}
    # The pool machine is priced once: its workload's assignment is not a machine of its own.
    cost = (("cloud", "local"), ("market", "on_demand"))
    assert g[("corral_cost_usd_per_hour", cost)] == pytest.approx(0.10)
    assert all(n != "corral_instances" for n, _ in g)
    assert delta() == [1]


def test_an_unreachable_store_is_a_gauge_not_an_error(driver: Driver) -> None:
    driver.deps.settings = driver.deps.settings.model_copy(
        update={"redis_url": "redis://127.0.0.1:1/0"}
    )
    driver.deps.__dict__.pop("redis", None)
    driver.deps.__dict__.pop("store", None)
    assert gauges(driver) == {("corral_store_up", ()): 0.0}


def test_scrapes_in_a_burst_share_one_read_of_the_store(driver: Driver) -> None:
    """Issue #47 item 7: each scrape read every live request, for anyone who asked. Scrapes
    within SCRAPE_REUSE_S of a read are answered from it; the next one after reads again."""
    now = [100.0]
    collector = StateCollector(driver.deps, reuse_s=5.0, clock=lambda: now[0])

    def pending() -> float:
        for family in collector.collect():
            for s in family.samples:
                if s.name == "corral_requests" and s.labels == {"state": "PENDING"}:
                    return float(s.value)
        raise AssertionError("no corral_requests{state=PENDING}")

    first = pending()
    driver.deps.store.create_request(
        requests._new_request(driver.deps, Task.model_validate(TASK)), event="test"
    )
    now[0] += 4.9
    assert pending() == first  # answered from the first read: the store was not read
    now[0] += 0.2
    assert pending() == first + 1  # past the window: read again
