"""Corral's kombu transport (services/queues/transport.py) against a real redis-server: one
client object per channel and pool, a new one on a new pool, and a closed channel that says
so with a connection error."""

from __future__ import annotations

import pytest
import redis
from kombu import Connection

from corral.services.queues.transport import transport_for

pytestmark = pytest.mark.integration


def _connection(redis_url: str) -> Connection:
    return Connection(redis_url, transport=transport_for(sentinel=False))


def test_a_channel_keeps_one_client_for_its_pool_and_makes_a_new_one_for_a_new_pool(
    redis_url: str,
) -> None:
    with _connection(redis_url) as conn:
        channel = conn.default_channel
        first = channel._create_client()
        assert channel._create_client() is first  # kombu made one per call
        with channel.conn_or_acquire() as client:
            assert client is first
        queue = conn.SimpleQueue("t-transport")
        queue.put({"n": 1})
        channel._disconnect_pools()  # what kombu does on a disconnect
        second = channel._create_client()
        assert second is not first and second.connection_pool is channel.pool
        queue.put({"n": 2})  # publishing goes on over the new pool
        got = [queue.get(timeout=5).payload["n"] for _ in range(2)]
        assert got == [1, 2]
        queue.close()


def test_a_closed_channel_raises_a_connection_error_not_an_attribute_error(
    redis_url: str,
) -> None:
    conn = _connection(redis_url)
    channel = conn.channel()
    channel._create_client()
    conn.close()
    channel.connection = None
    channel._disconnect_pools()
    with pytest.raises(redis.exceptions.ConnectionError, match="connection is closed"):
        channel._create_client()
