"""A request's job queue (shared/jobs.py): the transition table, what the nodes' reports
make of a job, cancelling, numbering, and job 1 read off its request.

SkyPilot's job states and their meaning (sky/skylet/job_lib.py ``JobStatus``: PENDING,
RUNNING, SUCCEEDED, FAILED, CANCELLED; terminal: the last three) are the model; its
``tests/smoke_tests/test_cluster_job.py::test_job_queue`` (a job cancelled while pending
never runs; the running one cancelled, the next runs) and ``test_multi_echo`` / the
``sky exec ... exit 1`` cases (a job's state is its exit code's) are translated in
tests/integration/test_job_queue.py; their pure parts here.
"""

from __future__ import annotations

import pytest

from corral.shared import jobs
from corral.shared.jobs import (
    TERMINAL,
    TRANSITIONS,
    CancelRefused,
    IllegalJobMove,
    Job,
    JobQueue,
    JobState,
    NodeReport,
)


def job(**kw: object) -> Job:
    return Job(id=2, submitted_at=100.0, execs=["x-a", "x-b"], num_nodes=2, **kw)  # type: ignore[arg-type]


def test_terminal_states_have_no_way_out_and_every_other_reaches_one() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
    for state in set(JobState) - TERMINAL:
        assert TRANSITIONS[state] & TERMINAL
    assert JobState.PENDING not in set().union(*TRANSITIONS.values())  # never back to waiting


def test_a_move_off_the_table_raises() -> None:
    done = jobs.move(job(), JobState.SUCCEEDED, 110.0, exit_code=0)
    with pytest.raises(IllegalJobMove):
        jobs.move(done, JobState.RUNNING, 111.0)


def test_no_report_yet_keeps_it_pending_and_one_node_started_makes_it_running() -> None:
    waiting = job()
    assert jobs.observe(waiting, [NodeReport(), NodeReport()], 105.0) == waiting
    running = jobs.observe(waiting, [NodeReport(started_at=103.0), NodeReport()], 105.0)
    assert running.state is JobState.RUNNING and running.started_at == 103.0


def test_every_node_exiting_0_succeeds_and_the_first_non_zero_code_fails_it() -> None:
    ok = [NodeReport(101.0, 104.0, 0), NodeReport(102.0, 106.0, 0)]
    done = jobs.observe(job(), ok, 110.0)
    assert (done.state, done.exit_code, done.started_at, done.ended_at) == (
        JobState.SUCCEEDED, 0, 101.0, 106.0,
    )  # fmt: skip
    bad = [NodeReport(101.0, 104.0, 0), NodeReport(102.0, 105.0, 3)]
    failed = jobs.observe(job(state=JobState.RUNNING, started_at=101.0), bad, 110.0)
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 3)
    assert failed.duration_s == pytest.approx(4.0)


def test_one_node_still_running_keeps_the_job_running() -> None:
    half = [NodeReport(101.0, 104.0, 3), NodeReport(101.0)]
    seen = jobs.observe(job(state=JobState.RUNNING, started_at=101.0), half, 110.0)
    assert seen.state is JobState.RUNNING and seen.exit_code is None


def test_a_node_that_could_not_run_it_fails_it_saying_why() -> None:
    reports = [NodeReport(None, 104.0, 1, "assignment a-1 does not run on this node")]
    seen = jobs.observe(Job(id=3, submitted_at=1.0, execs=["x"]), reports, 110.0)
    assert seen.state is JobState.FAILED and "does not run" in str(seen.reason)


def test_a_cancelled_job_stays_cancelled_whatever_its_killed_commands_report() -> None:
    cancelled = jobs.cancel(job(state=JobState.RUNNING, started_at=101.0), 105.0, "ana")
    assert cancelled.state is JobState.CANCELLED and cancelled.reason == "cancelled by ana"
    killed = [NodeReport(101.0, 106.0, 143), NodeReport(101.0, 106.0, 143)]
    assert jobs.observe(cancelled, killed, 110.0) == cancelled


def test_an_ended_job_cannot_be_cancelled() -> None:
    done = jobs.move(job(), JobState.FAILED, 110.0, exit_code=3)
    with pytest.raises(CancelRefused, match="already ended"):
        jobs.cancel(done, 111.0, "ana")


