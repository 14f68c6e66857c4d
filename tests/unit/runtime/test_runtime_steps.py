"""The runtime's steps one at a time, on the fake provider: submit and route, admit, attempt and
its boot, failover down the chain, terminate, reconcile."""

from __future__ import annotations

import json
from typing import Any

import pytest
from runtime_driver import Driver

from corral.services.providers.base import TAG_ATTEMPT, TAG_REQUEST
from corral.services.queues import dispatch
from corral.services.runtime import (
    boots,
    failover,
    launch,
    provisioning,
    reconcile,
    requests,
    termination,
)
from corral.shared.config.task import Task
from corral.shared.errors import CapacityError, ThrottledError
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import LaunchRequest
from corral.shared.routing import Direct

SERVICE = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}


def _submit(driver: Driver, task: dict | None = None) -> str:
    return requests.submit(driver.deps, Task.model_validate(task or SERVICE)).id


def test_submit_routes_once_and_publishes_admission(driver: Driver) -> None:
    rid = _submit(driver)
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.PENDING
    assert isinstance(req.route, Direct)
    # Its chain was planned here: admitted on its first cloud's provisioning queue.
    assert [(p.name, p.queue, p.args) for p in driver.queue] == [
        (dispatch.ADMIT, "provision.local", [rid, "local"])
    ]


def test_submit_refuses_what_could_never_run(driver: Driver) -> None:
    task = {"resources": {"cloud": "local", "instance_type": "no-such-type"}}
    with pytest.raises(requests.Impossible) as refused:
        _submit(driver, task)
    assert refused.value.reasons and driver.queue == []


def test_admit_plans_the_chain_and_publishes_the_first_attempt(driver: Driver) -> None:
    rid = _submit(driver)
    driver.queue.clear()
    # Admission on the schedule queue (no cloud: a request stored without a chain, a redrive).
    assert provisioning.admit(driver.deps, rid) == "attempt 0"
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.PROVISIONING
    assert [s.zone for s in req.chain] == ["lab-east-a", "lab-east-b", "lab-west-a"]
    assert [(p.name, p.queue, p.args) for p in driver.queue] == [
        (dispatch.ATTEMPT, "provision.local", [rid, 0, 0])
    ]


def test_admit_on_the_first_clouds_queue_runs_the_first_attempt_itself(driver: Driver) -> None:
    driver.fake.boot_delay_s = 5.0
    rid = _submit(driver)
    assert driver.step() == "booting"  # admitted, and its first attempt launched: one task
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.PROVISIONING and req.next_step == 0
    assert [a.zone for a in req.attempts] == ["lab-east-a"]
    assert driver.names() == [dispatch.WATCH_BOOTS]  # no attempt message
    assert driver.step() == {"booting": 1}
    assert provisioning.admit(driver.deps, rid, "local") == "redispatched"  # a redelivery
    assert driver.names() == [dispatch.WATCH_BOOTS, dispatch.ATTEMPT]


def test_an_attempt_returns_while_its_machine_boots_and_the_watch_finishes_it(
    driver: Driver,
) -> None:
    driver.fake.boot_delay_s = 5.0
    rid = _submit(driver)
    assert driver.step() == "booting"  # admitted, the attempt launched, recorded, returned
    [inst] = driver.deps.store.list_instances(request_id=rid)
    assert inst.state == InstanceState.REQUESTED and inst.zone == "lab-east-a"
    assert driver.names() == [dispatch.WATCH_BOOTS]
    assert driver.step() == {"booting": 1}  # too early: looked again later
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert driver.deps.store.get_instance(inst.id).state == InstanceState.RUNNING  # type: ignore[union-attr]
    assert len(driver.fake.launched()) == 1
    assert driver.deps.boots.in_flight("local") == 0  # the watch let go of it


