"""redis-py's side of :mod:`corral.services.queues.redis_conn`: the retry policy and the
options of every connection the control plane opens through :func:`~.redis_conn.connect`
(apart from that module so that importing it costs a process no redis-py: the node agent
reaches Redis through the same module without it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 1.0  # once Redis is back, every client is on it within about a second
HEALTH_CHECK_S = 5  # an idle pooled connection is pinged before reuse after this long

T = TypeVar("T")


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
    patience_s: float, decode_responses: bool, socket_timeout_s: float, connect_timeout_s: float
) -> dict[str, Any]:
    """The options of every redis-py connection Corral opens (redis_conn's docstring says why)."""
    return {
        **driver_options(),
        "decode_responses": decode_responses,
        "socket_connect_timeout": connect_timeout_s,
        "socket_timeout": socket_timeout_s,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_S,
        "retry": PatientRetry(patience_s),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError, OSError],
    }
