"""The index of replicated services (SkyServe's ``service.replicas``): the request ids beat's
serving pass looks at (services/runtime/serving.py), so it reads no other request. Layout: one
set ``<prefix>:services``. A service enters it when its request is stored and leaves it once
its request and every replica have ended."""

from __future__ import annotations

import redis


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
