"""The one decision of a direct request's walk (plan, then apply): a typed snapshot in, a typed
decision out (attempt here, a wait until a time, or a failure), with the escalations and the
passed-over blocks that explain it. The runtime and the simulator both apply it.

The wait cases follow the SkyPilot ``--retry-until-up`` semantics corral.shared.waiting
documents (an exhausted chain is walked again after a growing pause until it is up): the
request waits (``WaitUntil``) by default and fails at once when it asked to fail fast."""

from __future__ import annotations

import pytest

from corral.shared.blocking import Block
from corral.shared.failover import Within
from corral.shared.failover_plan import (
    Attempt,
    Escalate,
    Fail,
    Snapshot,
    WaitPolicy,
    WaitUntil,
    plan_step,
)
from corral.shared.placement import Placement
from corral.shared.waiting import AFTER_EXPIRY_S, Backoff, WaitTerms

CHAIN = [
    Placement("gcp", "us-central1", "us-central1-a", "t", "on_demand"),
    Placement("gcp", "us-central1", "us-central1-b", "t", "on_demand"),
    Placement("gcp", "us-west1", "us-west1-a", "t", "on_demand"),
    Placement("aws", "us-east-1", "us-east-1a", "t", "on_demand"),
]
NOW = 1_000_000.0
BACKOFF = Backoff(initial_s=30.0, multiplier=2.0, cap_s=300.0, jitter=0.0)


def snap(
    after: int = -1,
    within: Within = Within.ANY,
    blocks: list[tuple[Block, float]] | None = None,
    *,
    wait: WaitPolicy | None = None,
    tried: int | None = None,
) -> Snapshot:
    return Snapshot(CHAIN, after, within, blocks or [], NOW, wait, tried)


def policy(retry_until_up: bool = True, max_wait_s: float | None = None, **kw: float) -> WaitPolicy:
    since = kw.get("since", NOW - 10.0)
    retries = int(kw.get("retries", 0))
    return WaitPolicy(WaitTerms(retry_until_up, max_wait_s), BACKOFF, since, retries, "r-1")


def test_the_first_step_attempts_the_first_free_candidate() -> None:
    assert plan_step(snap()) == Attempt(0)


def test_a_failed_zone_escalates_scope_by_scope_and_says_so() -> None:
    # After candidate 1 (the last of its region), the region step has nothing: the cloud's
    # other region is next; after candidate 2 (the cloud's last), the rest of the chain.
    assert plan_step(snap(0, Within.REGION)) == Attempt(1)
    decided = plan_step(snap(1, Within.REGION))
    assert isinstance(decided, Attempt) and decided.index == 2
    assert [e.scope for e in decided.escalated] == [Within.CLOUD]
    decided = plan_step(snap(2, Within.REGION))
    assert isinstance(decided, Attempt) and decided.index == 3
    assert decided.escalated == (
        Escalate(Within.CLOUD, "nothing left to try in its region: look in its cloud"),
        Escalate(Within.ANY, "nothing left to try in its cloud: look in the chain"),
    )
    assert decided.reasons[-1] == "try candidate 4"  # counted from 1, as `why` does


def test_blocked_candidates_are_passed_over_with_their_block() -> None:
    region = Block("gcp", region="us-central1")
    decided = plan_step(snap(blocks=[(region, NOW + 60)]))
    assert decided == Attempt(2, ((0, region),))


def test_an_exhausted_chain_without_a_wait_policy_fails_with_the_verdict() -> None:
    decided = plan_step(snap(3, Within.REGION, tried=4))
    assert decided == Fail("all 4 candidates failed or are blocked (4 tried)", None, (), ())
    assert decided.text == "all 4 candidates failed or are blocked (4 tried)"


def test_a_fail_fast_request_fails_at_the_end_of_its_chain() -> None:
    decided = plan_step(snap(3, Within.ANY, wait=policy(retry_until_up=False)))
    assert isinstance(decided, Fail)
    assert decided.reasons == (
        "all 4 candidates failed or are blocked",
        "fail fast: the request does not wait for capacity",
    )
    assert decided.text == "; ".join(decided.reasons)


def test_an_exhausted_chain_waits_for_the_backoff() -> None:
    decided = plan_step(snap(3, Within.ANY, wait=policy(retries=1)))
    assert isinstance(decided, WaitUntil)
    assert decided.at == pytest.approx(NOW + 60.0)  # 30 s x 2 for the second wait, no jitter
    assert decided.because == "backoff" and decided.deadline is None
    assert decided.reason.startswith("waiting for capacity: retry 2 at ")


def test_a_chain_blocked_everywhere_waits_for_the_first_block_to_end() -> None:
    gcp, aws = Block("gcp"), Block("aws", region="us-east-1")
    blocks = [(gcp, NOW + 500.0), (aws, NOW + 400.0)]
    decided = plan_step(snap(blocks=blocks, wait=policy()))
    assert isinstance(decided, WaitUntil)
    # Every candidate is blocked: the walk waits for the first end, even past the backoff.
    assert decided.at == NOW + 400.0 + AFTER_EXPIRY_S and decided.because == "block_expiry"
    assert decided.waits_on == ((gcp, NOW + 500.0),) * 3 + ((aws, NOW + 400.0),)
    assert [i for i, _ in decided.passed_over] == [0, 3]


def test_a_request_past_its_max_wait_fails_naming_the_deadline() -> None:
    decided = plan_step(snap(3, wait=policy(max_wait_s=60.0, since=NOW - 61.0, retries=2)))
    assert isinstance(decided, Fail)
    assert decided.reason is not None and decided.reason.startswith("max_wait 1m passed at ")
    assert "(2 retries of the chain)" in decided.reason


def test_the_same_snapshot_plans_the_same_decision() -> None:
    # A redelivered step (or a compare-and-set run again after a lost race) decides alike:
    # the jitter's draw is seeded by the request and its retries.
    jittery = WaitPolicy(WaitTerms(), Backoff(jitter=0.2), NOW - 5.0, 3, "r-9")
    first = plan_step(snap(3, wait=jittery))
    assert isinstance(first, WaitUntil)
    assert plan_step(snap(3, wait=jittery)) == first
