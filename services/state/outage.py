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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

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


class OutageBook:
    """Pulses the control plane and tells when its last outage ended."""

    def __init__(self, client: redis.Redis, prefix: str, gap_s: float) -> None:
        self.r = client
        self.key = f"{prefix}:outage"
        self.gap_s = gap_s
        self._pulse = client.register_script(_PULSE)

    def pulse(self) -> float:
        """One pulse; returns when the last outage ended (0.0: none seen)."""
        info: dict[str, Any] = self.r.info("server")
        run_id = str(info.get("run_id", ""))
        ended, _now = self._pulse(keys=[self.key], args=[run_id, self.gap_s])
        return float(_text(ended))

    def last_end(self) -> float:
        """When the last outage ended, without pulsing (0.0: none seen)."""
        value = self.r.hget(self.key, "ended_at")
        return float(_text(value)) if value else 0.0

    def last(self) -> dict[str, float]:
        """The hash as numbers (began_at, ended_at, pulse_at), for views and tests."""
        raw = self.r.hgetall(self.key)
        out = {}
        for k, v in raw.items():
            name = _text(k)
            if name != "run_id":
                out[name] = float(_text(v))
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def outage_book(client: redis.Redis, settings: Settings) -> OutageBook:
    """The book under the settings' prefix, with the gap the settings' timers call for."""
    timers = settings.timers
    gap_s = outage_gap_s(timers.outage_gap_s, timers.heartbeat_timeout_s)
    return OutageBook(client, settings.prefix, gap_s)