def test_a_capacity_error_blocks_the_zone_and_the_next_candidate_is_tried(
    driver: Driver,
) -> None:
    driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    rid = _submit(driver)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert [(a.zone, a.outcome) for a in req.attempts] == [
        ("lab-east-a", "capacity"),
        ("lab-east-b", "ok"),
    ]
    # The next zone (same cloud) was chosen and tried inside the failed attempt's task, itself
    # run by the admission task: no step task per scope, no attempt message at all.
    steps = {dispatch.RETRY_REGION, dispatch.RETRY_CLOUD, dispatch.NEXT_CLOUD, dispatch.ATTEMPT}
    assert driver.ran.count(dispatch.ADMIT) == 1 and not steps & set(driver.ran)
    blocked = [b.block.zone for b in driver.deps.blocks.active(driver.deps.now())]
    assert blocked == ["lab-east-a"]


def test_an_exhausted_chain_fails_a_fail_fast_request_with_its_account(driver: Driver) -> None:
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    rid = _submit(driver, {**SERVICE, "retry_until_up": False})
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.FAILED
    assert "all 3 candidates failed or are blocked" in (req.error or "")
    assert "fail fast" in (req.error or "")
    assert [a.outcome for a in req.attempts] == ["capacity"] * 3


def test_an_exhausted_chain_waits_then_walks_the_whole_chain_again(driver: Driver) -> None:
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    rid = _submit(driver)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.WAITING
    wait = req.waiting
    assert wait is not None and wait.retries == 0 and wait.deadline is None
    now = driver.deps.now()
    timers = driver.deps.settings.timers
    # Every candidate is blocked (blocked_ttl_s outlasts the first backoff): a walk before one
    # is free would skip them all, so the retry comes just after the first block expires.
    expiry = min(b.until for b in driver.deps.blocks.active(now))
    assert wait.retry_at == pytest.approx(expiry + 1.0)
    assert wait.because == "block_expiry"
    assert wait.retry_at > now + timers.wait_retry_initial_s * (1 + timers.wait_retry_jitter)  # type: ignore[operator]
    # Not due yet: reconcile's pass leaves it alone.
    assert failover.wake_due(driver.deps) == 0
    driver.fake.advance(wait.retry_at - now + 0.1)  # type: ignore[operator]
    assert failover.wake_due(driver.deps) == 1
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None
    # The walk at the expiry found the first zone free again and launched there.
    assert req.state == RequestState.RUNNING, req.history[-1]
    assert [a.outcome for a in req.attempts] == ["capacity"] * 3 + ["ok"]
    assert req.attempts[-1].attempt_id.startswith(f"{rid}-0w")  # a new generation of ids
    assert len({a.attempt_id for a in req.attempts}) == len(req.attempts)
    assert req.history[-1].at == pytest.approx(expiry + 1.0, abs=5.0)


def test_a_waiting_request_whose_blocks_were_renewed_waits_on_without_a_walk(
    driver: Driver,
) -> None:
    """Woken only when a block it waits on ends: other requests tried those places again and
    failed (the blocks renewed), so the retry finds nothing to try and is not made."""
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    rid = _submit(driver)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.waiting is not None and req.waiting.retry_at is not None
    attempts, walks = len(req.attempts), req.walks
    now = driver.deps.now()
    ttl = driver.deps.settings.timers.blocked_ttl_s
    driver.fake.advance(req.waiting.retry_at - now - 5.0)  # just before the first end
    active = driver.deps.blocks.active(driver.deps.now())
    for remembered in active:  # each tried again by someone else, and failed again
        driver.deps.blocks.add(remembered.block, now=driver.deps.now(), ttl_s=ttl,
                               reason="sold out again", outcome="capacity")  # fmt: skip
    driver.fake.advance(10.0)  # past the first retry
    assert failover.wake_due(driver.deps) == 0
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.WAITING and req.waiting is not None
    assert (len(req.attempts), req.walks, req.waiting.retries) == (attempts, walks, 0)
    first_end = min(b.until for b in driver.deps.blocks.active(driver.deps.now()))
    assert req.waiting.retry_at == pytest.approx(first_end + 1.0)
    assert not driver.queue  # nothing published
    # At the renewed blocks' first end, the walk is made and finds that zone free.
    driver.fake.advance(req.waiting.retry_at - driver.deps.now() + 0.1)
    assert failover.wake_due(driver.deps) == 1
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING, req.history[-1]


