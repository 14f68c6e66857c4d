"""The retry rule for an exhausted chain (corral.shared.waiting): backoff with a cap and jitter,
an earlier retry when a block covering the chain expires first, the deadline, fail fast."""

from __future__ import annotations

import random

import pytest

from corral.shared.blocking import Block
from corral.shared.placement import Placement
from corral.shared.records import Transition
from corral.shared.waiting import (
    AFTER_EXPIRY_S,
    Backoff,
    WaitTerms,
    blocking_expiries,
    decide_wait,
    lifted_by_release,
    looking_since,
    retry_rng,
    still_blocked,
    waits_on,
    woken_by_release,
)

NO_JITTER = Backoff(initial_s=30.0, multiplier=2.0, cap_s=300.0, jitter=0.0)


def _decide(**kw: object) -> object:
    args: dict[str, object] = {
        "now": 1000.0,
        "since": 1000.0,
        "retries": 0,
        "retry_until_up": True,
        "max_wait_s": None,
        "expiries": (),
        "backoff": NO_JITTER,
        "rng": random.Random(1),
    }
    args.update(kw)
    return decide_wait(**args)  # type: ignore[arg-type]


def test_the_wait_grows_by_the_multiplier_up_to_the_cap() -> None:
    waits = [NO_JITTER.wait_s(n, random.Random(0)) for n in range(7)]
    assert waits == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0, 300.0]


def test_a_day_of_retries_stays_at_the_cap() -> None:
    assert NO_JITTER.wait_s(5000, random.Random(0)) == 300.0
    assert (
        Backoff(initial_s=30.0, multiplier=1.0, cap_s=300.0, jitter=0.0).wait_s(9, random.Random(0))
        == 30.0
    )


def test_jitter_stays_within_its_fraction_and_never_passes_the_cap() -> None:
    backoff = Backoff(initial_s=100.0, multiplier=2.0, cap_s=300.0, jitter=0.2)
    rng = random.Random(7)
    first = [backoff.wait_s(0, rng) for _ in range(500)]
    assert all(80.0 <= w <= 120.0 for w in first)
    assert max(first) - min(first) > 20.0  # it does spread
    capped = [backoff.wait_s(5, rng) for _ in range(500)]
    assert all(240.0 <= w <= 300.0 for w in capped)


def test_the_same_seed_draws_the_same_retry() -> None:
    jittered = Backoff(jitter=0.3)
    a = _decide(backoff=jittered, rng=retry_rng("r-1", 2), retries=2)
    b = _decide(backoff=jittered, rng=retry_rng("r-1", 2), retries=2)
    c = _decide(backoff=jittered, rng=retry_rng("r-2", 2), retries=2)
    assert a == b
    assert a.retry_at != c.retry_at  # type: ignore[attr-defined]


def test_a_wait_retries_after_the_backoff() -> None:
    decided = _decide(retries=2)
    assert decided.action == "wait"  # type: ignore[attr-defined]
    assert decided.retry_at == 1000.0 + 120.0  # type: ignore[attr-defined]
    assert decided.because == "backoff"  # type: ignore[attr-defined]
    assert decided.deadline is None  # type: ignore[attr-defined]


def test_a_block_expiring_first_brings_the_retry_forward() -> None:
    decided = _decide(retries=3, expiries=[1400.0, 1050.0, 990.0])  # 990: already gone
    assert decided.retry_at == 1050.0 + AFTER_EXPIRY_S  # type: ignore[attr-defined]
    assert decided.because == "block_expiry"  # type: ignore[attr-defined]
    later = _decide(retries=0, expiries=[1400.0])  # the backoff (30 s) comes first
    assert later.retry_at == 1030.0  # type: ignore[attr-defined]
    assert later.because == "backoff"  # type: ignore[attr-defined]


