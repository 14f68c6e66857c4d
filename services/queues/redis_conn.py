"""How every Corral process reaches Redis: one URL form, one retry policy.

The URL (``CORRAL_REDIS_URL``) is one of:

- ``redis://[[user]:password@]host:port[/db]``, ``rediss://...`` (TLS), ``unix:///path?db=N``;
- ``sentinel://[[user]:password@]host:port[;sentinel://host:port...][/db][?master_name=NAME]``:
  Redis Sentinel, as kombu writes it: every sentinel, separated by ``;``; the password is the
  data nodes' (sentinels are asked without one); ``master_name`` defaults to ``mymaster``.

Clients built here ride through a Redis restart or a Sentinel failover: a command that meets a
connection error or a time-out is tried again, with jittered exponential backoff capped at
:data:`BACKOFF_CAP_S`, until ``patience_s`` has passed (then the error is raised). A Sentinel
client asks the sentinels for the master again on every new connection, so a retry after a
failover lands on the promoted replica. Why retry in the client rather than in each caller:
every store write is already safe to repeat (compare-and-set on a version, set-if-absent,
idempotent by id), so one policy here covers every caller, the API, the workers and beat alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

DEFAULT_MASTER_NAME = "mymaster"  # the name Redis's own sentinel.conf uses
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 1.0  # once Redis is back, every client is on it within about a second
CONNECT_TIMEOUT_S = 2.0
# A command waits this long for its answer before the client counts the connection as dead
# (a paused or half-open Redis); the retry then reconnects.
SOCKET_TIMEOUT_S = 10.0
HEALTH_CHECK_S = 5  # an idle pooled connection is pinged before reuse after this long

T = TypeVar("T")


class RedisUrlError(ValueError):
    """The Redis URL is not one Corral can use (the message says what was expected)."""


@dataclass(frozen=True)
class RedisTarget:
    """A Redis URL taken apart."""

    url: str
    scheme: str  # redis | rediss | unix | sentinel
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()  # set for sentinel:// only
    master_name: str | None = None

    @property
    def is_sentinel(self) -> bool:
        return self.scheme == "sentinel"


def parse_redis_url(url: str) -> RedisTarget:
    """Take a Corral Redis URL apart; :class:`RedisUrlError` names what is wrong."""
    if not url:
        raise RedisUrlError("the Redis URL is empty")
    scheme = urlsplit(url.split(";", 1)[0]).scheme
    if scheme in ("redis", "rediss", "unix"):
        parts = urlsplit(url)
        db = _db(parts.path if scheme != "unix" else "", parse_qs(parts.query))
        return RedisTarget(
            url,
            scheme,
            db,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password else None,
        )
    if scheme != "sentinel":
        raise RedisUrlError(
            f"a Redis URL must start with redis://, rediss://, unix:// or sentinel://, "
            f"not {scheme + '://' if scheme else url!r}"
        )
    return _parse_sentinel(url)


def _parse_sentinel(url: str) -> RedisTarget:
    sentinels: list[tuple[str, int]] = []
    username = password = None
    db, master = 0, DEFAULT_MASTER_NAME
    for piece in url.split(";"):
        parts = urlsplit(piece)
        if parts.scheme != "sentinel" or not parts.hostname:
            raise RedisUrlError(
                f"expected sentinel://host:port for each sentinel (separated by ';'), got {piece!r}"
            )
        sentinels.append((parts.hostname, parts.port or 26379))
        username = username or (unquote(parts.username) if parts.username else None)
        password = password or (unquote(parts.password) if parts.password else None)
        query = parse_qs(parts.query)
        if parts.path.strip("/") or "db" in query:
            db = _db(parts.path, query)
        master = query.get("master_name", [master])[0]
    return RedisTarget(url, "sentinel", db, username, password, tuple(sentinels), master)


def _db(path: str, query: dict[str, list[str]]) -> int:
    text = path.strip("/") or query.get("db", ["0"])[0]
    if not text.isdigit():
        raise RedisUrlError(f"the database in a Redis URL is a number, not {text!r}")
    return int(text)


class PatientRetry(Retry):
    """redis-py's retry, bounded by time rather than by a count: connection errors and
    time-outs are retried with jittered exponential backoff until ``patience_s`` passed.

    redis-py nests retries (a command's retry reconnects, and connecting has a retry of its
    own, with the same object); only the outermost loop retries here. Why: an inner connect
    loop would keep dialling the address it was given, a dead Sentinel master's for the whole
    patience, where the outer loop's next try asks the sentinels for the new one."""

    _depth = threading.local()

    def __init__(self, patience_s: float) -> None:
        super().__init__(
            ExponentialWithJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S),
            retries=-1,
            supported_errors=(RedisConnectionError, RedisTimeoutError, OSError),
        )
        self.patience_s = patience_s

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        try:
            if depth:
                return self._once(do, fail, with_failure_count)
            return self._patiently(do, fail, is_retryable, with_failure_count)
        finally:
            self._depth.n = depth

    def _once(self, do: Callable[[], T], fail: Callable[..., Any], with_count: bool) -> T:
        try:
            return do()
        except self._supported_errors as error:
            if with_count:
                fail(error, 1)
            else:
                fail(error)
            raise

    def _patiently(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None,
        with_failure_count: bool,
    ) -> T:
        deadline = time.monotonic() + self.patience_s
        failures = 0
        while True:
            try:
                return do()
            except self._supported_errors as error:
                if is_retryable and not is_retryable(error):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                wait = self._backoff.compute(failures)
                if time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)


