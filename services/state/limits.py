"""Launch limits shared by every worker process: a token bucket of launch calls and a count of
launches in flight, per cloud and per region, both checked and taken in one Redis script.

Keys per scope (``aws``, ``aws/us-east-1``): ``<prefix>:limits:<scope>:bucket`` (a hash of
``tokens`` and ``at``) and ``<prefix>:limits:<scope>:flight`` (a sorted set of attempt ids,
scored by the time they stop counting: a launch whose process died is not counted forever).
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from corral.services.settings import LaunchLimit

# KEYS: bucket and flight key per scope. ARGV: now, attempt id, expire_at, then per scope
# calls_per_s (0: none), burst, in_flight (0: none). Returns "0" when admitted (or already
# admitted: a redelivered launch takes nothing twice), else the seconds to wait, as a string.
_ADMIT_LUA = """
local now, attempt, expire_at = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local scopes = #KEYS / 2
local wait = 0
local held = 0
for i = 0, scopes - 1 do
  local flight = KEYS[2 * i + 2]
  redis.call('ZREMRANGEBYSCORE', flight, '-inf', now)
  if redis.call('ZSCORE', flight, attempt) then held = held + 1 end
end
if held == scopes and scopes > 0 then return '0' end
local tokens = {}
for i = 0, scopes - 1 do
  local bucket, flight = KEYS[2 * i + 1], KEYS[2 * i + 2]
  local rate = tonumber(ARGV[4 + 3 * i])
  local burst = tonumber(ARGV[5 + 3 * i])
  local most = tonumber(ARGV[6 + 3 * i])
  if most > 0 and redis.call('ZCARD', flight) >= most then
    wait = math.max(wait, 0.5)
  end
  if rate > 0 then
    local t = redis.call('HMGET', bucket, 'tokens', 'at')
    local have = tonumber(t[1]) or burst
    local at = tonumber(t[2]) or now
    have = math.min(burst, have + math.max(0, now - at) * rate)
    tokens[i] = have
    if have < 1 then wait = math.max(wait, (1 - have) / rate) end
  end
end
if wait > 0 then return tostring(wait) end
for i = 0, scopes - 1 do
  local bucket, flight = KEYS[2 * i + 1], KEYS[2 * i + 2]
  if tokens[i] ~= nil then
    redis.call('HSET', bucket, 'tokens', tokens[i] - 1, 'at', now)
    redis.call('EXPIRE', bucket, 3600)
  end
  redis.call('ZADD', flight, expire_at, attempt)
end
return '0'
"""


class LaunchLimits:
    def __init__(
        self, client: redis.Redis, limits: Mapping[str, LaunchLimit], prefix: str = "corral"
    ) -> None:
        self.client = client
        self.limits = dict(limits)
        self.prefix = prefix
        self._admit = client.register_script(_ADMIT_LUA)

    def scopes(self, cloud: str, region: str) -> list[tuple[str, LaunchLimit]]:
        """The limits that apply to a launch in ``region`` of ``cloud``."""
        return [(s, self.limits[s]) for s in (cloud, f"{cloud}/{region}") if s in self.limits]

    def _keys(self, scope: str) -> list[str]:
        base = f"{self.prefix}:limits:{scope}"
        return [f"{base}:bucket", f"{base}:flight"]

    def admit(self, cloud: str, region: str, attempt_id: str, *, now: float, until: float) -> float:
        """Take a launch call and an in-flight place for ``attempt_id`` (held until it is
        released, or until ``until`` at the latest); 0.0 when taken, else the seconds to wait
        before asking again (nothing is taken then)."""
        scopes = self.scopes(cloud, region)
        if not scopes:
            return 0.0
        keys: list[str] = []
        args: list[str | float] = [now, attempt_id, until]
        for scope, limit in scopes:
            keys.extend(self._keys(scope))
            args.extend([limit.calls_per_s or 0, limit.burst, limit.in_flight or 0])
        return float(self._admit(keys=keys, args=args))

    def release(self, cloud: str, region: str, attempt_id: str) -> None:
        """The launch is up, failed or gone: its in-flight place is free."""
        pipe = self.client.pipeline()
        for scope, _ in self.scopes(cloud, region):
            pipe.zrem(self._keys(scope)[1], attempt_id)
        pipe.execute()

    def in_flight(self, cloud: str, region: str | None = None) -> int:
        """Launches counted in flight in the scope (0 when it has no limit)."""
        scope = cloud if region is None else f"{cloud}/{region}"
        return int(self.client.zcard(self._keys(scope)[1]))