def test_a_waiting_request_fails_once_its_max_wait_has_passed(driver: Driver) -> None:
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    rid = _submit(driver, {**SERVICE, "max_wait": "20s"})
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.WAITING and req.waiting is not None
    assert req.waiting.deadline == pytest.approx(req.created_at + 20.0)
    assert req.waiting.retry_at == req.waiting.deadline  # the backoff would be later
    driver.fake.advance(req.waiting.deadline - driver.deps.now() + 0.1)  # type: ignore[operator]
    failover.wake_due(driver.deps)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.FAILED
    assert "max_wait 20s passed" in (req.error or "")


def test_a_waiting_request_can_be_cancelled(driver: Driver) -> None:
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    rid = _submit(driver)
    driver.run()
    assert requests.cancel(driver.deps, rid).state == RequestState.CANCELLED
    driver.fake.advance(3600.0)
    assert failover.wake_due(driver.deps) == 0


def test_a_throttled_launch_retries_in_place(driver: Driver) -> None:
    driver.fake.fail_next(ThrottledError("slow down", code="RequestLimitExceeded"))
    rid = _submit(driver)
    assert driver.step() == "attempt deferred"  # admitted; its attempt was throttled
    [again] = driver.queue  # the attempt's retry, as the attempt task would have retried
    assert (again.name, again.args) == (dispatch.ATTEMPT, [rid, 0, 1]) and again.countdown
    assert provisioning.attempt(driver.deps, rid, *again.args[1:]) == "running"
    req = driver.deps.store.get_request(rid)
    assert [(a.zone, a.outcome) for a in req.attempts] == [  # type: ignore[union-attr]
        ("lab-east-a", "throttled"),
        ("lab-east-a", "ok"),
    ]


def test_a_boot_past_the_deadline_times_out_its_machine_goes_and_failover_goes_on(
    driver: Driver,
) -> None:
    driver.fake.boot_delay_s = 60.0  # the deadline is 30 s
    rid = _submit(driver)
    driver.step()  # admit, and the attempt in lab-east-a
    first = driver.fake.launched()[0]
    driver.fake.boot_delay_s = 0.0
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    # A timeout marks the region unhealthy: its other zone is passed over.
    assert [(a.zone, a.outcome) for a in req.attempts] == [
        ("lab-east-a", "timeout"),
        ("lab-east-b", "blocked"),
        ("lab-west-a", "ok"),
    ]
    late = [m for m in driver.fake.machines.values() if m.tags[TAG_ATTEMPT] == first.attempt_id]
    assert [m.state for m in late] == ["terminated"]


def test_machines_that_never_register_are_their_fault_not_the_regions(driver: Driver) -> None:
    """Issue #46: the cloud started the machines, their agents never registered by the
    deadline: the attempt ends ``unregistered``, its machines go, and nothing is blocked (the
    region's other zone is tried next, and a later request may use that zone again)."""
    driver.fake.mute_zones = {"lab-east-a"}
    rid = _submit(driver)
    driver.step()  # admit, and the attempt in lab-east-a
    first = driver.fake.launched()[0]
    driver.run()  # the watch looks until the 30 s deadline has passed
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert [(a.zone, a.outcome) for a in req.attempts] == [
        ("lab-east-a", "unregistered"),
        ("lab-east-b", "ok"),
    ]
    assert "never registered" in (req.attempts[0].error or "")
    assert driver.deps.blocks.active(driver.deps.now()) == []
    late = [m for m in driver.fake.machines.values() if m.tags[TAG_ATTEMPT] == first.attempt_id]
    assert [m.state for m in late] == ["terminated"]


def test_terminate_stops_the_machines_and_ends_the_request(driver: Driver) -> None:
    rid = _submit(driver)
    driver.run()
    assert termination.terminate(driver.deps, rid, None, "user", by_user=True) == "terminated"
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.TERMINATED
    [inst] = driver.deps.store.list_instances(request_id=rid)
    assert inst.state == InstanceState.TERMINATED
    assert ("terminate", [inst.provider_id]) in driver.fake.calls


