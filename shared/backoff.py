"""The one backoff formula: how long to wait before try ``attempt + 1`` of something that failed
for a passing reason (a lost compare-and-set race, a throttled call, a teardown the cloud
refused for now). Doubling from ``base_s``, at most ``cap_s``. Callers that collide with each
other (writers of one record) draw their pause uniformly below it, so they do not collide
again in lockstep; the draw is theirs (the core takes no randomness).

The runtime's throttled attempts and the simulator's ask the same function, so the two agree
on when a throttled attempt is tried again.
"""

from __future__ import annotations

import math


def backoff_s(base_s: float, attempt: int, cap_s: float = math.inf) -> float:
    """``base_s * 2**attempt`` seconds, at most ``cap_s`` (``attempt`` 0 is the first retry)."""
    return min(cap_s, base_s * 2.0**attempt)
