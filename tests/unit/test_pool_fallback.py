"""A workload whose pool machine fails to launch backs off and falls down its group order
(shared/scheduling/fallback.py), played on the pure pass the runtime and the simulator run
(shared/scheduling/pool_passes.machine_pool_pass) with the seed's GCP pool (Anyscale's docs)
and a cloud that has fewer reserved machines than the reserved partition's size.

Issue #46: placed, failed, queued, placed again, 4,267 events in a minute, and never on the
spot or on-demand groups. Anyscale's documented semantics followed here: a workload's compute
config ranks its worker groups (``custom_group_order``), the scheduler places it on the best
group with room and falls back down the order, and ``enable_replacement`` moves it back up
once a better group has had room for ``replacement_threshold``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from corral.shared.config.detect import load_as
from corral.shared.config.machine_pool import MachinePool
from corral.shared.placement import Placement
from corral.shared.scheduling import Workload
from corral.shared.scheduling.build import machine_types_of
from corral.shared.scheduling.fallback import (
    FallbackPolicy,
    after_failure,
    holds_back,
    narrowed,
    note,
)
from corral.shared.scheduling.ledger import (
    PoolLedger,
    add_workload,
    machine_failed,
    machine_up,
    release,
)
from corral.shared.scheduling.model import NodeAssignment
from corral.shared.scheduling.pool_passes import PassKnobs, machine_pool_pass
from corral.shared.scheduling.quiet import machine_pool_quiet_until
from corral.shared.waiting import Backoff

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
RESERVED, SPOT, ONDEMAND = "reserved-a100", "spot-a100", "ondemand-a100"
ORDER = (RESERVED, SPOT, ONDEMAND)
TYPES = machine_types_of(load_as(SEEDS / "anyscale-machine-pool-gcp.yaml", MachinePool)[0])
POLICY = FallbackPolicy()  # the settings' defaults: 5 s doubling to 2 min; 1 min to 30 min
KNOBS = PassKnobs(min_runtime_s=0.0, replacement_guard_s=0.0)
AT = Placement("gcp", "us-central1", "us-central1-a", "a2-highgpu-8g", "on_demand")


def job(wid: str, t: float = 0.0, **fields: object) -> Workload:
    """A workload of the seed's compute config: its group order, replacement after 1 min."""
    return Workload.model_validate(
        {
            "workload_id": wid,
            "submitted_at": t,
            "group_order": ORDER,
            "enable_replacement": True,
            "replacement_threshold_s": 60.0,
            **fields,
        }
    )


class Cloud:
    """The cloud a pool's machines are launched on: how many machines of each group it can
    run at once (a reservation of ``reserved``, spot sold out at 0). Every pass's launches are
    answered at once, as the local cloud answers them: up, or failed."""

    def __init__(self, reserved: int, spot: int, ondemand: int = 10) -> None:
        self.room = {RESERVED: reserved, SPOT: spot, ONDEMAND: ondemand}
        self.failures: list[tuple[float, str, str]] = []  # (when, workload, group)
        self.placements: list[tuple[float, str, str]] = []  # (when, workload, the reason)
        self.count = 0

    def new_id(self, node: NodeAssignment, wid: str, index: int) -> str:
        self.count += 1
        return f"m{self.count}"

    def run(self, ledger: PoolLedger, now: float, policy: FallbackPolicy | None) -> PoolLedger:
        """One pass at ``now`` (beat's every 30 s: with replacement), then its launches."""
        rebalance = now % 30 == 0
        ledger, plan = machine_pool_pass(
            ledger, TYPES, now, KNOBS, rebalance=rebalance, new_id=self.new_id
        )
        self.placements += [(now, p.workload_id, p.reason) for p in plan.placements]
        for mid, m in list(ledger.machines.items()):
            if m.status != "launching":
                continue
            up = sum(
                1
                for o in ledger.machines.values()
                if o.machine_type == m.machine_type and o.status in ("up", "retiring")
            )
            if up < self.room[m.machine_type]:
                machine_up(ledger, mid)
            else:
                if m.workload_id is not None:  # not one its placement's failure let go
                    self.failures.append((now, m.workload_id, m.machine_type))
                why = f"{m.machine_type}: asked for 1, none free"
                machine_failed(ledger, mid, now, policy=policy, why=why)
        return ledger

    def groups_of(self, ledger: PoolLedger, wid: str) -> list[str]:
        return sorted(m.machine_type for m in ledger.machines_of(wid) if m.status == "up")


def play(cloud: Cloud, seconds: float, policy: FallbackPolicy | None, step_s: float = 0.1):  # type: ignore[no-untyped-def]
    """A 2-node workload on the seed's pool for ``seconds``, a pass every ``step_s`` (the
    runtime sends one after every failure: a storm's pace)."""
    ledger = PoolLedger(pool="demo-machine-pool")
    add_workload(ledger, job("w", num_nodes=2))
    now = 0.0
    while now <= seconds:
        ledger = cloud.run(ledger, round(now, 1), policy)
        now += step_s
    return ledger