def test_terminating_a_request_whose_attempts_are_all_in_looks_for_no_strays(
    driver: Driver,
) -> None:
    """Every attempt's outcome is in: no machine of it can be unrecorded, so the terminate asks
    the cloud for nothing but the recorded machine's end (the local cloud's look reads every
    machine's record)."""
    rid = _submit(driver)
    driver.run()
    driver.fake.calls.clear()
    assert termination.terminate(driver.deps, rid, None, "user", by_user=True) == "terminated"
    assert [name for name, _ in driver.fake.calls] == ["terminate"]


def test_terminating_a_request_with_an_attempt_in_flight_ends_its_unrecorded_machines(
    driver: Driver,
) -> None:
    driver.fake.boot_delay_s = 60.0
    rid = _submit(driver)
    driver.step()  # admitted; its attempt launched and waits for the boot
    req = driver.deps.store.get_request(rid)
    assert req is not None and [a.outcome for a in req.attempts] == [None]
    stray = driver.fake.start_stray({TAG_REQUEST: rid, TAG_ATTEMPT: req.attempts[0].attempt_id})
    termination.terminate(driver.deps, rid, None, "user", by_user=True)
    assert driver.fake.machines[stray].state == "terminated"


def test_reconcile_relaunches_a_lost_machine_and_terminates_a_stray(driver: Driver) -> None:
    rid = _submit(driver)
    driver.run()
    [inst] = driver.deps.store.list_instances(request_id=rid)
    driver.fake.lose(inst.provider_id or "")
    stray = driver.fake.start_stray({TAG_REQUEST: "r-gone", TAG_ATTEMPT: "r-gone-0-0-0"})
    counts = reconcile.reconcile(driver.deps)
    assert counts["lost"] == 1 and counts["strays"] == 1
    assert driver.fake.machines[stray].state == "terminated"
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING and req.relaunches == 1
    states = sorted(i.state.value for i in driver.deps.store.list_instances(request_id=rid))
    assert states == ["LOST", "RUNNING"]


JOB = {**SERVICE, "name": "job", "run": "train"}


def test_a_failed_job_restarts_elsewhere_within_its_limit_then_fails(driver: Driver) -> None:
    task = {
        **JOB,
        "resources": {**SERVICE["resources"], "job_recovery": {"max_restarts_on_errors": 1}},
    }
    rid = _submit(driver, task)
    driver.run()
    [first] = driver.deps.store.list_instances(request_id=rid)
    driver.fake.exit(first.provider_id or "", 5)
    reconcile.reconcile(driver.deps)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert (req.restarts, req.restarts_on_errors, req.recoveries) == (1, 1, 0)
    second = next(i for i in driver.deps.store.list_instances(request_id=rid) if i.id != first.id)
    assert second.region != first.region  # EAGER_NEXT_REGION: the other region first
    driver.fake.exit(second.provider_id or "", 5)
    reconcile.reconcile(driver.deps)
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.FAILED and req.exit_code == 5


def test_a_job_end_is_not_read_before_its_machines_are_linked_nor_from_an_old_attempt(
    driver: Driver,
) -> None:
    rid = _submit(driver, JOB)
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    [inst] = driver.deps.store.list_instances(request_id=rid)
    # An attempt whose machine ended with no exit code while its launch had not yet linked it
    # to the request: nothing is concluded (it once read as "the job exited 0").
    reconcile._finish_job(driver.deps, req, "an-attempt-being-recorded")
    assert driver.deps.store.get_request(rid).state == RequestState.RUNNING  # type: ignore[union-attr]
    # The end of an earlier attempt does not end the one the request runs now.
    stale = req.model_copy(update={"instance_ids": [inst.id]})
    driver.deps.store.update_instance(inst.id, lambda i: i.move(InstanceState.TERMINATED, 1.0, "t"))

    def newer_attempt(r: LaunchRequest) -> bool:
        r.instance_ids = [*r.instance_ids, "i-newer"]
        return True

    driver.deps.store.update_request(rid, newer_attempt)
    reconcile._finish_job(driver.deps, stale, inst.attempt_id)
    assert driver.deps.store.get_request(rid).state == RequestState.RUNNING  # type: ignore[union-attr]


