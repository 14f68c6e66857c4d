"""The one retry in place (shared/retry.py): the tries each cloud's setting allows, the one
backoff formula's pauses between them, the last failure raised as it came."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from corral.shared.retry import retry_pause, with_retries


class Passing(Exception):
    pass


class Fatal(Exception):
    pass


def _failing(n: int, exc: type[Exception] = Passing) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= n:
            raise exc(f"try {len(calls)}")
        return "done"

    return calls, call


def test_pauses_double_between_tries_and_the_answer_comes_back() -> None:
    calls, call = _failing(2)
    slept: list[float] = []
    assert with_retries(call, tries=3, base_s=0.5, sleep=slept.append) == "done"
    assert len(calls) == 3 and slept == [0.5, 1.0]


def test_the_last_failure_is_raised_after_the_tries_and_every_failure_is_heard() -> None:
    calls, call = _failing(10)
    slept: list[float] = []
    heard: list[tuple[int, str]] = []
    with pytest.raises(Passing, match="try 3"):
        with_retries(
            call,
            tries=3,
            base_s=1.0,
            sleep=slept.append,
            on_failure=lambda n, exc: heard.append((n, str(exc))),
        )
    assert len(calls) == 3 and slept == [1.0, 2.0]  # no pause after the last try
    assert heard == [(0, "try 1"), (1, "try 2"), (2, "try 3")]


def test_a_failure_no_retry_fixes_is_raised_at_once() -> None:
    calls, call = _failing(10, Fatal)
    slept: list[float] = []
    with pytest.raises(Fatal):
        with_retries(
            call,
            tries=5,
            base_s=1.0,
            sleep=slept.append,
            retryable=lambda exc: not isinstance(exc, Fatal),
        )
    assert len(calls) == 1 and slept == []


@pytest.mark.parametrize("tries", [0, 1, -2])
def test_fewer_than_one_try_still_tries_once(tries: int) -> None:
    calls, call = _failing(10)
    with pytest.raises(Passing):
        with_retries(call, tries=tries, base_s=1.0, sleep=lambda _s: None)
    assert len(calls) == 1


def test_the_pause_is_capped_and_none_after_the_last_try() -> None:
    assert [retry_pause(n, 5, 0.2, cap_s=0.5) for n in range(5)] == [0.2, 0.4, 0.5, 0.5, None]
    assert retry_pause(0, 1, 1.0) is None
