"""Task bundles, kept per project: the gzip'd tar ``corral launch`` uploads, under its sha256.

The bytes go to a blob store (:mod:`corral.services.state.blobs`: a folder under CORRAL_HOME
or an S3 bucket), never to Redis. Redis keeps, per project (its *scope*), which sha256s it
holds, their sizes, when each was last used and the project's total, so:

- a bundle is one project's: another project's member who knows the sha256 can neither
  fetch it, find it kept (``HEAD`` 404) nor name it in a task (the submit is refused);
- a project keeps at most its quota (``CORRAL_BUNDLE_QUOTA_BYTES``; each bundle counts at
  least :data:`MIN_CHARGE_BYTES`, so its metadata is bounded too): an upload over it is
  refused, naming the quota and what the project holds;
- a bundle unused for ``BUNDLE_TTL_S`` is let go at the project's next upload.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import redis

from corral.services.state.blobs import Blobs

BUNDLE_TTL_S = 7 * 24 * 3600
MIN_CHARGE_BYTES = 64 * 1024
NO_PROJECT_SCOPE = "_none"  # an admin's project-less submissions ('_' starts no project name)

# KEYS: sizes (hash sha -> charged bytes), used (zset sha -> last use), total (string).
# ARGV: sha, charge, now, quota. Returns {1, total} added, {0, total} kept already,
# {-1, total} refused (over the quota).
_RESERVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  return {0, tonumber(redis.call('GET', KEYS[3]) or '0')}
end
local total = tonumber(redis.call('GET', KEYS[3]) or '0')
if total + tonumber(ARGV[2]) > tonumber(ARGV[4]) then
  return {-1, total}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return {1, redis.call('INCRBY', KEYS[3], ARGV[2])}
"""

# KEYS as above; ARGV: sha, and the last use it must not be newer than ("+inf": any).
# Returns 1 when the sha was dropped.
_RELEASE = """
local used = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not used or tonumber(used) > tonumber(ARGV[2]) then return 0 end
local size = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DECRBY', KEYS[3], size)
return 1
"""


class QuotaExceeded(Exception):
    """An upload that would take a project past its bundle quota."""

    def __init__(self, scope: str, size_bytes: int, held_bytes: int, quota_bytes: int) -> None:
        who = "the project-less scope" if scope == NO_PROJECT_SCOPE else f"project {scope!r}"
        super().__init__(
            f"bundle quota exceeded: {who} holds {held_bytes:,} bytes of bundles, this one "
            f"counts {size_bytes:,} and the quota is {quota_bytes:,} (CORRAL_BUNDLE_QUOTA_BYTES); "
            f"unused bundles are let go after {BUNDLE_TTL_S // 86400} days"
        )


def scope_of(project: str | None) -> str:
    """The bundle scope of a project (None: an admin's project-less work)."""
    return NO_PROJECT_SCOPE if project is None else project


@dataclass
class BundleStore:
    r: redis.Redis
    prefix: str
    blobs: Blobs
    quota_bytes: int = 1024**3

    def _keys(self, scope: str) -> list[str]:
        base = f"{self.prefix}:bundles:{scope}"
        return [f"{base}:sizes", f"{base}:used", f"{base}:bytes"]

    def put(self, scope: str, sha256: str, data: bytes, now: float | None = None) -> bool:
        """Keep ``data`` under ``sha256`` for ``scope``: False when it was kept already.
        ValueError when ``sha256`` is not its checksum; QuotaExceeded over the quota."""
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError("the body's sha256 is not the one in the path")
        now = time.time() if now is None else now
        self.let_go_unused(scope, now)
        charge = max(len(data), MIN_CHARGE_BYTES)
        keys = self._keys(scope)
        code, total = self.r.eval(_RESERVE, 3, *keys, sha256, charge, now, self.quota_bytes)
        if int(code) < 0:
            raise QuotaExceeded(scope, charge, int(total), self.quota_bytes)
        try:
            if int(code) == 1 or self.blobs.get(f"{scope}/{sha256}") is None:
                self.blobs.put(f"{scope}/{sha256}", data)
        except BaseException:
            if int(code) == 1:
                self.r.eval(_RELEASE, 3, *keys, sha256, "+inf")
            raise
        return int(code) == 1

    def has(self, scope: str, sha256: str, now: float | None = None) -> bool:
        """Whether ``scope`` keeps the bundle (and, if so, it counts as used now)."""
        used = self._keys(scope)[1]
        if self.r.zscore(used, sha256) is None:
            return False
        self.r.zadd(used, {sha256: time.time() if now is None else now}, xx=True)
        return True

    def get(self, scope: str, sha256: str) -> bytes | None:
        """The bundle's bytes when ``scope`` keeps it (checked again against its sha256)."""
        if self.r.zscore(self._keys(scope)[1], sha256) is None:
            return None
        data = self.blobs.get(f"{scope}/{sha256}")
        if data is None or hashlib.sha256(data).hexdigest() != sha256:
            return None
        return data

    def held_bytes(self, scope: str) -> int:
        """What ``scope``'s bundles count against its quota."""
        return int(self.r.get(self._keys(scope)[2]) or 0)

    def let_go_unused(self, scope: str, now: float) -> int:
        """Drop ``scope``'s bundles unused for :data:`BUNDLE_TTL_S`; how many went."""
        keys = self._keys(scope)
        cutoff = now - BUNDLE_TTL_S
        gone = 0
        for raw in self.r.zrangebyscore(keys[1], "-inf", cutoff):
            sha = raw.decode() if isinstance(raw, bytes) else str(raw)
            if self.r.eval(_RELEASE, 3, *keys, sha, cutoff):
                self.blobs.delete(f"{scope}/{sha}")
                gone += 1
        return gone