@cache
def driver_options() -> dict[str, Any]:
    """The library name and version a connection reports (``CLIENT SETINFO``), found once per
    process. redis-py 7.1 and later look its version up in the installed packages' metadata
    for every connection they open unless given it: about 1 ms of CPU each, which an API
    opening its pools' connections under a burst of submits paid a few dozen times. The same
    name and version are reported either way. (Older redis-py read it once, at import.)"""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo()}


def client_options(
    patience_s: float, decode_responses: bool = False, socket_timeout_s: float = SOCKET_TIMEOUT_S
) -> dict[str, Any]:
    """The options of every Redis connection Corral opens (see the module's docstring)."""
    return {
        **driver_options(),
        "decode_responses": decode_responses,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": socket_timeout_s,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_S,
        "retry": PatientRetry(patience_s),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError, OSError],
    }


def connect(
    url: str,
    *,
    patience_s: float,
    decode_responses: bool = False,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
) -> redis.Redis:
    """A client for ``url`` (any form above) that rides through outages up to ``patience_s``."""
    target = parse_redis_url(url)
    options = client_options(patience_s, decode_responses, socket_timeout_s)
    if not target.is_sentinel:
        return redis.Redis.from_url(url, **options)
    from redis.sentinel import Sentinel

    # redis-py types Sentinel from 8.2 on; before it, these calls are untyped.
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(target.sentinels),
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=CONNECT_TIMEOUT_S,
        sentinel_kwargs={
            "socket_connect_timeout": CONNECT_TIMEOUT_S,
            "socket_timeout": CONNECT_TIMEOUT_S,
        },
    )
    assert target.master_name is not None
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        target.master_name,
        redis_class=redis.Redis,
        db=target.db,
        username=target.username,
        password=target.password,
        **options,
    )
    return client


def broker_url(target: RedisTarget) -> str:
    """The URL kombu takes: a Sentinel URL without Corral's ``?master_name=`` (kombu reads it
    from the transport options)."""
    if not target.is_sentinel:
        return target.url
    auth = ""
    if target.password is not None:
        auth = f"{target.username or ''}:{target.password}@"
    hosts = [f"sentinel://{auth}{host}:{port}" for host, port in target.sentinels]
    return ";".join(hosts) + f"/{target.db}"


def broker_options(target: RedisTarget) -> dict[str, Any]:
    """kombu transport options a Sentinel URL needs (none for the others)."""
    if not target.is_sentinel:
        return {}
    return {
        "master_name": target.master_name,
        "sentinel_kwargs": {
            "socket_connect_timeout": CONNECT_TIMEOUT_S,
            "socket_timeout": CONNECT_TIMEOUT_S,
        },
    }
