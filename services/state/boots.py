"""Machines on their way up: every launch the cloud accepted whose machines have not all
reported in yet, kept in Redis until a boot watch sees them up, dead or late.

Layout: one hash per cloud, ``<prefix>:boots:<cloud>``, field the attempt id (the launch's
idempotency key), value the :class:`Boot` as JSON. Its length is the cloud's launches in flight.
Beside it, ``<prefix>:boots:<cloud>:watch`` is set while a watch of that cloud is scheduled,
so a burst of launches schedules one watch, not one each.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from corral.services.state import as_text
from corral.shared.launches import Boot

__all__ = ["Boot", "BootBook"]


class BootBook:
    def __init__(self, client: redis.Redis, prefix: str = "corral") -> None:
        self.client = client
        self.prefix = prefix
        # Each boot as last read, by its stored JSON: a watch reads every boot of its cloud on
        # every look, and a boot's JSON does not change while it is in the book, so each is
        # parsed once (a thousand boots, twice a second).
        self._read: dict[bytes | str, Boot] = {}

    def _key(self, cloud: str) -> str:
        return f"{self.prefix}:boots:{cloud}"

    def add(self, boot: Boot, watch_ttl_s: float | None = None) -> bool:
        """Watch ``boot`` (again: the same attempt overwrites itself, so a redelivered launch
        adds nothing). With ``watch_ttl_s``, also :meth:`schedule_watch` its cloud in the same
        round trip: True when this call marked the watch scheduled (the caller sends it)."""
        cloud = boot.spec.cloud
        if watch_ttl_s is None:
            self.client.hset(self._key(cloud), boot.key, boot.model_dump_json())
            return False
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self._key(cloud), boot.key, boot.model_dump_json())
        pipe.set(self._key(cloud) + ":watch", "1", nx=True, px=max(1, int(watch_ttl_s * 1000)))
        return bool(pipe.execute()[1])

    def remove(self, boot: Boot) -> bool:
        """Stop watching ``boot``; True if this call removed it."""
        return int(self.client.hdel(self._key(boot.spec.cloud), boot.key)) == 1

    def remove_all(self, boots: Sequence[Boot]) -> int:
        """Stop watching every boot of ``boots``, one command per cloud; how many it removed."""
        by_cloud: dict[str, list[str]] = {}
        for boot in boots:
            by_cloud.setdefault(boot.spec.cloud, []).append(boot.key)
        return sum(int(self.client.hdel(self._key(c), *keys)) for c, keys in by_cloud.items())

    def of(self, cloud: str) -> list[Boot]:
        """Every launch of ``cloud`` on its way up, oldest deadline first."""
        raw = self.client.hvals(self._key(cloud))
        known, read = self._read, {}
        for value in raw:
            boot = known.get(value)
            read[value] = boot if boot is not None else Boot.model_validate_json(value)
        if len(self._read) < 4 * len(read) + 1000:
            known.update(read)  # boots of other clouds stay known too
        else:
            self._read = read  # forget boots that have left the book
        # The boots as parsed, shared with the next look (no copy of each boot on every look):
        # a caller never changes a boot it was given.
        return sorted(read.values(), key=lambda b: b.deadline)

    def keys(self, cloud: str) -> set[str]:
        """The attempt ids of ``cloud``'s launches on their way up (the boots not read)."""
        return {as_text(k) for k in self.client.hkeys(self._key(cloud))}

    def get(self, cloud: str, attempt_id: str) -> Boot | None:
        raw = self.client.hget(self._key(cloud), attempt_id)
        return None if raw is None else Boot.model_validate_json(raw)

    def in_flight(self, cloud: str) -> int:
        """How many launches of ``cloud`` are on their way up."""
        return int(self.client.hlen(self._key(cloud)))

    def schedule_watch(self, cloud: str, ttl_s: float) -> bool:
        """Mark a watch of ``cloud`` scheduled for ``ttl_s``; False if one already is."""
        key = self._key(cloud) + ":watch"
        return bool(self.client.set(key, "1", nx=True, px=max(1, int(ttl_s * 1000))))

    def rearm_watch(self, cloud: str, ttl_s: float) -> None:
        """The watch schedules its own next pass: keep the mark for another ``ttl_s``."""
        self.client.set(self._key(cloud) + ":watch", "1", px=max(1, int(ttl_s * 1000)))

    def end_watch(self, cloud: str) -> None:
        self.client.delete(self._key(cloud) + ":watch")
