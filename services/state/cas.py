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


# The Lua scripts of the stores' rounds (the request store's and the machine table's).

# KEYS[1] the record's hash; KEYS[2..] the index zsets to add it to.
# ARGV: id, version, json, score. Returns 1 if created, 0 if the id exists.
CREATE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
for i = 2, #KEYS do redis.call('ZADD', KEYS[i], ARGV[4], ARGV[1]) end
return 1
"""

# KEYS[1] the record's hash, KEYS[2] the old state's index, KEYS[3] the new state's index,
# KEYS[4] (a request's, optional) its progress log, KEYS[5] (optional, with KEYS[4]) a claim
# to take with the write. ARGV: id, expected version, new version, json, score; with KEYS[4]
# the number of progress lines n, then the lines appended with the write (a walk's: one round
# trip); with KEYS[5] the claim's owner and TTL in ms (taken only if nobody holds it: the
# claim of the attempt the write starts, for the task that runs it, without a round trip of
# its own). Returns 1 if written (and the claim taken), 2 if written but the claim is held by
# someone else, 0 if the version moved on (lost race), -1 if the record is gone.
CAS_SCRIPT = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return -1 end
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'json', ARGV[4])
if KEYS[2] ~= KEYS[3] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
end
if KEYS[4] then
  local n = tonumber(ARGV[6])
  if n > 0 then redis.call('RPUSH', KEYS[4], unpack(ARGV, 7, 6 + n)) end
  if KEYS[5] and not redis.call('SET', KEYS[5], ARGV[7 + n], 'NX', 'PX', ARGV[8 + n]) then
    return 2
  end
end
return 1
"""

# CAS_SCRIPT for several records at once, all or none: KEYS three per record (its hash, old
# and new state index), ARGV five per record (id, expected version, new version, json, score).
# Returns 1 if all were written, 0 if one's version moved on, -1 if one is gone (then none).
CAS_ALL_SCRIPT = """
for i = 0, #KEYS / 3 - 1 do
  local current = redis.call('HGET', KEYS[3 * i + 1], 'version')
  if not current then return -1 end
  if current ~= ARGV[5 * i + 2] then return 0 end
end
for i = 0, #KEYS / 3 - 1 do
  local k, a = 3 * i, 5 * i
  redis.call('HSET', KEYS[k + 1], 'version', ARGV[a + 3], 'json', ARGV[a + 4])
  if KEYS[k + 2] ~= KEYS[k + 3] then
    redis.call('ZREM', KEYS[k + 2], ARGV[a + 1])
    redis.call('ZADD', KEYS[k + 3], ARGV[a + 5], ARGV[a + 1])
  end
end
return 1
"""


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
