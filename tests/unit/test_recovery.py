"""Managed-job recovery: a task's ``job_recovery`` as SkyPilot writes it, whether a failed run
restarts, where a recovered job goes, and the runs of a request with their summed cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.config.detect import load_as
from corral.shared.config.task import JobRecovery, Task
from corral.shared.configio import ConfigError
from corral.shared.lifecycle import InstanceState
from corral.shared.records import ChainStep, Instance
from corral.shared.recovery import (
    Loss,
    Relaunch,
    recovery_chain,
    relaunch_after_loss,
    restart_after,
    runs_of,
    total_cost,
)


def _task(tmp_path: Path, text: str) -> Task:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return load_as(path, Task)[0]


def test_job_recovery_is_read_as_skypilot_writes_it(tmp_path: Path) -> None:
    task = _task(
        tmp_path,
        "resources:\n  job_recovery:\n    strategy: failover\n    max_restarts_on_errors: 3\n"
        "    recover_on_exit_codes: 33\nrun: train\n",
    )
    assert task.recovery() == JobRecovery(
        strategy="FAILOVER", max_restarts_on_errors=3, recover_on_exit_codes=[33]
    )
    listed = _task(tmp_path, "resources:\n  job_recovery:\n    recover_on_exit_codes: [33, 34]\n")
    assert listed.recovery() == JobRecovery(recover_on_exit_codes=[33, 34])
    assert _task(tmp_path, "resources:\n  job_recovery: EAGER_NEXT_REGION\n").recovery() == (
        JobRecovery(strategy="EAGER_NEXT_REGION")
    )
    on_a_candidate = "resources:\n  any_of:\n    - cloud: aws\n      job_recovery: FAILOVER\n"
    assert _task(tmp_path, on_a_candidate).recovery() == JobRecovery(strategy="FAILOVER")
    assert _task(tmp_path, "run: x\n").recovery() is None


def test_job_recovery_none_is_no_job_recovery_as_skypilot_reads_it(tmp_path: Path) -> None:
    """SkyPilot's yaml-spec example writes ``job_recovery: none``; its sky/resources.py reads a
    strategy of ``none`` (the string form or the section's) as no job_recovery at all, the
    section's other keys dropped with it. A failed run then fails (restart_after(None, ...))."""
    for body in (
        "  job_recovery: none\n",
        "  job_recovery:\n    strategy: none\n    max_restarts_on_errors: 3\n",
        "  any_of:\n    - cloud: aws\n      job_recovery: none\n",
    ):
        task = _task(tmp_path, "resources:\n" + body + "run: train\n")
        assert task.recovery() is None, body
    assert restart_after(None, 1, 0) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("  job_recovery:\n    recover_on_exit_codes: [300]\n", "recover_on_exit_codes"),
        ("  job_recovery:\n    max_restarts_on_errors: -1\n", "max_restarts_on_errors"),
        ("  job_recovery:\n    strategy: SOMETIMES\n", "strategy"),
        ("  job_recovery:\n    max_restarts: 3\n", "max_restarts"),
    ],
)
def test_a_wrong_job_recovery_names_its_field_and_line(
    tmp_path: Path, body: str, field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _task(tmp_path, "resources:\n" + body)
    [issue] = caught.value.issues
    assert issue.loc == f"resources.job_recovery.{field}"
    assert issue.line in (2, 3)


def test_a_failed_run_restarts_within_its_limit_and_always_on_listed_codes() -> None:
    policy = JobRecovery(max_restarts_on_errors=2, recover_on_exit_codes=[33])
    first = restart_after(policy, 1, 0)
    assert first is not None and first.counted and "restart 1 of 2" in first.reason
    assert restart_after(policy, 1, 1) is not None
    assert restart_after(policy, 1, 2) is None  # the limit is reached: it fails
    listed = restart_after(policy, 33, 2)  # listed codes restart past the limit, uncounted
    assert listed is not None and not listed.counted
    assert restart_after(policy, 0, 0) is None
    assert restart_after(None, 1, 0) is None  # no job_recovery: a failed job fails


def _step(region: str, zone: str) -> ChainStep:
    return ChainStep(
        cloud="aws", region=region, zone=zone, instance_type="m5.large", market="on_demand"
    )


def test_a_recovered_job_goes_to_other_regions_first_unless_it_fails_over_in_place() -> None:
    chain = [_step("r1", "r1a"), _step("r1", "r1b"), _step("r2", "r2a"), _step("r3", "r3a")]
    eager = recovery_chain(chain, JobRecovery(), "r1")
    assert [c.zone for c in eager] == ["r2a", "r3a", "r1a", "r1b"]
    failover = recovery_chain(chain, JobRecovery(strategy="FAILOVER"), "r2")
    assert [c.zone for c in failover] == ["r2a", "r1a", "r1b", "r3a"]
    assert recovery_chain(chain, None, "r1") == chain  # no job_recovery: as planned


HOUR_S = 3600.0


def _after(
    loss: Loss,
    in_a_row: int,
    policy: JobRecovery | None = None,
    lost_zones: tuple[tuple[str, str], ...] = (),
) -> Relaunch[ChainStep] | str:
    chain = [_step("r1", "r1a"), _step("r1", "r1b"), _step("r2", "r2a")]
    return relaunch_after_loss(
        chain, policy, loss, lost_zones=lost_zones, in_a_row=in_a_row, limit=3, reset_s=1800.0
    )


def test_a_lost_machine_that_ran_long_starts_the_relaunch_count_over() -> None:
    """``relaunch_limit`` bounds losses in a row: a spot job that loses its machine every
    hour or two is relaunched as often as it takes (it failed on its fourth loss before); one
    whose machines keep dying within minutes fails on the fourth."""
    long_run = Loss("aws", "r1", "r1a", ran_s=2 * HOUR_S)
    decided = _after(long_run, in_a_row=3)
    assert isinstance(decided, Relaunch) and decided.in_a_row == 1
    short_run = Loss("aws", "r1", "r1a", ran_s=5 * 60.0)
    second = _after(short_run, in_a_row=1)
    assert isinstance(second, Relaunch) and second.in_a_row == 2
    assert _after(short_run, in_a_row=3) == "relaunch limit reached"
    managed = _after(short_run, in_a_row=3, policy=JobRecovery())
    assert isinstance(managed, Relaunch) and managed.in_a_row == 4  # recovered from every loss
    no_chain = relaunch_after_loss([], None, long_run, in_a_row=0, limit=3, reset_s=1800.0)
    assert no_chain == "no candidate left"


def test_a_relaunch_tries_every_zone_it_lost_a_machine_in_last() -> None:
    """Not only the zone just lost: every zone that took a machine from this request goes to
    the end of its chain, so a request that keeps losing machines moves on."""
    lost_in_r1b = Loss("aws", "r1", "r1b", ran_s=HOUR_S)
    decided = _after(lost_in_r1b, in_a_row=0, lost_zones=(("aws", "r1a"),))
    assert isinstance(decided, Relaunch)
    assert [c.zone for c in decided.chain] == ["r2a", "r1a", "r1b"]
    recovered = _after(lost_in_r1b, in_a_row=0, policy=JobRecovery(strategy="FAILOVER"))
    assert isinstance(recovered, Relaunch)
    assert [c.zone for c in recovered.chain] == ["r1a", "r2a", "r1b"]  # its region, then moved


def _node(attempt: str, node: int, at: float, price: float | None, **moves: float) -> Instance:
    inst = Instance.new(
        f"{attempt}-{node}",
        "req-1",
        node,
        at,
        attempt_id=attempt,
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="m5.large",
        market="spot",
        price_usd_per_hour=price,
    )
    for state, when in moves.items():
        inst.move(InstanceState[state], when, state.lower())
    return inst


def test_runs_and_their_cost_summed_over_recoveries() -> None:
    lost = _node("a1", 0, 0.0, 3.6, RUNNING=10.0, LOST=3600.0)  # an hour at $3.60
    failed = _node("a2", 0, 3600.0, 1.8, RUNNING=3610.0, TERMINATED=5400.0)  # 30 min at $1.80
    failed.exit_code = 5
    running = [
        _node("a3", 0, 5400.0, 1.8, RUNNING=5410.0),
        _node("a3", 1, 5400.0, 1.8, RUNNING=5415.0),
    ]
    runs = runs_of([*running, failed, lost], now=7200.0)
    assert [(r.attempt_id, r.outcome, r.nodes) for r in runs] == [
        ("a1", "lost", 1),
        ("a2", "exited 5", 1),
        ("a3", "running", 2),
    ]
    assert [r.cost_usd for r in runs] == pytest.approx([3.6, 0.9, 1.8])
    assert runs[2].ended_at is None and runs[0].ended_at == 3600.0
    assert total_cost(runs) == pytest.approx(6.3)
    unknown = runs_of([_node("a4", 0, 0.0, None, RUNNING=1.0)], now=10.0)
    assert unknown[0].cost_usd is None and total_cost(unknown) is None


def test_a_lost_machine_is_billed_to_its_loss_while_and_after_it_is_torn_down() -> None:
    """One rule for a machine's bill (Instance.billed_until): a run's cost here and a project's
    spend in services/runtime/quotas.py agreed only once the machine was TERMINATED; a LOST
    machine being torn down was billed on to ``now`` by one and to its loss by the other."""
    from corral.services.runtime.quotas import _bill

    lost = _node("a1", 0, 0.0, 3.6, RUNNING=10.0, LOST=3600.0)
    for state, at in (("TERMINATING", 3700.0), ("TERMINATED", 4000.0)):
        assert lost.move(InstanceState[state], at, state.lower())
        [run] = runs_of([lost], now=7200.0)
        assert (run.ended_at, run.cost_usd) == (3600.0, pytest.approx(3.6)), state
        assert _bill(lost) == (0.0, 3600.0, 3.6), state
    failed = _node("a2", 0, 0.0, 1.8, FAILED=60.0)
    assert failed.billed_until() == 60.0 and _bill(failed)[1] == 60.0
    running = _node("a3", 0, 0.0, 1.8, RUNNING=5.0)
    assert running.billed_until() is None and _bill(running)[1] is None