def test_a_request_ending_under_its_queue_cancels_what_had_not_ended() -> None:
    pending = jobs.request_ended(job(), 120.0, "TERMINATED")
    assert pending.state is JobState.CANCELLED
    assert pending.reason == "the request became TERMINATED before it ran"
    running = jobs.request_ended(job(state=JobState.RUNNING, started_at=101.0), 120.0, "STOPPED")
    assert running.reason == "the request became STOPPED while it ran"
    done = jobs.move(job(), JobState.SUCCEEDED, 110.0, exit_code=0)
    assert jobs.request_ended(done, 120.0, "TERMINATED") == done


def test_jobs_are_numbered_in_submission_order_from_the_queues_next_number() -> None:
    queue = JobQueue(request_id="r-1")
    for _ in range(3):
        queue = jobs.add(queue, Job(id=0, submitted_at=1.0))
    assert [j.id for j in queue.jobs] == [2, 3, 4] and queue.next_id == 5
    service = jobs.add(JobQueue(request_id="r-2", next_id=1), Job(id=0, submitted_at=1.0))
    assert service.jobs[0].id == 1  # a service's nodes: no run of its own to be job 1


def test_a_full_queue_drops_its_oldest_ended_jobs_never_a_waiting_one() -> None:
    queue = JobQueue(request_id="r-1")
    ended = jobs.move(Job(id=0, submitted_at=1.0), JobState.SUCCEEDED, 2.0, exit_code=0)
    queue = queue.model_copy(
        update={"jobs": [ended.model_copy(update={"id": i}) for i in range(2, jobs.MAX_JOBS + 2)]}
    )
    queue = queue.model_copy(update={"next_id": jobs.MAX_JOBS + 2})
    grown = jobs.add(queue, Job(id=0, submitted_at=3.0))
    assert len(grown.jobs) == jobs.MAX_JOBS and grown.jobs[0].id == 3
    assert grown.jobs[-1].state is JobState.PENDING


def test_job_1_is_the_launchs_run_as_its_request_says() -> None:
    def first(state: str, code: int | None = None, **kw: object) -> Job | None:
        args: dict[str, object] = dict(
            has_run=True, request_state=state, created_at=10.0, started_at=20.0,
            ended_at=30.0, exit_code=code, name="train", num_nodes=2,
        )  # fmt: skip
        return jobs.launch_job(**{**args, **kw})  # type: ignore[arg-type]

    assert first("PROVISIONING").state is JobState.PENDING  # type: ignore[union-attr]
    running = first("RUNNING")
    assert running is not None and running.state is JobState.RUNNING and running.ended_at is None
    ok = first("SUCCEEDED", 0)
    assert ok is not None and (ok.state, ok.exit_code, ok.duration_s) == (JobState.SUCCEEDED, 0, 10)
    assert first("FAILED", 3).exit_code == 3  # type: ignore[union-attr]
    # FAILED without an exit code: the request never ran its run to an end (no machine).
    assert first("FAILED").state is JobState.CANCELLED  # type: ignore[union-attr]
    assert first("TERMINATED").state is JobState.CANCELLED  # type: ignore[union-attr]
    assert first("RUNNING", has_run=False) is None  # a service has no job 1
    mine = jobs.cancel(running, 25.0, "ana")
    assert first("RUNNING", cancelled=mine) == mine


def test_a_request_takes_no_more_than_its_limit_of_jobs_not_ended() -> None:
    queue = JobQueue(request_id="r-1")
    for _ in range(jobs.MAX_WAITING):
        queue = jobs.add(queue, Job(id=0, submitted_at=1.0))
    with pytest.raises(jobs.QueueFull, match="r-1 has 100 jobs not ended"):
        jobs.add(queue, Job(id=0, submitted_at=2.0))
    first = jobs.cancel(queue.jobs[0], 3.0, "ana")
    freed = queue.model_copy(update={"jobs": [first, *queue.jobs[1:]]})
    assert jobs.add(freed, Job(id=0, submitted_at=4.0)).jobs[-1].id == jobs.MAX_WAITING + 2
