"""How every Corral process reaches Redis: one URL form, one parser, one module.

The URL (``CORRAL_REDIS_URL``) is one of:

- ``redis://[[user]:password@]host:port[/db]``, ``rediss://...`` (TLS), ``unix:///path?db=N``;
- ``sentinel://[[user]:password@]host:port[;sentinel://host:port...][/db][?master_name=NAME]``:
  Redis Sentinel, as kombu writes it: every sentinel, separated by ``;``; the password is the
  data nodes' (sentinels are asked without one); ``master_name`` defaults to ``mymaster``.

Two ways in, both from the one parser below:

- :func:`connect`, for the control plane (API, workers, beat, CLI): redis-py's client, imported
  only there. It rides through a Redis restart or a Sentinel failover: a command that meets a
  connection error or a time-out is tried again, with jittered exponential backoff capped at
  :data:`~.redis_retry.BACKOFF_CAP_S`, until ``patience_s`` has passed (then the error is
  raised). A Sentinel client asks the sentinels for the master again on every new connection,
  so a retry after a failover lands on the promoted replica. Why retry in the client rather
  than in each caller: every store write is already safe to repeat (compare-and-set on a
  version, set-if-absent, idempotent by id), so one policy here covers every caller, the API,
  the workers and beat alike (the policy itself: :mod:`~corral.services.queues.redis_retry`).
- :class:`MiniRedis`, for the local cloud's node agent: one connection speaking RESP itself,
  standard library only. Every local machine is an agent process, and redis-py's import costs
  about 160 ms of CPU against some 50 ms for the agent's whole import (a child's CPU, against
  ``python -c pass``, on the two-core CI machine), and each redis-py connection 0.5 ms more
  CPU and two more Redis commands (``CLIENT SETINFO``) than this one. It follows a
  ``sentinel://`` URL too: every new connection asks the sentinels, in turn, where the master
  is now, and checks that the server it reached still is a master (a demoted one would refuse
  writes).
"""

from __future__ import annotations

import builtins
import hashlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    import redis

DEFAULT_MASTER_NAME = "mymaster"  # the name Redis's own sentinel.conf uses
CONNECT_TIMEOUT_S = 2.0
# A command waits this long for its answer before the client counts the connection as dead
# (a paused or half-open Redis); the retry then reconnects.
SOCKET_TIMEOUT_S = 10.0


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
    host: str = "127.0.0.1"  # redis:// and rediss:// only
    port: int = 6379
    unix_path: str | None = None  # unix:// only

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
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 6379,
            unix_path=parts.path if scheme == "unix" else None,
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


def connect(
    url: str,
    *,
    patience_s: float,
    decode_responses: bool = False,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
) -> redis.Redis:
    """A client for ``url`` (any form above) that rides through outages up to ``patience_s``."""
    import redis  # here: a process that never calls connect() loads no redis-py (MiniRedis)

    from corral.services.queues.redis_retry import client_options

    target = parse_redis_url(url)
    options = client_options(patience_s, decode_responses, socket_timeout_s, CONNECT_TIMEOUT_S)
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


# --- the node agent's client: RESP over one socket, standard library only ---------------------
class RedisError(Exception):
    """:class:`MiniRedis`'s: a connection failure or an error reply."""


