"""Claims held while work runs: kept past their TTL by the process's renewer, released after,
and not taken back from whoever holds the key once it was lost."""

from __future__ import annotations

import time
from collections.abc import Callable

from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps

TTL_S = 1.0  # renewed at most half a TTL late: a loaded machine has that much margin


def test_a_claim_held_past_its_ttl_is_renewed_then_released(make_deps: Callable[..., Deps]) -> None:
    deps = make_deps(claim_ttl_s=TTL_S)
    assert deps.store.claim("a", "me", TTL_S) and deps.store.claim("b", "me", TTL_S)
    with hold_claim(deps, "a", "me"), hold_claim(deps, "b", "me"):
        time.sleep(2.5 * TTL_S)  # only renewals keep them
        assert deps.store.is_claimed("a") and deps.store.is_claimed("b")
        assert not deps.store.claim("a", "someone-else", 5.0)
    assert not deps.store.is_claimed("a") and not deps.store.is_claimed("b")
    # The renewer serves a claim taken after a quiet spell.
    assert deps.store.claim("a", "me", TTL_S)
    with hold_claim(deps, "a", "me"):
        time.sleep(2 * TTL_S)
        assert deps.store.is_claimed("a")
    assert not deps.store.is_claimed("a")


def test_a_claim_taken_over_is_not_renewed_for_its_old_holder(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps(claim_ttl_s=TTL_S)
    assert deps.store.claim("a", "me", TTL_S)
    with hold_claim(deps, "a", "me"):
        deps.store.release("a", "me")  # as if it had lapsed
        assert deps.store.claim("a", "other", 5.0)
        time.sleep(2 * TTL_S)
        assert deps.store.renew("a", "other", 5.0)  # still the other's: never taken back
    assert deps.store.is_claimed("a")  # our release leaves the other's claim alone
