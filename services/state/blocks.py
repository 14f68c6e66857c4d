"""The shared capacity-error memory: scopes that just failed, remembered in Redis with a TTL.

Every worker and every later request skips a scope that is remembered here. Layout: one hash
``<prefix>:blocks`` whose fields are the block's key (``cloud|region|zone|type|market``, empty
for a wildcard, and ``|family`` after them for a quota family's block) and whose values are
JSON ``{"until": epoch_s, "reason": text, "outcome": word}`` with ``"above": k`` for a
shortfall's ceiling (in the value, not the key: the place's one entry, so a release there lifts
it and a later answer there replaces it). Reads ignore expired entries; beat's expiry task
deletes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from corral.shared.blocking import Block

_FIELDS = ("cloud", "region", "zone", "instance_type", "market")


def block_key(block: Block) -> str:
    key = "|".join(getattr(block, f) or "" for f in _FIELDS)
    return f"{key}|{block.quota_family}" if block.quota_family else key


def block_from_key(key: str, above: int | None = None) -> Block:
    """The block of a field (five parts, or six with a quota family); ``above``: its
    ceiling, kept in the value."""
    parts = key.split("|", len(_FIELDS))
    family = parts[len(_FIELDS)] if len(parts) > len(_FIELDS) else None
    values = dict(zip(_FIELDS, parts[: len(_FIELDS)], strict=True))
    fields = {k: (v or None) for k, v in values.items()}
    return Block(**fields, quota_family=family or None, above=above)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RememberedBlock:
    block: Block
    until: float
    reason: str
    outcome: str


class BlockStore:
    def __init__(self, client: redis.Redis, prefix: str = "corral") -> None:
        self.client = client
        self.key = f"{prefix}:blocks"
        # Sent by their SHA (EVALSHA), not their text each time: a failed zone adds one.
        self._add = client.register_script(_ADD_LUA)
        self._add_read = client.register_script(_ADD_READ_LUA)

    def add(self, block: Block, *, now: float, ttl_s: float, reason: str, outcome: str) -> None:
        """Remember ``block`` until ``now + ttl_s`` (a later, longer block wins)."""
        # Keep the later expiry when two workers block the same scope at once.
        self._add(keys=[self.key], args=self._add_args(block, now, ttl_s, reason, outcome))

    def add_then_active(
        self, block: Block, *, now: float, ttl_s: float, reason: str, outcome: str
    ) -> list[RememberedBlock]:
        """:meth:`add`, then :meth:`active` at ``now``, in one round trip (a failed zone
        remembers its block, then walks on against every block)."""
        args = self._add_args(block, now, ttl_s, reason, outcome)
        flat = self._add_read(keys=[self.key], args=args)
        return self._parse(zip(flat[::2], flat[1::2], strict=True), now)

    def _add_args(
        self, block: Block, now: float, ttl_s: float, reason: str, outcome: str
    ) -> list[str | float]:
        data: dict[str, Any] = {"until": now + ttl_s, "reason": reason, "outcome": outcome}
        if block.above is not None:
            data["above"] = block.above
        return [block_key(block), json.dumps(data), now + ttl_s]

    def active(self, now: float) -> list[RememberedBlock]:
        return self._parse(self.client.hgetall(self.key).items(), now)

    def active_in(self, raw: Mapping[Any, Any], now: float) -> list[RememberedBlock]:
        """:meth:`active` from the hash at :attr:`key` as its caller read it (beside another
        read, in one round trip: :meth:`Store.get_request_beside`)."""
        return self._parse(raw.items(), now)

    def _parse(self, items: Iterable[tuple[Any, Any]], now: float) -> list[RememberedBlock]:
        """The blocks in force at ``now`` among the hash's (field, value) pairs."""
        out: list[RememberedBlock] = []
        for field, raw in items:
            data: dict[str, Any] = json.loads(raw)
            if data["until"] > now:
                key = field.decode() if isinstance(field, bytes) else field
                out.append(
                    RememberedBlock(
                        block_from_key(key, data.get("above")),
                        data["until"],
                        data["reason"],
                        data.get("outcome", "error"),
                    )
                )
        return out

    def expire(self, now: float) -> int:
        """Delete expired entries; returns how many. Atomic: a block renewed for longer while
        this runs is kept."""
        return int(self.client.eval(_EXPIRE_LUA, 1, self.key, now))

    def lift(self, blocks: Sequence[Block], *, keep: frozenset[str] = frozenset({"lost"})) -> int:
        """End ``blocks`` now, those remembered with an outcome in ``keep`` excepted; returns
        how many ended. One HMGET when none is remembered (the usual case); a block renewed
        between the read and the delete is kept (the delete compares the value read)."""
        fields = [block_key(b) for b in blocks]
        found = [
            (field, raw)
            for field, raw in zip(fields, self.client.hmget(self.key, fields), strict=True)
            if raw is not None and json.loads(raw).get("outcome") not in keep
        ]
        if not found:
            return 0
        args = [part for pair in found for part in pair]
        return int(self.client.eval(_LIFT_LUA, 1, self.key, *args))

    def clear(self) -> None:
        self.client.delete(self.key)


_EXPIRE_LUA = """
local gone = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(cjson.decode(all[i + 1])['until']) <= tonumber(ARGV[1]) then
    gone = gone + redis.call('HDEL', KEYS[1], all[i])
  end
end
return gone
"""

# Pairs of (field, value as read): each is deleted only if it still holds that value.
_LIFT_LUA = """
local gone = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    gone = gone + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return gone
"""

_ADD_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local until_old = tonumber(cjson.decode(old)['until'])
  if until_old >= tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# _ADD_LUA, then every block (the hash as HGETALL gives it) for a caller that reads them next.
_ADD_READ_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old or tonumber(cjson.decode(old)['until']) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return redis.call('HGETALL', KEYS[1])
"""