def test_a_wait_after_walking_on_in_the_same_task_retries_the_zone_it_reached(
    driver: Driver,
) -> None:
    driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    driver.fake.fail_next(ThrottledError("slow down", code="RequestLimitExceeded"), "lab-east-b")
    rid = _submit(driver)
    driver.queue.clear()
    provisioning.admit(driver.deps, rid)  # on the schedule queue: the attempt is published
    with pytest.raises(provisioning.RetryLater) as later:
        driver.step()  # lab-east-a refused, lab-east-b throttled: in one attempt task
    assert (later.value.step, later.value.try_no) == (1, 1)
    assert provisioning.attempt(driver.deps, rid, later.value.step, later.value.try_no) in (
        "booting",
        "running",
    )


@pytest.mark.parametrize(
    ("ran_s", "state"), [(1800.0, RequestState.RUNNING), (200.0, RequestState.FAILED)]
)
def test_relaunch_limit_bounds_losses_in_a_row_not_every_loss(
    driver: Driver, ran_s: float, state: RequestState
) -> None:
    """Four lost machines: each after half an hour's run (relaunch_reset_s), the request is
    relaunched every time; each a few minutes after its boot (past the lost zone's block), it
    fails on the fourth (relaunch_limit 3), as the simulator decides
    (corral.shared.recovery.relaunch_after_loss)."""
    rid = _submit(driver)
    driver.run()
    for _ in range(4):
        driver.fake.advance(ran_s)
        req = driver.deps.store.get_request(rid)
        assert req is not None and req.state == RequestState.RUNNING
        live = driver.deps.store.list_instances(request_id=rid)
        [inst] = [i for i in live if i.state == InstanceState.RUNNING]
        driver.fake.lose(inst.provider_id or "")
        reconcile.reconcile(driver.deps)
        driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == state
    if state == RequestState.RUNNING:
        assert (req.recoveries, req.lost_in_a_row) == (4, 1)
    else:
        assert req.recoveries == 3 and "relaunch limit reached" in (req.error or "")


JOB = {**SERVICE, "name": "job", "run": "true"}


def _booted_then_exited(driver: Driver, code: int) -> tuple[str, str]:
    """A job whose machine boots, then ends its run (``code``) before the watch's first look."""
    driver.fake.boot_delay_s = 5.0
    rid = _submit(driver, JOB)
    assert driver.step() == "booting"
    [inst] = driver.deps.store.list_instances(request_id=rid)
    driver.fake.advance(5.0)
    assert inst.provider_id is not None
    driver.fake.exit(inst.provider_id, code)
    return rid, inst.id


def test_the_jobs_over_at_one_look_are_let_go_in_one_terminate(driver: Driver) -> None:
    # A look that sees a burst's quick jobs over lets their machines go in one call per cloud
    # and zone (the local cloud then removes their folders in one pass over its folder).
    driver.fake.boot_delay_s = 5.0
    rids = [_submit(driver, {**JOB, "name": f"job{n}"}) for n in range(3)]
    assert [driver.step() for _ in rids] == ["booting"] * 3
    driver.fake.advance(5.0)
    machines = [i.provider_id for r in rids for i in driver.deps.store.list_instances(request_id=r)]
    for pid in machines:
        assert pid is not None
        driver.fake.exit(pid, 0)
    assert driver.step() == {"up": 3}
    for rid in rids:
        req = driver.deps.store.get_request(rid)
        assert req is not None and req.state == RequestState.SUCCEEDED
    [let_go] = [args for name, args in driver.fake.calls if name == "terminate"]
    assert sorted(let_go) == sorted(machines)


