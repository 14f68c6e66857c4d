"""The one compare-and-set engine under every store: read, compute the change, write it only if
the version read is still the stored one, and after a lost race pause a little and go again,
up to ``retries`` more times, then :class:`WriteConflict`.

Each store says what one round is (its records, its Lua script): :meth:`Store.update_request`
and :meth:`Store.update_together` over requests and instances, :meth:`DocStore.replace` over
versioned documents (pools, clusters, users, job queues). The loop, the pause after a loss and
the give-up are written once, here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Final, TypeVar

from corral.shared.backoff import backoff_s

T = TypeVar("T")

# A lost compare-and-set race: the first retry waits up to 1 ms, each next one twice as long,
# never more than 50 ms (a writer that keeps losing still gets its turn soon).
LOST_RACE_BASE_S = 0.001
LOST_RACE_CAP_S = 0.05


class WriteConflict(RuntimeError):
    """A compare-and-set kept losing to other writers, ``retries`` times in a row."""


class Lost:
    """A round's answer when another writer got in first: read again and compute again."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "LOST"


LOST: Final = Lost()


def lost_race_pause(attempt: int) -> None:
    """Sleep a little before retrying a lost race, more after each loss, with jitter so the
    writers that collided do not collide again in lockstep."""
    time.sleep(random.uniform(0, backoff_s(LOST_RACE_BASE_S, attempt, cap_s=LOST_RACE_CAP_S)))


def until_written(one_round: Callable[[int], T | Lost], *, retries: int, what: str) -> T:
    """Run ``one_round(attempt)`` (attempt 0 first) until it answers anything but
    :data:`LOST` (written, a no-op, the record gone: the store's answer), pausing after each
    loss; :class:`WriteConflict` naming ``what`` once ``retries`` retries lost too."""
    for attempt in range(retries + 1):
        answer = one_round(attempt)
        if not isinstance(answer, Lost):
            return answer
        lost_race_pause(attempt)
    raise WriteConflict(f"{what}: still losing to other writers after {retries} retries")
