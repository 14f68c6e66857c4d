"""Replicated services (SkyServe's ``service.replicas``) in Redis.

- The index: the request ids beat's serving pass looks at (services/runtime/serving.py), so it
  reads no other request; one set ``<prefix>:services``. A service enters it when its request
  is stored and leaves it once its request and every replica have ended.
- The requests its load balancer relayed, for QPS autoscaling: one hash per service
  ``<prefix>:services:hits:<id>`` of counts per ``BUCKET_S`` seconds (the bucket's start),
  expiring ``KEEP_S`` after its last count.
"""

from __future__ import annotations

import redis

BUCKET_S = 5
KEEP_S = 300


class ServiceIndex:
    def __init__(self, client: redis.Redis, prefix: str = "corral") -> None:
        self.client = client
        self.key = f"{prefix}:services"

    def add(self, request_id: str) -> None:
        self.client.sadd(self.key, request_id)

    def remove(self, request_id: str) -> None:
        self.client.srem(self.key, request_id)

    def members(self) -> list[str]:
        """The services, in id order (a pass visits them in a stable order)."""
        found = self.client.smembers(self.key)
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in found)

    def _hits_key(self, request_id: str) -> str:
        return f"{self.key}:hits:{request_id}"

    def count_request(self, request_id: str, now: float) -> None:
        """One request relayed to the service at ``now``."""
        key = self._hits_key(request_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(key, str(int(now // BUCKET_S) * BUCKET_S), 1)
        pipe.expire(key, KEEP_S)
        pipe.execute()

    def requests_since(self, request_id: str, since: float) -> int:
        """The requests relayed in the buckets that start at or after ``since``; older
        buckets are deleted."""
        key = self._hits_key(request_id)
        counts = self.client.hgetall(key)
        total, old = 0, []
        for bucket, n in counts.items():
            start = float(bucket)
            if start >= since:
                total += int(n)
            else:
                old.append(bucket)
        if old:
            self.client.hdel(key, *old)
        return total
