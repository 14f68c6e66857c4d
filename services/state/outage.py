"""The control plane's own outages, so that a silence it caused is never charged to a machine.

Machines report into Redis. When Redis restarts, fails over or pauses, nobody can report; the
machines are not at fault, and the rule in :mod:`corral.shared.liveness` counts their silence
only from the end of such an outage. This module records when the last one ended.

One hash, ``<prefix>:outage``: ``pulse_at`` (Redis's clock at the last pulse), ``run_id`` (the
Redis server that took it), ``began_at`` and ``ended_at`` (the last outage). The control plane
pulses often: beat on every tick, and every look at the machines (the local cloud's describe,
the node book's views) pulses before it judges anyone. A pulse finds an outage when

- the previous pulse is older than the gap (Redis was paused or unreachable for everyone: no
  pulse got through), or
- the Redis server is another one (its ``run_id`` changed: a restart, a Sentinel failover),

and records it as ended now. A pause in pulsing that is not Redis's fault (beat restarting,
nothing looking) reads as an outage too: that only delays a verdict by one heartbeat timeout,
never charges anyone. The times are Redis's clock (``TIME``), the same for every process.

Cloud machines' agents report through the API, not into Redis: an API that is down (a crash, a
rolling upgrade) silences them as surely as Redis being down does. So the API pulses too, from
a thread of its own, into ``<prefix>:outage:api`` (``pulse_at``, ``began_at``, ``ended_at``),
and :meth:`OutageBook.api_heard_since` tells the observer of those machines since when they
could be heard: now, while no API has pulsed for the gap (nobody can hear them now); else the
end of the API's last outage; 0.0 if no API ever pulsed (a system without one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

from corral.services.state import as_text
from corral.shared.liveness import outage_gap_s

if TYPE_CHECKING:
    from corral.services.settings import Settings

# KEYS[1]: the outage hash. ARGV[1]: the server's run_id, ARGV[2]: the gap in seconds.
# Returns {ended_at, now} as strings (ended_at "0" when no outage was ever seen).
_PULSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local last = tonumber(redis.call('HGET', KEYS[1], 'pulse_at') or '0')
local run = redis.call('HGET', KEYS[1], 'run_id')
local ended = redis.call('HGET', KEYS[1], 'ended_at') or '0'
if last > 0 and (now - last > tonumber(ARGV[2]) or (run and run ~= ARGV[1])) then
  ended = tostring(now)
  redis.call('HSET', KEYS[1], 'began_at', tostring(last), 'ended_at', ended)
end
redis.call('HSET', KEYS[1], 'pulse_at', tostring(now), 'run_id', ARGV[1])
return {ended, tostring(now)}
"""


# The API's pulse. KEYS[1]: its hash, ARGV[1]: the gap. Returns the ended_at of the last outage.
_API_PULSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local last = tonumber(redis.call('HGET', KEYS[1], 'pulse_at') or '0')
if last > 0 and now - last > tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'began_at', tostring(last), 'ended_at', tostring(now))
end
redis.call('HSET', KEYS[1], 'pulse_at', tostring(now))
return redis.call('HGET', KEYS[1], 'ended_at') or '0'
"""

# Since when the API could hear the machines. KEYS[1]: its hash, ARGV[1]: the gap.
_API_HEARD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local last = tonumber(redis.call('HGET', KEYS[1], 'pulse_at') or '0')
if last == 0 then return '0' end
if now - last > tonumber(ARGV[1]) then return tostring(now) end
return redis.call('HGET', KEYS[1], 'ended_at') or '0'
"""


class OutageBook:
    """Pulses the control plane and tells when its last outage ended."""

    def __init__(self, client: redis.Redis, prefix: str, gap_s: float) -> None:
        self.r = client
        self.key = f"{prefix}:outage"
        self.gap_s = gap_s
        self.api_key = f"{prefix}:outage:api"
        self._pulse = client.register_script(_PULSE)
        self._api_pulse = client.register_script(_API_PULSE)
        self._api_heard = client.register_script(_API_HEARD)

    def pulse(self) -> float:
        """One pulse; returns when the last outage ended (0.0: none seen)."""
        info: dict[str, Any] = self.r.info("server")
        run_id = str(info.get("run_id", ""))
        ended, _now = self._pulse(keys=[self.key], args=[run_id, self.gap_s])
        return float(as_text(ended))

    def pulse_api(self) -> float:
        """The API is up and listening to the machines (its pulse thread calls this every
        :func:`api_pulse_interval_s`); returns when its last outage ended."""
        return float(as_text(self._api_pulse(keys=[self.api_key], args=[self.gap_s])))

    def api_heard_since(self) -> float:
        """Since when machines reporting through the API could be heard: now while the API is
        away (no pulse for the gap), else the end of its last outage (0.0: none, or no API)."""
        return float(as_text(self._api_heard(keys=[self.api_key], args=[self.gap_s])))

    def last_end(self) -> float:
        """When the last outage ended, without pulsing (0.0: none seen)."""
        value = self.r.hget(self.key, "ended_at")
        return float(as_text(value)) if value else 0.0

    def last(self) -> dict[str, float]:
        """The hash as numbers (began_at, ended_at, pulse_at), for views and tests."""
        raw = self.r.hgetall(self.key)
        out = {}
        for k, v in raw.items():
            name = as_text(k)
            if name != "run_id":
                out[name] = float(as_text(v))
        return out


def api_pulse_interval_s(book: OutageBook) -> float:
    """How often the API pulses: a few times per gap, so a slow beat never reads as away."""
    return max(0.05, book.gap_s / 4)


def outage_book(client: redis.Redis, settings: Settings) -> OutageBook:
    """The book under the settings' prefix, with the gap the settings' timers call for."""
    timers = settings.timers
    gap_s = outage_gap_s(timers.outage_gap_s, timers.heartbeat_timeout_s)
    return OutageBook(client, settings.prefix, gap_s)