def test_without_a_setback_the_workload_storms_on_the_reservation() -> None:
    """What issue #46 measured (policy None: the failure is not remembered): the reservation
    of 1 is asked again on every pass and the workload never reaches the groups below."""
    cloud = Cloud(reserved=1, spot=0)
    ledger = play(cloud, 60, None)
    assert len(cloud.failures) > 500
    assert {group for _, _, group in cloud.failures} == {RESERVED}
    assert ledger.workloads["w"].phase != "running" or cloud.groups_of(ledger, "w") == []


def test_too_few_reserved_machines_fall_to_spot_then_on_demand_within_a_minute() -> None:
    cloud = Cloud(reserved=1, spot=0)
    ledger = play(cloud, 60, POLICY)
    # Reserved failed once, spot once, then on-demand runs it: all within the minute.
    assert [group for _, _, group in cloud.failures] == [RESERVED, SPOT]
    assert cloud.groups_of(ledger, "w") == [ONDEMAND, ONDEMAND]
    placed_at = [t for t, _, _ in cloud.placements]
    assert len(placed_at) == 3 and placed_at[-1] < 30
    # Each try waited out its pause: 5 s, then 10 s (+-20 %).
    assert 4.0 <= placed_at[1] - placed_at[0] <= 6.1
    assert 8.0 <= placed_at[2] - placed_at[1] <= 12.1
    assert "reserved-a100 had no room for it" not in cloud.placements[-1][2]
    assert "setbacks" in PoolLedger.model_fields and ledger.setbacks["w"].failures == 2


def test_a_spanning_workload_is_placed_below_the_failed_group_only() -> None:
    """Spot has one machine: after reserved and spot both failed, the workload runs on
    on-demand; with spot back in its order a minute later, replacement moves it up there
    (the better group has room)."""
    cloud = Cloud(reserved=1, spot=1)
    ledger = play(cloud, 20, POLICY)
    assert [g for _, _, g in cloud.failures] == [RESERVED, SPOT]
    assert cloud.groups_of(ledger, "w") == [ONDEMAND, ONDEMAND]


def test_it_returns_up_when_the_better_group_frees_through_replacement() -> None:
    """The reservation frees (the cloud gives it its second machine): once the group's pass
    over ends, beat's rebalancing moves the workload back up (replacement_threshold 1 min,
    the seed's); a replacement that fails only passes the group over again."""
    cloud = Cloud(reserved=1, spot=0)
    ledger = play(cloud, 30, POLICY)
    assert cloud.groups_of(ledger, "w") == [ONDEMAND, ONDEMAND]
    cloud.room[RESERVED] = 2
    now = 30.0
    while now <= 600 and cloud.groups_of(ledger, "w") != [RESERVED, RESERVED]:
        ledger = cloud.run(ledger, now, POLICY)
        now += 1.0
    assert cloud.groups_of(ledger, "w") == [RESERVED, RESERVED], cloud.placements
    assert now < 400


def test_a_failed_replacement_keeps_the_workload_running_and_passes_the_group_over() -> None:
    cloud = Cloud(reserved=1, spot=0)
    ledger = play(cloud, 30, POLICY)
    # Past the reserved group's pass over and its threshold: the rebalancing pass at 150 s
    # tries one node on the reservation: the warm machine (up) takes it, the next fails.
    failures_before = len(cloud.failures)
    for now in range(31, 301):
        ledger = cloud.run(ledger, float(now), POLICY)
    assert ledger.workloads["w"].phase == "running"
    late = [(t, g) for t, _, g in cloud.failures[failures_before:]]
    assert late and {g for _, g in late} == {RESERVED}
    # Each failed replacement passes the group over for longer (2 min, then 4 min ...).
    assert len(late) <= 2, late
    setback = ledger.setbacks["w"]
    assert setback.strikes[RESERVED] == 1 + len(late)


def test_after_failure_backs_off_exponentially_with_jitter_and_bounded() -> None:
    policy = FallbackPolicy(
        retry=Backoff(initial_s=5.0, multiplier=2.0, cap_s=60.0, jitter=0.2),
        avoid=Backoff(initial_s=60.0, multiplier=2.0, cap_s=600.0, jitter=0.2),
    )
    setback = None
    pauses, avoids = [], []
    for n in range(12):
        now = 1000.0 * n
        setback = after_failure(
            setback,
            workload_id="w",
            machine_type=RESERVED,
            group_order=ORDER,
            why="sold out",
            now=now,
            policy=policy,
        )
        pauses.append(setback.retry_at - now)
        avoids.append(setback.avoid[RESERVED] - now)
    for n, pause in enumerate(pauses):
        base = min(60.0, 5.0 * 2**n)
        assert 0.8 * base <= pause <= min(60.0, 1.2 * base), (n, pause)
    assert max(pauses) <= 60.0 and max(avoids) <= 600.0
    assert len({round(p, 6) for p in pauses[-4:]}) > 1  # jittered, not one value
    # Drawn from the workload and its failure number: a redelivered step decides the same.
    again = after_failure(
        None,
        workload_id="w",
        machine_type=RESERVED,
        group_order=ORDER,
        why="",
        now=0.0,
        policy=policy,
    )
    assert again.retry_at == pytest.approx(pauses[0])