def test_with_every_candidate_blocked_the_retry_waits_for_the_first_to_be_free() -> None:
    """A walk before any candidate is free would skip them all (a wasted wake, and in the
    runtime a wasted store write): the retry waits for the first, even past the backoff."""
    decided = _decide(retries=0, expiries=[1400.0, 1200.0], candidates=2)
    assert decided.retry_at == 1200.0 + AFTER_EXPIRY_S  # type: ignore[attr-defined]
    assert decided.because == "block_expiry"  # type: ignore[attr-defined]
    # One candidate not blocked (or its block gone): the backoff stands.
    some = _decide(retries=0, expiries=[1400.0, 990.0], candidates=2)
    assert some.retry_at == 1030.0  # type: ignore[attr-defined]
    # The deadline still comes first.
    capped = _decide(retries=0, expiries=[5000.0], candidates=1, max_wait_s=600.0)
    assert capped.retry_at == 1600.0 and capped.because == "deadline"  # type: ignore[attr-defined]


def test_the_last_retry_is_at_the_deadline_and_after_it_the_request_fails() -> None:
    decided = _decide(since=900.0, max_wait_s=150.0, retries=2)  # deadline 1050 < 1120
    assert decided.action == "wait"  # type: ignore[attr-defined]
    assert decided.retry_at == 1050.0  # type: ignore[attr-defined]
    assert decided.because == "deadline"  # type: ignore[attr-defined]
    assert "max_wait 150s" in decided.reason  # type: ignore[attr-defined]
    failed = _decide(now=1050.0, since=900.0, max_wait_s=150.0, retries=3)
    assert failed.action == "fail"  # type: ignore[attr-defined]
    assert failed.deadline == 1050.0  # type: ignore[attr-defined]
    assert "max_wait 150s passed" in failed.reason  # type: ignore[attr-defined]
    assert "3 retries" in failed.reason  # type: ignore[attr-defined]


def test_max_wait_is_named_in_minutes_when_it_is_whole_minutes() -> None:
    failed = _decide(now=5000.0, since=1000.0, max_wait_s=1800.0)
    assert "max_wait 30m passed" in failed.reason  # type: ignore[attr-defined]


def test_fail_fast_fails_at_once_whatever_else() -> None:
    decided = _decide(retry_until_up=False, max_wait_s=3600.0, expiries=[1001.0])
    assert decided.action == "fail"  # type: ignore[attr-defined]
    assert "fail fast" in decided.reason  # type: ignore[attr-defined]


def test_a_candidate_is_free_once_every_block_covering_it_has_expired() -> None:
    chain = [
        Placement("local", "local", "local-a", "gpu-1", "on_demand"),
        Placement("local", "local", "local-b", "gpu-1", "on_demand"),
        Placement("local", "local", "local-c", "gpu-1", "on_demand"),
    ]
    blocks = [
        (Block("local", "local", "local-a", "gpu-1", "on_demand"), 500.0),
        (Block("aws", region="us-east-1"), 100.0),  # nothing of the chain is there
        (Block("local", zone="local-a"), 700.0),  # local-a stays blocked until 700
        (Block("local", "local", "local-b", "gpu-1", "on_demand"), 600.0),
    ]
    # local-a at 700 (not 500: another block still covers it), local-b at 600, local-c free.
    assert blocking_expiries(chain, blocks) == [700.0, 600.0]


def test_a_request_waits_on_the_block_of_each_candidate_that_ends_last() -> None:
    chain = [
        Placement("local", "local", "local-a", "gpu-1", "on_demand"),
        Placement("local", "local", "local-b", "gpu-1", "on_demand"),
        Placement("local", "local", "local-c", "gpu-1", "on_demand"),
    ]
    zone_a = Block("local", zone="local-a")
    exact_b = Block("local", "local", "local-b", "gpu-1", "on_demand")
    blocks = [
        (Block("local", "local", "local-a", "gpu-1", "on_demand"), 500.0),
        (zone_a, 700.0),
        (exact_b, 600.0),
    ]
    # local-a: the zone's block (it ends after the exact one); local-b its own; local-c free.
    assert waits_on(chain, blocks) == [(zone_a, 700.0), (exact_b, 600.0)]
    assert blocking_expiries(chain, blocks) == [u for _, u in waits_on(chain, blocks)]


