"""What a pool pass remembers between passes gives what working it out again gives: a
workload narrowed by its setback, its note, the groups passed over (shared/scheduling/
fallback.py, remembered between a setback's times), and every workload's machines read in one
walk (``PoolLedger.machines_by_workload`` against ``machines_of``)."""

from __future__ import annotations

import random
from operator import is_

from corral.shared.scheduling import Workload
from corral.shared.scheduling.det_pool_state import told as det_told
from corral.shared.scheduling.fallback import (
    FallbackPolicy,
    _narrow,
    after_failure,
    holds_back,
    narrowed,
    note,
    passed_over,
    seen_at,
)
from corral.shared.scheduling.ledger import PoolLedger, PoolMachine
from corral.shared.scheduling.machine_pools import (
    _run_end,
    _told_run,
    _told_too,
    _told_too_over,
    told_passed_over,
)
from corral.shared.scheduling.model import Pending, Plan
from corral.shared.scheduling.pool_passes import _told_of_setbacks
from corral.shared.scheduling.trusted import pending_for, task_pending
from corral.shared.waiting import utc_clock

ORDER = ("reserved-a100", "spot-a100", "ondemand-a100")


def _workload(wid: str) -> Workload:
    return Workload(workload_id=wid, submitted_at=0.0, group_order=ORDER)


def test_narrowed_note_and_passed_over_agree_with_working_them_out_at_any_time() -> None:
    """Asked at times going back and forth across the setback's times (a group's return),
    each answer equals the one worked out afresh; the remembered one is reused in between."""
    rng = random.Random(46)
    policy = FallbackPolicy()
    for n in range(30):
        w = _workload(f"w{n}")
        setback = None
        for failure in range(rng.randint(1, 4)):
            setback = after_failure(
                setback,
                workload_id=w.workload_id,
                machine_type=rng.choice(ORDER),
                group_order=ORDER,
                why="sold out",
                now=100.0 * failure,
                policy=policy,
            )
        assert setback is not None
        times = sorted(setback.avoid.values())
        probes = [t + d for t in times for d in (-1.0, -1e-9, 0.0, 1e-9, 1.0)]
        probes += [0.0, setback.retry_at - 1.0, 1e9]
        rng.shuffle(probes)
        for now in [*probes, *probes]:  # twice: the second round reads what is remembered
            fresh = _narrow(w, setback, now)
            assert narrowed(w, setback, now).group_order == fresh.group_order
            told = holds_back({w.workload_id: w}, {w.workload_id: setback}, now)  # pending
            if now < setback.retry_at:
                assert told[w.workload_id] == note(w, setback, now)
            gone = sorted(g for g, at in setback.avoid.items() if at > now)
            want = ", ".join(f"{g} until {utc_clock(setback.avoid[g])}" for g in gone)
            assert passed_over(setback, now) == want


def test_seen_at_gives_in_one_walk_what_each_gives_apart_either_side_of_every_time() -> None:
    """``seen_at`` (one walk over the setbacks, its answers kept per workload between the
    setback's times, the pause's end among them) against ``_narrow``, ``note`` and the
    groups passed over worked out afresh, at times either side of every time a setback names,
    asked back and forth; a workload placed meanwhile (another object) is seen afresh."""
    rng = random.Random(4646)
    policy = FallbackPolicy()
    workloads: dict[str, Workload] = {}
    setbacks = {}
    for n in range(40):
        w = _workload(f"s{n}")
        setback = None
        for failure in range(rng.randint(1, 4)):
            setback = after_failure(
                setback,
                workload_id=w.workload_id,
                machine_type=rng.choice(ORDER),
                group_order=ORDER,
                why="sold out",
                now=50.0 * failure + n,
                policy=policy,
            )
        assert setback is not None
        workloads[w.workload_id], setbacks[w.workload_id] = w, setback
    setbacks["gone"] = setbacks["s0"]  # a setback whose workload left: never seen
    times = {t for s in setbacks.values() for t in (s.retry_at, *s.avoid.values())}
    probes = [t + d for t in times for d in (-1e-9, 0.0, 1e-9)] + [0.0, 1e9]
    rng.shuffle(probes)
    for round_ in range(3):
        if round_ == 2:  # placed: another object, another phase
            for wid in list(workloads)[::3]:
                workloads[wid] = workloads[wid].model_copy(update={"phase": "running"})
        for now in probes:
            changed, held, gone = seen_at(workloads, setbacks, now)
            for wid, w in workloads.items():
                setback = setbacks[wid]
                fresh = _narrow(w, setback, now)
                assert changed.get(wid, w).group_order == fresh.group_order
                assert (wid in changed) == (fresh is not w)
                if w.phase == "pending" and now < setback.retry_at:
                    assert held[wid] == note(w, setback, now)
                else:
                    assert wid not in held
                left = sorted(g for g, at in setback.avoid.items() if at > now)
                want = ", ".join(f"{g} until {utc_clock(setback.avoid[g])}" for g in left)
                assert gone.get(wid, "") == want
            assert list(held) == [w for w in setbacks if w in held]  # the setbacks' order
            assert "gone" not in changed and "gone" not in held and "gone" not in gone


