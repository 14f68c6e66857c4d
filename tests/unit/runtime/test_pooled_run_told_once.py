"""A pooled run's end is told once. Two passes of one pool can read the same ended run (a pass
woken by reconcile beside one sent by a sync); the one that comes second finds the run ended
already (``LaunchRequest.runs_ended``, keyed by the placement's id, not by clock times) and
must neither bring the request back to it, nor restart it again, nor end the run placed after
it. (CI saw a job with ``max_restarts_on_errors: 2`` that failed once counted as restarted
twice: tests/integration/test_job_recovery.py::
test_a_pool_workload_that_fails_restarts_in_its_pool_then_succeeds.)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import work
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest

TASK = {"resources": {"job_recovery": {"max_restarts_on_errors": 1}}, "run": "exit 4"}
FIRST, SECOND = "r-1.1000", "r-1.2000"  # two placements of one workload


def _state(deps: Deps) -> tuple[RequestState, int]:
    req = deps.store.get_request("r-1")
    assert req is not None
    return req.state, req.restarts


def _placed_and_running(deps: Deps, run: str) -> None:
    assert work.move_for_run(deps, "r-1", run, RequestState.PROVISIONING, "placed")
    assert work.move_for_run(deps, "r-1", run, RequestState.RUNNING, "its machine runs it")


def test_the_second_pass_to_read_a_failed_run_leaves_the_run_after_it_alone(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    assert deps.store.create_request(LaunchRequest.new("r-1", TASK, deps.now()))
    _placed_and_running(deps, FIRST)
    released: list[bool] = []
    failed = [{"exit_code": 4}]
    # The first pass to read the failed run restarts it.
    assert work.finish_when_ended(deps, "r-1", FIRST, failed, released.append)
    assert _state(deps) == (RequestState.PENDING, 1) and released == [False]

    # A pass that read its pool before the restart cannot bring the request back to that run
    # (before, it moved the PENDING request to RUNNING and restarted it a second time).
    assert not work.move_for_run(deps, "r-1", FIRST, RequestState.PROVISIONING, "placed")
    assert not work.move_for_run(deps, "r-1", FIRST, RequestState.RUNNING, "runs it")
    assert not work.finish_when_ended(deps, "r-1", FIRST, failed, released.append)
    assert _state(deps) == (RequestState.PENDING, 1) and released == [False]

    # The pool places it again; while the second run runs, the first run's end told again
    # moves nothing: no second restart, and (its restarts spent) no FAILED for the new run.
    _placed_and_running(deps, SECOND)
    assert not work.finish_when_ended(deps, "r-1", FIRST, failed, released.append)
    assert _state(deps) == (RequestState.RUNNING, 1) and released == [False]
    # Nor does a pass that saw the first placement sent back before it ran send back the
    # request its second placement runs (only a PROVISIONING request is sent back).
    assert not work.send_back(deps, "r-1", "sent back to the queue")
    assert _state(deps) == (RequestState.RUNNING, 1)

    # The second run's own end counts, once.
    assert work.finish_when_ended(deps, "r-1", SECOND, [{"exit_code": 0}], released.append)
    assert not work.finish_when_ended(deps, "r-1", SECOND, [{"exit_code": 0}], released.append)
    assert _state(deps) == (RequestState.SUCCEEDED, 1) and released == [False, True]


def test_a_run_still_going_tells_nothing_and_the_kept_runs_are_bounded(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    task = {"resources": {"job_recovery": {"max_restarts_on_errors": 20}}, "run": "exit 4"}
    assert deps.store.create_request(LaunchRequest.new("r-1", task, deps.now()))
    released: list[bool] = []
    for n in range(12):
        run = f"r-1.{n}"
        _placed_and_running(deps, run)
        assert not work.finish_when_ended(deps, "r-1", run, [None], released.append)
        assert work.finish_when_ended(deps, "r-1", run, [{"exit_code": 4}], released.append)
    req = deps.store.get_request("r-1")
    assert req is not None and req.restarts == 12 and released == [False] * 12
    assert req.runs_ended == [f"r-1.{n}" for n in range(12 - work.RUNS_ENDED_KEPT, 12)]


def test_a_restart_told_by_a_pass_that_stopped_before_releasing_is_released_by_the_next(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    assert deps.store.create_request(LaunchRequest.new("r-1", TASK, deps.now()))
    _placed_and_running(deps, FIRST)

    def dies(finished: bool) -> None:
        raise SystemExit("the worker stopped between the request's move and the pool's")

    with pytest.raises(SystemExit):
        work.finish_when_ended(deps, "r-1", FIRST, [{"exit_code": 4}], dies)
    assert _state(deps) == (RequestState.PENDING, 1)
    # The pool still holds the first run: the next pass releases it (queued again), once the
    # request says that run's end was told; a run not told is left to run.
    req = deps.store.get_request("r-1")
    assert req is not None
    released: list[bool] = []
    assert not work.release_told(deps, req, SECOND, released.append)
    assert work.release_told(deps, req, FIRST, released.append)
    assert released == [False] and _state(deps) == (RequestState.PENDING, 1)