def test_a_wait_whose_blocks_were_all_renewed_goes_on_without_a_walk() -> None:
    # Every block it waits on ends later than first thought: no walk, no retry counted; the
    # next look just after the first new end.
    renewed = still_blocked(now=1000.0, ends=[1180.0, 1300.0], retries=4, deadline=None)
    assert renewed is not None and renewed.action == "wait"
    assert renewed.retry_at == 1180.0 + AFTER_EXPIRY_S and renewed.because == "block_expiry"
    assert "retry 5 at" in renewed.reason
    # One has ended (or is gone, 0.0): walk the chain.
    assert still_blocked(now=1000.0, ends=[1000.0, 1300.0], retries=4, deadline=None) is None
    assert still_blocked(now=1000.0, ends=[0.0, 1300.0], retries=4, deadline=None) is None
    # Never past the deadline; at it, the last walk is made.
    capped = still_blocked(now=1000.0, ends=[1180.0], retries=0, deadline=1100.0)
    assert capped is not None and capped.retry_at == 1100.0 and capped.because == "deadline"
    assert still_blocked(now=1100.0, ends=[1180.0], retries=0, deadline=1100.0) is None


def test_the_wait_counts_from_the_last_relaunch() -> None:
    history = [
        Transition(from_state=None, to_state="PENDING", at=10.0, reason="submitted"),
        Transition(from_state="PENDING", to_state="PROVISIONING", at=11.0, reason="planned"),
        Transition(from_state="PROVISIONING", to_state="WAITING", at=12.0, reason="exhausted"),
        Transition(from_state="WAITING", to_state="PROVISIONING", at=50.0, reason="retry 1"),
    ]
    assert looking_since(10.0, history) == 10.0  # a retry is still the same wait
    history.append(Transition(from_state="PROVISIONING", to_state="RUNNING", at=60, reason="up"))
    history.append(Transition(from_state="RUNNING", to_state="PROVISIONING", at=900, reason="lost"))
    assert looking_since(10.0, history) == 900.0


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ({}, WaitTerms(True, None)),
        ({"retry_until_up": False}, WaitTerms(False, None)),
        ({"max_wait": "1800s"}, WaitTerms(True, 1800.0)),
        ({"max_wait": "1h30m", "retry_until_up": True}, WaitTerms(True, 5400.0)),
    ],
)
def test_terms_are_read_from_the_stored_task(task: dict[str, object], expected: WaitTerms) -> None:
    assert WaitTerms.of(task) == expected


def test_a_machine_of_ours_ending_lifts_its_place_its_regions_and_its_types_blocks() -> None:
    place = Placement("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot")
    assert lifted_by_release(place) == (
        Block("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot"),  # sold out there
        Block("aws", region="us-east-1"),  # a regional limit (a hung region answers again)
        Block("aws", instance_type="p4d.24xlarge", market="spot"),  # the type's quota
        Block("aws", "us-east-1", quota_family="spot:p"),  # its vCPU quota class's
    )


def test_each_freed_machine_wakes_the_oldest_waiter_whose_chain_holds_its_place() -> None:
    a = Placement("local", "local", "local-a", "gpu-1", "on_demand")
    b = Placement("local", "local", "local-b", "gpu-1", "on_demand")
    a_spot = Placement("local", "local", "local-a", "gpu-1", "spot")
    waiting = [
        ("r1", [b]),  # oldest, but not in a freed place
        ("r2", [a_spot, b]),  # a's spot market is not the on-demand room that freed
        ("r3", [b, a]),
        ("r4", [a]),
        ("r5", [a]),
    ]
    key_a = (a.cloud, a.region, a.zone, a.instance_type, a.market)
    assert woken_by_release([key_a], waiting) == ["r3"]
    assert woken_by_release([key_a, key_a], waiting) == ["r3", "r4"]
    assert woken_by_release([], waiting) == []