def test_a_verdict_told_again_is_the_same_answer_while_the_verdict_is_equal() -> None:
    """A pass tells each waiting workload what one alike was told: the answer kept for a
    workload is given again for an equal verdict (the same object), and made afresh, equal
    to ``model_copy``'s, for another."""
    said = Pending(workload_id="first", code="partition_full", reason="needs 1 node(s), 0 free")
    first = _told_too(said, "w")
    assert first == said.model_copy(update={"workload_id": "w"})
    again = Pending(workload_id="first", code="partition_full", reason="needs 1 node(s), 0 free")
    assert _told_too(again, "w") is first
    other = said.model_copy(update={"reason": "needs 1 node(s), 1 free"})
    assert _told_too(other, "w") == other.model_copy(update={"workload_id": "w"})
    assert _told_too(other, "w").reason == "needs 1 node(s), 1 free"


def test_a_verdict_going_back_and_forth_between_two_texts_is_told_with_the_kept_answers() -> None:
    """A full pool's verdict often goes back and forth from one pass to the next (room held
    for others, then not): both answers are kept per workload, and an equal verdict made for
    another workload (another ``workload_id``) is told with the kept answer too. A third text
    makes a third answer, and the oldest is forgotten."""
    full = Pending(workload_id="a", code="partition_full", reason="4 of 4 held")
    held = Pending(workload_id="a", code="partition_full", reason="4 of 4 held, 1 held for others")
    first, second = _told_too(full, "flip"), _told_too(held, "flip")
    assert (first.reason, second.reason) == (full.reason, held.reason)
    for _ in range(3):
        assert _told_too(full.model_copy(update={"workload_id": "b"}), "flip") is first
        assert _told_too(held, "flip") is second
    third = _told_too(full.model_copy(update={"reason": "3 of 4 held"}), "flip")
    assert third.reason == "3 of 4 held" and third.workload_id == "flip"
    assert _told_too(held, "flip") is second  # kept: the newer of the two before
    again = _told_too(full, "flip")
    assert again is not first and again == first  # forgotten, made again, equal


def test_a_run_of_alike_workloads_is_told_at_once_with_each_ones_own_answer() -> None:
    """A pass tells a run of alike waiting workloads (one verdict key, in queue order) in one
    step: each gets its own ``_told_too`` answer (``_told_too_over``'s for one passing groups
    over); an answer made under a verdict is given again (the very object) to the same
    workload passing the same groups over, in a run that gained or lost workloads too, and
    made again when the verdict or the groups passed over change."""
    said = Pending(workload_id="x", code="partition_full", reason="needs 1 node(s), 0 free")
    run = ["r1", "r2", "r3"]
    told = _told_run(said, run, None)
    assert told == [said.model_copy(update={"workload_id": w}) for w in run]
    again = _told_run(said.model_copy(update={"workload_id": "y"}), ["r0", *run], {})
    assert again[0].workload_id == "r0" and all(map(is_, again[1:], told))
    over = _told_run(said, run, {"r2": "a until 10:00"})
    assert over[0] is told[0] and over[2] is told[2]
    assert over[1] == told_passed_over([told[1]], {"r2": "a until 10:00"})[0]
    assert _told_run(said, run, {"r2": "a until 10:00"})[1] is over[1]
    other_over = _told_run(said, run, {"r2": "b until 11:00"})[1]
    assert other_over is not over[1] and other_over.reason.endswith("b until 11:00")
    other = said.model_copy(update={"reason": "needs 1 node(s), 1 held for others"})
    assert [t.reason for t in _told_run(other, run, None)] == [other.reason] * 3
    assert _told_run(said, run, None) == told and _told_run(said, run, None)[0] is told[0]


