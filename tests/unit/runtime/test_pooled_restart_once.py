"""A pooled run's end is told once. Two passes of one pool can read the same ended run (a pass
woken by reconcile beside one sent by a sync); the one that comes second finds the run sent
back already and must neither restart the request again nor end the run placed after it.
(CI saw a job with ``max_restarts_on_errors: 2`` that failed once counted as restarted twice:
tests/integration/test_job_recovery.py::test_a_pool_workload_that_fails_restarts_in_its_pool_then_succeeds.)
"""

from __future__ import annotations

from collections.abc import Callable

from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import work
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest

TASK = {"resources": {"job_recovery": {"max_restarts_on_errors": 2}}, "run": "exit 4"}


def _running(deps: Deps, placed_at: float) -> None:
    req = LaunchRequest.new("r-1", TASK, placed_at - 5.0)
    assert req.move(RequestState.PROVISIONING, placed_at, "placed")
    assert req.move(RequestState.RUNNING, placed_at + 1.0, "its pool machine runs it")
    assert deps.store.create_request(req)


def test_the_second_pass_to_read_a_failed_run_leaves_the_run_after_it_alone(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    first = deps.now() - 100.0
    _running(deps, first)
    released: list[bool] = []
    failed = [{"exit_code": 4}]
    # The first pass to read the failed run restarts it.
    assert work.finish_when_ended(deps, "r-1", failed, released.append, first)
    req = deps.store.get_request("r-1")
    assert req is not None and (req.state, req.restarts) == (RequestState.PENDING, 1)
    assert released == [False]

    # The pool places it again; the second run is running.
    def again(r: LaunchRequest) -> bool:
        r.move(RequestState.PROVISIONING, deps.now(), "placed again")
        return r.move(RequestState.RUNNING, deps.now(), "its pool machine runs it")

    assert deps.store.update_request("r-1", again) is not None
    # A pass that read the first run's end before the restart tells it now: nothing moves.
    assert not work.finish_when_ended(deps, "r-1", failed, released.append, first)
    req = deps.store.get_request("r-1")
    assert req is not None and (req.state, req.restarts) == (RequestState.RUNNING, 1)
    assert released == [False]
    # The second run's own end still counts (placed when it was sent back: this clock stands).
    second = deps.now()
    assert work.finish_when_ended(deps, "r-1", [{"exit_code": 0}], released.append, second)
    req = deps.store.get_request("r-1")
    assert req is not None and req.state == RequestState.SUCCEEDED
    assert released == [False, True]
