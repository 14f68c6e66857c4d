"""shared/backoff.py, the one backoff formula: the waits every retry loop had written out
before (compare-and-set races, throttled attempts, teardowns, Kubernetes 429s, the beat's
Redis reconnects) come out of it unchanged, to the bit."""

from __future__ import annotations

import math

import pytest

from corral.services.state.cas import LOST_RACE_BASE_S, LOST_RACE_CAP_S
from corral.shared.backoff import backoff_s


@pytest.mark.parametrize("attempt", range(0, 120))
def test_the_waits_are_the_formulas_written_out_before(attempt: int) -> None:
    # the store's and the document store's lost compare-and-set race (the draw's upper end)
    assert backoff_s(LOST_RACE_BASE_S, attempt, cap_s=LOST_RACE_CAP_S) == min(
        0.05, 0.001 * 2**attempt
    )
    # a throttled attempt (timers.throttle_backoff_s), AWS's and GCP's teardown tries
    for base in (0.5, 1.0, 2.0, 0.05):
        assert backoff_s(base, attempt) == base * 2**attempt
    # Kubernetes' 429s
    assert backoff_s(0.2, attempt, cap_s=2.0) == min(2.0, 0.2 * 2**attempt)


def test_it_doubles_from_the_base_and_stops_at_the_cap() -> None:
    assert [backoff_s(1.0, a) for a in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert [backoff_s(0.1, a, cap_s=1.0) for a in range(6)][-2:] == [1.0, 1.0]
    assert backoff_s(1.0, 0) == 1.0 and backoff_s(1.0, 5, cap_s=math.inf) == 32.0
