"""services/state/cas.py, the one compare-and-set engine: the store's records, its
all-or-none writes and the document store all retry through it (``structure_counts``'
``cas_retry_loops``: 1). A round that lost is run again after a pause drawn below the backoff
formula; any other answer ends the loop; ``retries`` losses more give up with WriteConflict."""

from __future__ import annotations

import pytest

from corral.services.state import cas, docstore, store


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(cas.time, "sleep", slept.append)
    return slept


def test_a_round_that_does_not_lose_ends_the_loop(pauses: list[float]) -> None:
    assert cas.until_written(lambda attempt: ("written", attempt), retries=5, what="x") == (
        "written",
        0,
    )
    assert cas.until_written(lambda attempt: None, retries=5, what="x") is None  # gone
    assert pauses == []


def test_lost_rounds_go_again_after_a_growing_pause(pauses: list[float]) -> None:
    rounds: list[int] = []

    def one_round(attempt: int) -> str | cas.Lost:
        rounds.append(attempt)
        return cas.LOST if attempt < 3 else "won"

    assert cas.until_written(one_round, retries=5, what="x") == "won"
    assert rounds == [0, 1, 2, 3]
    assert len(pauses) == 3
    for attempt, pause in enumerate(pauses):
        assert 0 <= pause <= min(cas.LOST_RACE_CAP_S, cas.LOST_RACE_BASE_S * 2**attempt)


def test_it_gives_up_after_the_retries_naming_what(pauses: list[float]) -> None:
    rounds: list[int] = []

    def losing(attempt: int) -> cas.Lost:
        rounds.append(attempt)
        return cas.LOST

    with pytest.raises(cas.WriteConflict, match=r"P:request:r-1: still losing .* after 2 retries"):
        cas.until_written(losing, retries=2, what="P:request:r-1")
    assert rounds == [0, 1, 2] and len(pauses) == 3


def test_every_store_raises_the_one_conflict() -> None:
    assert store.WriteConflict is cas.WriteConflict
    assert docstore.WriteConflict is cas.WriteConflict