def test_the_runs_of_a_queue_end_where_the_verdict_key_changes() -> None:
    kinds = ["a", "a", "b", "a", "a", "a"]
    assert [_run_end(kinds, at) for at in range(len(kinds))] == [2, 2, 3, 6, 6, 6]  # type: ignore[arg-type]
    assert _run_end(["a"], 0) == 1  # type: ignore[list-item]


def test_a_determined_task_told_the_same_is_told_with_the_kept_answer() -> None:
    """A Determined pass tells every waiting task why it waits: the last two answers per task
    are given again while the code and reason are equal, and equal what
    ``trusted.task_pending`` makes."""
    a = det_told("t", "pool_full", "no agent has 8 free slot(s)")
    b = det_told("t", "behind_higher_priority", "x waits")
    assert a == task_pending("t", "pool_full", "no agent has 8 free slot(s)")
    assert det_told("t", "pool_full", "no agent has 8 free slot(s)") is a
    assert det_told("t", "behind_higher_priority", "x waits") is b
    assert det_told("t", "pool_full", "x waits") == task_pending("t", "pool_full", "x waits")


def test_a_verdict_told_with_the_groups_passed_over_is_what_telling_them_after_gives() -> None:
    """Over many passes whose verdicts and groups passed over change now and then, the
    answer made at once (``_told_too_over``, kept from pass to pass) equals the verdict told
    again and then told the groups (``told_passed_over``, and the pass's old second walk,
    ``_told_of_setbacks``), and is the same object while neither changed."""
    rng = random.Random(47)
    reasons = ("needs 1 node(s), 0 free", "needs 1 node(s), 1 free", "rule_denies it")
    gones = ("spot-a100 until 10:00", "spot-a100 until 10:00, ondemand-a100 until 11:00")
    last: dict[str, tuple[Pending, str, Pending]] = {}
    for _ in range(300):
        known = Pending(workload_id="first", code="partition_full", reason=rng.choice(reasons))
        for n in range(8):
            wid, gone = f"w{n}", rng.choice(gones)
            told = _told_too_over(known, wid, gone)
            afresh = told_passed_over([pending_for(known, wid)], {wid: gone})[0]
            assert told == afresh and told.model_fields_set == afresh.model_fields_set
            plan = Plan(pool="p", based_on={}, computed_at=0.0, pending=(pending_for(known, wid),))
            assert _told_of_setbacks(plan, {}, {wid: gone}).pending == (told,)
            before = last.get(wid)
            if before is not None and before[0] == known and before[1] == gone:
                assert told is before[2]  # kept: the same answer again
            last[wid] = (known, gone, told)


def test_a_narrowed_workload_is_reused_between_the_setbacks_times_and_not_across_them() -> None:
    w = _workload("w")
    setback = after_failure(
        None,
        workload_id="w",
        machine_type=ORDER[0],
        group_order=ORDER,
        why="",
        now=0.0,
        policy=FallbackPolicy(),
    )
    back = setback.avoid[ORDER[0]]
    first = narrowed(w, setback, 1.0)
    assert first.group_order == ORDER[1:]
    assert narrowed(w, setback, back - 1.0) is first  # the same answer, not a new copy
    assert narrowed(w, setback, back) is w  # the group is back: the workload itself
    assert narrowed(w, setback, 2.0).group_order == ORDER[1:]


def test_machines_by_workload_is_machines_of_for_every_workload() -> None:
    rng = random.Random(7)
    ledger = PoolLedger(pool="p")
    for n in range(40):
        wid = f"w{n % 9}"
        ledger.workloads.setdefault(
            wid,
            Workload(
                workload_id=wid,
                submitted_at=0.0,
                group_order=tuple(rng.sample(ORDER, rng.randint(1, 3))),
            ),
        )
        ledger.machines[f"m{n:02d}"] = PoolMachine(
            machine_id=f"m{rng.randint(0, 99):02d}-{n}",
            machine_type=rng.choice(ORDER),
            partition="any",
            workload_id=rng.choice([wid, None, "gone"]),
            head=rng.random() < 0.1,
            status=rng.choice(["launching", "up", "reaping", "retiring"]),
            created_at=0.0,
        )
    by_workload = ledger.machines_by_workload()
    for wid in [*ledger.workloads, "gone", "never"]:
        assert by_workload.get(wid, []) == ledger.machines_of(wid), wid
    assert set(by_workload) <= {*ledger.workloads, "gone"}