def test_every_group_passed_over_waits_for_the_first_back() -> None:
    setback = None
    for group, now in ((RESERVED, 0.0), (SPOT, 10.0), (ONDEMAND, 20.0)):
        setback = after_failure(
            setback,
            workload_id="w",
            machine_type=group,
            group_order=ORDER,
            why="",
            now=now,
            policy=POLICY,
        )
    assert setback is not None
    assert setback.retry_at >= setback.avoid[RESERVED] > 20.0
    workload = job("w", num_nodes=2)
    assert narrowed(workload, setback, 25.0).group_order == ORDER  # held back, not emptied
    assert narrowed(workload, setback, setback.retry_at).group_order == (RESERVED,)
    assert holds_back({"w": workload}, {"w": setback}, 25.0)["w"].code == "backing_off"
    assert holds_back({"w": workload}, {"w": setback}, setback.retry_at) == {}


def test_why_names_the_group_that_failed_when_and_the_next_try() -> None:
    setback = after_failure(
        None,
        workload_id="w",
        machine_type=RESERVED,
        group_order=ORDER,
        why="reservation shared-a100 has 0 of 1 free, asked for 1",
        now=1_800_000_000.0,
        policy=POLICY,
    )
    told = note(job("w"), setback, 1_800_000_001.0)
    assert told.code == "backing_off"
    assert "a reserved-a100 machine failed to launch at 08:00:00 UTC" in told.reason
    assert "(reservation shared-a100 has 0 of 1 free, asked for 1)" in told.reason
    assert "next try at 08:00:0" in told.reason and "on spot-a100" in told.reason
    assert "passed over: reserved-a100 until 08:0" in told.reason


def test_the_quiet_pass_rule_wakes_for_a_pause_end_and_a_groups_return() -> None:
    """The simulator skips passes known to decide nothing: a pause's end and a group's
    return are times a pass reads, so neither may be skipped."""
    ledger = PoolLedger(pool="p")
    add_workload(ledger, job("w", num_nodes=2))
    ledger.setbacks["w"] = after_failure(
        None,
        workload_id="w",
        machine_type=RESERVED,
        group_order=ORDER,
        why="",
        now=100.0,
        policy=POLICY,
    )
    until = machine_pool_quiet_until(ledger, TYPES, 100.0, KNOBS, rebalance=False)
    assert until == pytest.approx(ledger.setbacks["w"].retry_at, abs=1e-3)


def test_a_finished_workload_takes_its_setback_with_it() -> None:
    ledger = PoolLedger(pool="p")
    add_workload(ledger, job("w"))
    ledger.setbacks["w"] = after_failure(
        None,
        workload_id="w",
        machine_type=RESERVED,
        group_order=ORDER,
        why="",
        now=1.0,
        policy=POLICY,
    )
    release(ledger, "w", 2.0, finished=True)
    assert ledger.setbacks == {}


def test_the_events_of_a_minute_are_a_few_not_thousands() -> None:
    """What a user's `launch --wait` prints comes from these: placements and failures. Two
    workloads on the same short pool, a minute: at most a few each."""
    cloud = Cloud(reserved=1, spot=0)
    ledger = PoolLedger(pool="demo-machine-pool")
    for wid in ("a", "b"):
        add_workload(ledger, job(wid, num_nodes=2))
    rng = random.Random(7)
    now = 0.0
    while now <= 60.0:
        ledger = cloud.run(ledger, round(now, 1), POLICY)
        now += rng.choice((0.1, 0.2))
    for wid in ("a", "b"):
        events = [e for e in cloud.placements if e[1] == wid]
        events += [e for e in cloud.failures if e[1] == wid]
        assert len(events) <= 6, events


def test_a_workload_that_cannot_fit_below_the_failed_group_is_told_why() -> None:
    """Five nodes on the seed's pool (three partitions of 2): with reserved passed over, the
    partitions open to it hold 4. Its note says so, and that reserved is passed over (not
    that it can never fit)."""
    ledger = PoolLedger(pool="p")
    add_workload(ledger, job("w", num_nodes=5))
    ledger.setbacks["w"] = after_failure(
        None,
        workload_id="w",
        machine_type=RESERVED,
        group_order=ORDER,
        why="",
        now=0.0,
        policy=POLICY,
    )
    ledger, plan = machine_pool_pass(
        ledger, TYPES, 30.0, KNOBS, rebalance=False, new_id=Cloud(1, 0).new_id
    )
    [told] = plan.pending
    assert told.code == "no_fitting_machine"
    assert "the partitions open to it hold 4" in told.reason
    assert "; passed over after a failed launch: reserved-a100 until" in told.reason
    assert ledger.notes["w"] == told