class _Reply(RedisError):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _encode(args: Sequence[Any]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class MiniRedis:
    """One connection, opened on first use and again after a failure."""

    def __init__(
        self,
        host: str,
        port: int,
        db: int = 0,
        password: str | None = None,
        username: str | None = None,
        timeout_s: float = 5.0,
        *,
        tls: bool = False,
        unix_path: str | None = None,
        sentinels: Sequence[tuple[str, int]] = (),
        master_name: str | None = None,
    ) -> None:
        self.host, self.port, self.db = host, port, db
        self.tls, self.unix_path = tls, unix_path
        self.sentinels, self.master_name = list(sentinels), master_name
        self.username, self.password = username, password
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(timeout_s, 2.0)
        self._sock: socket.socket | None = None
        self._buf = b""

    @classmethod
    def from_url(cls, url: str) -> MiniRedis:
        """A client for ``url`` (any form the module's docstring lists)."""
        t = parse_redis_url(url)
        if t.is_sentinel:
            return cls(
                "", 0, t.db, t.password, t.username,
                sentinels=t.sentinels, master_name=t.master_name,
            )  # fmt: skip
        return cls(
            t.host, t.port, t.db, t.password, t.username,
            tls=t.scheme == "rediss", unix_path=t.unix_path,
        )  # fmt: skip

    def _master_address(self) -> tuple[str, int]:
        """Where the sentinels say the master is (the first that answers)."""
        errors = []
        for host, port in self.sentinels:
            try:
                with socket.create_connection((host, port), self.connect_timeout_s) as sock:
                    sock.settimeout(self.connect_timeout_s)
                    sock.sendall(_encode(["SENTINEL", "get-master-addr-by-name", self.master_name]))
                    reply = _read_reply(sock)
            except OSError as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            if isinstance(reply, list) and len(reply) == 2:
                return str(reply[0]), int(reply[1])
            errors.append(f"{host}:{port}: no master named {self.master_name!r}")
        raise RedisError(f"no sentinel knows the master: {'; '.join(errors)}")

    # -- the wire ------------------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        if self._sock is None:
            if self.sentinels:
                self.host, self.port = self._master_address()
            where = self.unix_path or f"{self.host}:{self.port}"
            try:
                if self.unix_path:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.settimeout(self.timeout_s)
                    sock.connect(self.unix_path)
                else:
                    sock = socket.create_connection((self.host, self.port), self.connect_timeout_s)
                if self.tls:
                    import ssl  # here: only rediss:// needs it (the launcher forks lighter)

                    context = ssl.create_default_context()
                    sock = context.wrap_socket(sock, server_hostname=self.host)
            except OSError as exc:
                raise RedisError(f"cannot reach Redis at {where}: {exc}") from exc
            sock.settimeout(self.timeout_s)
            self._sock, self._buf = sock, b""
            if self.password:
                auth = [self.username, self.password] if self.username else [self.password]
                self._roundtrip([["AUTH", *auth]])
            if self.db:
                self._roundtrip([["SELECT", self.db]])
            if self.sentinels:
                [role] = self._roundtrip([["ROLE"]])
                if not isinstance(role, list) or not role or role[0] != "master":
                    self.close()
                    raise RedisError(f"{where} is no longer the master; asking the sentinels")
        return self._sock

    def _roundtrip(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        sock = self._connect()
        try:
            sock.sendall(b"".join(_encode(c) for c in commands))
            replies = [self._read() for _ in commands]
        except OSError as exc:
            self.close()
            raise RedisError(f"Redis connection lost: {exc}") from exc
        return replies

    def _line(self) -> bytes:
        while b"\r\n" not in self._buf:
            chunk = self._sock.recv(65536) if self._sock else b""
            if not chunk:
                raise OSError("connection closed")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            chunk = self._sock.recv(65536) if self._sock else b""
            if not chunk:
                raise OSError("connection closed")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n + 2 :]
        return data

    def _read(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return _Reply(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self._exact(size).decode()
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self._read() for _ in range(count)]
        raise OSError(f"unexpected reply {line[:20]!r}")

    def execute(self, *args: Any) -> Any:
        [reply] = self._roundtrip([args])
        if isinstance(reply, _Reply):
            raise reply
        return reply

    execute_command = execute  # redis-py's name, so the relay (state/relay.py) runs on both

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock, self._buf = None, b""

    # -- the commands the agent uses -------------------------------------------------------------
    def get(self, key: str) -> str | None:
        value: str | None = self.execute("GET", key)
        return value

    def set(self, key: str, value: Any, nx: bool = False, px: int | None = None) -> bool:
        args: list[Any] = ["SET", key, value]
        if px is not None:
            args += ["PX", px]
        if nx:
            args.append("NX")
        return self.execute(*args) is not None

    def hgetall(self, key: str) -> dict[str, str]:
        flat = self.execute("HGETALL", key) or []
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def hset(
        self,
        key: str,
        field: str | None = None,
        value: Any = None,
        mapping: dict[str, Any] | None = None,
    ) -> int:
        pairs: list[Any] = [] if field is None else [field, value]
        for k, v in (mapping or {}).items():
            pairs += [k, v]
        return int(self.execute("HSET", key, *pairs))

    def hsetnx(self, key: str, field: str, value: Any) -> int:
        return int(self.execute("HSETNX", key, field, value))

    def incr(self, key: str) -> int:
        return int(self.execute("INCR", key))

    def smembers(self, key: str) -> builtins.set[str]:
        return builtins.set(self.execute("SMEMBERS", key) or [])

    def srem(self, key: str, *members: str) -> int:
        return int(self.execute("SREM", key, *members))

    def pipeline(self, transaction: bool = True) -> _Pipeline:
        return _Pipeline(self, transaction)

    def register_script(self, lua: str) -> _Script:
        return _Script(self, lua)


class _Pipeline:
    """Commands sent together; with ``transaction`` inside MULTI/EXEC."""

    def __init__(self, client: MiniRedis, transaction: bool) -> None:
        self.client, self.transaction = client, transaction
        self.commands: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:
        def queue(*args: Any, **kwargs: Any) -> _Pipeline:
            self.commands.append(_command(name, args, kwargs))
            return self

        return queue

    def execute_command(self, *args: Any) -> _Pipeline:
        self.commands.append(list(args))
        return self

    def execute(self) -> list[Any]:
        commands = self.commands
        if self.transaction:
            replies = self.client._roundtrip([["MULTI"], *commands, ["EXEC"]])
            result = replies[-1]
            if isinstance(result, _Reply) or result is None:
                raise RedisError(f"transaction failed: {result}")
            replies = result
        else:
            replies = self.client._roundtrip(commands)
        for reply in replies:
            if isinstance(reply, _Reply):
                raise reply
        return [_shape(c[0], r) for c, r in zip(commands, replies, strict=True)]


def _read_reply(sock: socket.socket) -> Any:
    """One reply read off a fresh socket (a sentinel's answer)."""
    reader = MiniRedis("", 0)
    reader._sock = sock
    try:
        return reader._read()
    finally:
        reader._sock = None


def _command(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The wire form of a pipelined call, for the few shapes the agent uses."""
    upper = name.upper()
    if upper == "SET":
        out: list[Any] = ["SET", *args]
        if kwargs.get("px") is not None:
            out += ["PX", kwargs["px"]]
        if kwargs.get("nx"):
            out.append("NX")
        return out
    if upper == "HSET" and "mapping" in kwargs:
        pairs = [x for kv in kwargs["mapping"].items() for x in kv]
        return ["HSET", *args, *pairs]
    return [upper, *args]


def _shape(command: str, reply: Any) -> Any:
    if command == "HGETALL" and isinstance(reply, list):
        return dict(zip(reply[::2], reply[1::2], strict=True))
    return reply


class _Script:
    """A Lua script run by its SHA1 (loaded on the first NOSCRIPT), like redis-py's."""

    def __init__(self, client: MiniRedis, lua: str) -> None:
        self.client, self.lua = client, lua
        self.sha = hashlib.sha1(lua.encode()).hexdigest()

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        try:
            return self.client.execute("EVALSHA", self.sha, len(keys), *keys, *args)
        except _Reply as exc:
            if not exc.message.startswith("NOSCRIPT"):
                raise
            return self.client.execute("EVAL", self.lua, len(keys), *keys, *args)
