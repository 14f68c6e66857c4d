"""kombu's Redis transports, with one fix for riding through a Redis restart or failover, and
two savings per message.

When kombu reconnects it closes the old channel, but a message taken on that channel may still
be acknowledged through it, and a pooled producer may still publish on it. kombu's channel
then looks for the connection it no longer has and raises AttributeError, which Celery does
not expect: it killed the worker ("Unrecoverable error") or failed an API request with a 500.
Here such a channel raises a connection error instead, which kombu and Celery handle as what
it is: the acknowledgement is logged as failed (the message comes back and runs again, every
task being idempotent), the publish reconnects and is sent again.

Each message a worker takes is kept in kombu's ``unacked`` hash and index until it is
acknowledged (so a worker that dies gives it back). kombu writes and removes the pair in a
MULTI/EXEC transaction: 8 commands per message where 4 do. The transaction buys nothing here:
the two commands of a pipeline reach Redis in one write and run in order, and the only other
reader of the pair (``restore_visible``) takes entries older than the visibility timeout
(an hour), never one being written; restoring one (``restore_by_tag``) still runs in its own
WATCH transaction.

``dispatch.celery_config`` names these classes (``broker_transport``) for every process that
talks to the broker: the API, the CLI, the workers and beat.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

from corral.services.queues.redis_retry import driver_options


class _ClosedChannelGuard:
    """A channel whose connection was closed says so with a connection error; and one client
    object per channel and pool for its plain commands."""

    connection: Any
    pool: Any
    _plain_client: Any = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("this broker channel's connection is closed")
        params = super()._connparams(asynchronous)  # type: ignore[misc]
        # Each channel opens connections of its own (two pools): their library version is
        # found once per process, not looked up in the packages' metadata for each.
        params.update(driver_options())
        return params

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu builds a new ``redis.Redis`` for every publish, event and acknowledgement
        (``conn_or_acquire``), on the channel's one connection pool; building one (its table
        of response callbacks) was about 8 % of a provisioning worker's CPU. A client holds
        no connection of its own and is safe across threads, so the channel keeps the one it
        made while its pool is the same (kombu drops the pool on a disconnect: the next call
        makes a new client on the new pool)."""
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # a closed channel raises here, as kombu's own call would
        client = self._plain_client
        if client is None or client.connection_pool is not pool:
            client = self._plain_client = super()._create_client()  # type: ignore[misc]
        return client


class QoS(kombu_redis.QoS):
    """kombu's ack emulation, its unacked pair written and removed without MULTI/EXEC."""

    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Iterator[Any]:
        if pipe:
            yield pipe  # a caller's pipeline (restore_by_tag's transaction) as it is
        else:
            with self.channel.conn_or_acquire(client) as conn:
                yield conn.pipeline(transaction=False)


class Channel(_ClosedChannelGuard, kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(_ClosedChannelGuard, kombu_redis.SentinelChannel):
    QoS = QoS


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def transport_for(sentinel: bool) -> str:
    """The class path Celery's ``broker_transport`` setting takes."""
    return f"{__name__}:{'SentinelTransport' if sentinel else 'Transport'}"