def test_a_job_over_at_the_watchs_first_look_ends_in_that_look(driver: Driver) -> None:
    rid, iid = _booted_then_exited(driver, 0)
    assert driver.step() == {"up": 1}
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.SUCCEEDED and req.exit_code == 0
    # Both moves are in its history, written at once (one version: created, admitted, ended).
    moves = [t.to_state for t in req.history]
    assert moves[-2:] == [RequestState.RUNNING.value, RequestState.SUCCEEDED.value]
    assert req.version == 2
    inst = driver.deps.store.get_instance(iid)
    assert inst is not None and inst.state == InstanceState.TERMINATED and inst.exit_code == 0
    assert [t.to_state for t in inst.history][-2:] == ["RUNNING", "TERMINATED"]
    texts = [e.text for e in driver.deps.store.events(rid)]
    assert texts[-2].startswith("state: RUNNING") and texts[-1].startswith("state: SUCCEEDED")
    assert ("terminate", [inst.provider_id]) in driver.fake.calls  # its machine let go
    assert driver.deps.boots.in_flight("local") == 0
    assert reconcile.reconcile(driver.deps).get("exited", 0) == 0  # nothing left for it


def test_a_job_over_at_the_first_look_with_no_other_attempt_lists_no_instances(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its only instances are the ones the look just wrote ended: nothing else to let go.
    rid, _ = _booted_then_exited(driver, 0)
    listed: list[str | None] = []
    original = driver.deps.store.list_instances

    def counted(*args: Any, **kwargs: Any) -> Any:
        listed.append(kwargs.get("request_id"))
        return original(*args, **kwargs)

    monkeypatch.setattr(driver.deps.store, "list_instances", counted)
    assert driver.step() == {"up": 1}
    assert rid not in listed


def test_a_job_that_failed_before_the_first_look_is_ended_by_reconcile(driver: Driver) -> None:
    rid, _ = _booted_then_exited(driver, 3)
    assert driver.step() == {"up": 1}
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING  # its recovery is reconcile's
    assert reconcile.reconcile(driver.deps)["exited"] == 1
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.FAILED and req.exit_code == 3


def test_one_look_finishes_every_launch_it_sees_up_in_one_batch(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At a burst's end a look sees hundreds of launches up at once: they are written in one
    # batch (update_together_many), each as alone would have been, and one that moved on
    # meanwhile gets its machine let go while the others run.
    driver.fake.boot_delay_s = 5.0
    rids = [_submit(driver) for _ in range(3)]
    job = _submit(driver, JOB)
    driver.run(until=lambda: driver.names() == [dispatch.WATCH_BOOTS])
    assert driver.deps.boots.in_flight("local") == 4
    gone = rids.pop()
    driver.deps.store.update_request(
        gone, lambda r: r.move(RequestState.FAILED, driver.deps.now(), "failed meanwhile")
    )
    [job_inst] = driver.deps.store.list_instances(request_id=job)
    driver.fake.advance(5.0)
    assert job_inst.provider_id is not None
    driver.fake.exit(job_inst.provider_id, 0)
    batches: list[int] = []
    one_by_one: list[str] = []
    many, single = driver.deps.store.update_together_many, driver.deps.store.update_together

    def counted_many(items: Any) -> Any:
        batches.append(len(items))
        return many(items)

    def counted_single(request_id: str, *args: Any, **kwargs: Any) -> Any:
        one_by_one.append(request_id)
        return single(request_id, *args, **kwargs)

    monkeypatch.setattr(driver.deps.store, "update_together_many", counted_many)
    monkeypatch.setattr(driver.deps.store, "update_together", counted_single)
    assert driver.step() == {"up": 4}
    assert batches == [4] and one_by_one == []
    for rid in rids:
        req = driver.deps.store.get_request(rid)
        assert req is not None and req.state == RequestState.RUNNING
        [inst] = driver.deps.store.list_instances(request_id=rid)
        assert inst.state == InstanceState.RUNNING and inst.id in req.instance_ids
        assert [e.text for e in driver.deps.store.events(rid)][-1].startswith("state: RUNNING")
    ended = driver.deps.store.get_request(job)
    assert ended is not None and ended.state == RequestState.SUCCEEDED and ended.exit_code == 0
    moved_on = driver.deps.store.get_request(gone)
    assert moved_on is not None and moved_on.state == RequestState.FAILED
    assert moved_on.attempts[-1].outcome == "ok"  # the attempt's own end is still recorded
    [released] = driver.deps.store.list_instances(request_id=gone)
    assert ("terminate", [released.provider_id]) in driver.fake.calls
    assert ("terminate", [job_inst.provider_id]) in driver.fake.calls
    assert driver.deps.boots.in_flight("local") == 0


def test_boot_watch_looks_come_an_interval_apart_start_to_start(driver: Driver) -> None:
    # A look that took long (hundreds of boots finished at a burst's end) must not push the
    # next one back by its own length; one longer than the interval still leaves a fifth.
    driver.fake.boot_delay_s = 60.0
    _submit(driver)
    driver.run(until=lambda: driver.names() == [dispatch.WATCH_BOOTS])
    driver.queue.clear()
    interval = launch.watch_interval(driver.deps, "local")
    for took, expected in ((0.0, interval), (interval * 0.6, interval * 0.4), (9.0, interval / 5)):
        boots._next(driver.deps, "local", took)
        [looks] = driver.queue
        assert looks.name == dispatch.WATCH_BOOTS and looks.countdown == pytest.approx(expected)
        driver.queue.clear()


def test_a_machine_that_came_up_while_reconcile_asked_its_cloud_is_not_taken_for_lost(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconcile asks the cloud first, then reads what the store holds as up. A launch that
    lands between the two (the cloud's answer was already on its way; under load, a describe
    of many machines takes a while) is up in the store and absent from the answer: it was
    marked ``LOST: its process is gone``, its zone blocked and its request relaunched (seen
    under load on about one run in six of quick 2-node jobs). The store is read first now:
    whatever it holds as up existed before the cloud was asked."""
    rid = _submit(driver, {**JOB, "num_nodes": 2})
    real = driver.fake.describe
    landed: list[bool] = []

    def answer_then_launch(tags: dict[str, str] | None = None) -> list[Any]:
        answer = real(tags)
        if tags is None and not landed:
            landed.append(True)
            driver.run()  # admitted, launched and up while the answer travels back
        return answer

    monkeypatch.setattr(driver.fake, "describe", answer_then_launch)
    counts = reconcile.reconcile(driver.deps)
    assert landed and counts.get("lost", 0) == 0, counts
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING and req.relaunches == 0
    states = {i.state for i in driver.deps.store.list_instances(request_id=rid)}
    assert states == {InstanceState.RUNNING}
    assert not driver.deps.blocks.active(driver.deps.now())


def test_a_launch_carries_skypilots_launch_wide_variables_over_the_tasks_own(
    driver: Driver,
) -> None:
    """Issue 45: every launch spec carries SkyPilot's launch-wide runtime variables (docs/
    source/running-jobs/environment-variables.rst): the GPU count of the candidate launched,
    the task id and the cluster info naming the request and where it launched; a task's own
    envs of those names do not win (each node's agent adds its rank and its peers)."""
    task = {
        "name": "gpus",
        "resources": {"cloud": "local", "accelerators": "A100:8"},
        "envs": {"SKYPILOT_NUM_NODES": "9", "MINE": "kept"},
        "run": "true",
    }
    rid = _submit(driver, task)
    driver.run()
    spec = driver.fake.launched()[-1]
    req = driver.deps.store.get_request(rid)
    assert req is not None
    assert spec.envs["MINE"] == "kept"
    assert spec.envs["SKYPILOT_NUM_NODES"] == "1"
    assert spec.envs["SKYPILOT_NUM_GPUS_PER_NODE"] == "8"
    assert spec.envs["SKYPILOT_TASK_ID"].endswith(f"_{rid}_1")
    assert json.loads(spec.envs["SKYPILOT_CLUSTER_INFO"]) == {
        "cluster_name": rid,
        "cloud": "Local",
        "region": spec.region,
        "zone": spec.zone,
    }
