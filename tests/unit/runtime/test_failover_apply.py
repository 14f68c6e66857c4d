"""Plan, then apply, in the runtime: the walk's decision is planned from the request as the
compare-and-set read it and written by that compare-and-set; a plan made from a record that
moved on meanwhile is never written as made.

Nomad's documented semantics for its plan applier
(developer.hashicorp.com/nomad/docs/concepts/scheduling/scheduling: plans are made from a
snapshot by schedulers working in parallel, and the leader's plan applier rejects what no longer
fits the current state, the scheduler planning again from fresh state) are the model: here the
snapshot is the request's record and the check its version."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_driver import Driver

from corral.services.queues import dispatch
from corral.services.runtime import failover, provisioning, requests
from corral.shared.config.task import Task
from corral.shared.failover import Within
from corral.shared.failover_plan import Attempt
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest

SERVICE = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}


def _provisioning(driver: Driver) -> str:
    """A request admitted (its first attempt published, not run)."""
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    assert provisioning.admit(driver.deps, rid) == "attempt 0"
    driver.queue.clear()
    return rid


def _race_once(driver: Driver, monkeypatch: pytest.MonkeyPatch, change: Any) -> list[str]:
    """Before the next compare-and-set of a request, another writer gets in first with
    ``change``; returns a log of the writes tried ("lost" / "won")."""
    store = driver.deps.store
    cas = store._cas
    log: list[str] = []
    raced = [False]

    def racing_cas(*, keys: list[str], args: list[Any]) -> Any:
        if not raced[0]:
            raced[0] = True
            rid = str(args[0])
            store.update_request(rid, change)  # the other writer (its own CAS, not raced)
        written = cas(keys=keys, args=args)
        log.append("won" if int(written) == 1 else "lost")
        return written

    monkeypatch.setattr(store, "_cas", racing_cas)
    return log


def test_a_walk_plans_from_the_record_and_writes_its_decision_once(driver: Driver) -> None:
    rid = _provisioning(driver)
    walked = failover.walk(driver.deps, rid, 0, Within.REGION)
    assert walked.outcome == "attempt 1"
    assert walked.decision == Attempt(1)
    assert [m.name for m in driver.queue] == [dispatch.ATTEMPT]
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.next_step == 1


def test_a_plan_made_from_a_record_that_moved_on_is_not_written(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _provisioning(driver)

    def walked_on(r: LaunchRequest) -> bool:  # another delivery walked on to candidate 2
        r.next_step = 2
        return True

    log = _race_once(driver, monkeypatch, walked_on)
    walked = failover.walk(driver.deps, rid, 0, Within.REGION)
    # The first plan (candidate 1) lost its compare-and-set; planned again from the record
    # as it is, there is nothing for this step to do: no write, no attempt published.
    assert log == ["won", "lost"]
    assert walked.outcome == "stale" and walked.decision is None
    assert driver.queue == []
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.next_step == 2 and req.state == RequestState.PROVISIONING


def test_a_plan_lost_to_a_write_that_leaves_its_step_is_planned_again_and_written(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _provisioning(driver)

    def labelled(r: LaunchRequest) -> bool:  # a write that leaves the walk's step alone
        r.labels = {**r.labels, "seen": "yes"}
        return True

    log = _race_once(driver, monkeypatch, labelled)
    walked = failover.walk(driver.deps, rid, 0, Within.REGION)
    assert log == ["won", "lost", "won"]
    assert walked.outcome == "attempt 1"
    req = driver.deps.store.get_request(rid)
    # Both writes are kept: the other writer's and the walk's, planned on top of it.
    assert req is not None and req.next_step == 1 and req.labels["seen"] == "yes"
