"""The one retry in place: a call that failed for a passing reason (a teardown the cloud refused
for now, a throttled call) is tried again after the one backoff formula's pause
(:func:`~corral.shared.backoff.backoff_s`), up to a number of tries each caller sets (AWS's
``terminate_attempts``, GCP's ``teardown_tries``, the throttle settings' ``throttle_retries``).

Pure: the pause is taken by the ``sleep`` the caller passes (``time.sleep`` in a provider); a
step that is retried later by its queue instead asks :func:`retry_pause` for the pause alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from corral.shared.backoff import backoff_s

T = TypeVar("T")


def retry_pause(try_no: int, tries: int, base_s: float, cap_s: float = math.inf) -> float | None:
    """After try ``try_no`` (0: the first) of ``tries`` failed: the pause before the next, or
    None when that was the last."""
    return backoff_s(base_s, try_no, cap_s) if try_no + 1 < tries else None


def with_retries(
    call: Callable[[], T],
    *,
    tries: int,
    base_s: float,
    sleep: Callable[[float], object],
    retryable: Callable[[Exception], bool] = lambda _exc: True,
    on_failure: Callable[[int, Exception], None] | None = None,
    cap_s: float = math.inf,
) -> T:
    """``call()``'s answer, tried up to ``tries`` times (at least once) while it raises an
    exception ``retryable`` accepts, pausing :func:`retry_pause` between tries. The last
    failure (or the first one not retryable) is raised as it came. ``on_failure(try_no, exc)``
    hears every retryable failure, the last one included."""
    try_no = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retryable(exc):
                raise
            if on_failure is not None:
                on_failure(try_no, exc)
            pause = retry_pause(try_no, max(1, tries), base_s, cap_s)
            if pause is None:
                raise
            sleep(pause)
            try_no += 1
