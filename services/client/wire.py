"""The client's HTTP: the standard library's ``http.client``, connections kept alive.

Why not httpx: importing it loads httpcore, h11, and with them trio and anyio (whichever are
installed: selenium brings trio), about half of what `corral status` cost before it sent a
byte. The client sends small JSON requests and reads whole answers; this is all it needs.
What httpx did is kept: the base URL's path prefixed to every path, the query built as httpx
builds it (``true``/``false`` for booleans), one timeout for connecting and for each read and
write, keep-alive (a connection the server closed while idle is opened again), no redirects
followed, TLS verified against certifi's roots (or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, read
by OpenSSL), and an ``http://`` proxy from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, ``NO_PROXY``, read by ``urllib.request``). Failures keep httpx's messages:
``[Errno 111] Connection refused``, ``timed out``, ``Request URL has an unsupported
protocol 'ftp://'.``
"""

from __future__ import annotations

import base64
import http.client
import json as jsonlib
import select
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

SCHEMES = ("http", "https")
USER_AGENT = "corral-client"


class BadAddress(ValueError):
    """The API's address cannot be used (no http(s) scheme, a port that is no number)."""


class Unreachable(ConnectionError):
    """Nothing answered, or the answer broke off: the message is the system's (or httpx's)."""


@dataclass(frozen=True)
class Response:
    """One answer, read whole."""

    status_code: int
    reason_phrase: str
    headers: http.client.HTTPMessage
    content: bytes

    @property
    def is_error(self) -> bool:
        return self.status_code >= 400

    @property
    def text(self) -> str:
        """The body as text: its charset, else UTF-8 (a byte that is not becomes U+FFFD)."""
        charset = self.headers.get_content_charset() or "utf-8"
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


def query_value(value: Any) -> str:
    """A query parameter as httpx writes it: JSON's ``true``/``false``, ``""`` for None."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)


@dataclass(frozen=True)
class _Answer:
    status: int
    reason: str
    headers: http.client.HTTPMessage
    content: bytes
    will_close: bool


@dataclass(frozen=True)
class _Route:
    """Where a request goes: the host to connect to, and through which proxy if any."""

    host: str
    port: int
    proxy: tuple[str, int, dict[str, str]] | None  # host, port, Proxy-Authorization header


class Http:
    """Requests to one API (``base_url``), each with ``headers``. Threads may share it (``corral
    attach`` reads and writes at once): each request takes a kept connection no other request
    is using, or opens one, and keeps it for the next when the answer allows."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        try:
            parts = urlsplit(base_url)
        except ValueError as exc:  # an unclosed [ of an IPv6 address
            raise BadAddress(str(exc)) from None
        self.scheme = parts.scheme
        self.prefix = parts.path.rstrip("/")
        self.headers = {"User-Agent": USER_AGENT, "Accept": "*/*", **headers}
        self.timeout_s = timeout_s
        try:
            port = parts.port
        except ValueError:
            raise BadAddress(f"Invalid port: {parts.netloc.rpartition(':')[2]!r}") from None
        self.host = parts.hostname or ""
        self.port = port or (443 if self.scheme == "https" else 80)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._route: _Route | None = None

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | str | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request and read its whole answer. Raises BadAddress, or Unreachable for
        anything that kept an answer from arriving."""
        if self.scheme not in SCHEMES:
            if not self.scheme:
                raise BadAddress("Request URL is missing an 'http://' or 'https://' protocol.")
            raise BadAddress(f"Request URL has an unsupported protocol '{self.scheme}://'.")
        sent = dict(self.headers)
        if json is not None:
            content = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"))
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        body = content.encode("utf-8") if isinstance(content, str) else content
        target = self.prefix + path
        if params:
            target += "?" + urlencode([(k, query_value(v)) for k, v in params.items()])
        conn = None
        try:
            conn = self._connection()
            answer = self._exchange(conn, method, target, body, sent)
        except (OSError, http.client.HTTPException) as exc:
            if conn is not None:
                conn.close()  # whatever was half sent or read, the next request starts afresh
            raise Unreachable(_reason(exc)) from None
        if answer.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        return Response(answer.status, answer.reason, answer.headers, answer.content)

    def close(self) -> None:
        """Close the kept connections (a later request opens a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> _Answer:
        route = self._route
        assert route is not None
        if route.proxy is not None and self.scheme == "http":
            netloc = f"[{self.host}]" if ":" in self.host else self.host
            target = f"http://{netloc}:{self.port}{target}"  # a proxy is sent the whole URL
            headers = {**headers, **route.proxy[2]}
        conn.request(method, target, body=body, headers=headers)
        answer = conn.getresponse()
        content = answer.read()
        return _Answer(answer.status, answer.reason, answer.headers, content, answer.will_close)

    def _connection(self) -> http.client.HTTPConnection:
        """A kept connection the server has not closed, else a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if not _closed_by_peer(conn):
                return conn
            conn.close()
        if not self.host:  # http:// alone: what the resolver says of an empty name
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if self._route is None:
            self._route = self._find_route()
        route = self._route
        host, port = (route.proxy[0], route.proxy[1]) if route.proxy else (route.host, route.port)
        if self.scheme == "https":
            tls = http.client.HTTPSConnection(
                host, port, timeout=self.timeout_s, context=_tls_context()
            )
            if route.proxy is not None:
                tls.set_tunnel(route.host, route.port, headers=route.proxy[2])
            return tls
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s)

    def _find_route(self) -> _Route:
        """The proxy the environment names for this API, as httpx found it (``NO_PROXY``
        matched as ``urllib.request`` matches it)."""
        import urllib.request

        proxies = urllib.request.getproxies()
        proxy_url = proxies.get(self.scheme) or proxies.get("all")
        if not proxy_url or urllib.request.proxy_bypass(self.host):
            return _Route(self.host, self.port, None)
        if "://" not in proxy_url:
            proxy_url = f"http://{proxy_url}"
        proxy = urlsplit(proxy_url)
        if proxy.scheme != "http":
            raise BadAddress(f"unsupported proxy {proxy.scheme}:// (only http:// proxies)")
        auth: dict[str, str] = {}
        if proxy.username is not None:
            pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
            auth["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        return _Route(self.host, self.port, (proxy.hostname or "", proxy.port or 80, auth))


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """Whether a kept connection became readable while idle: the server closed it (its
    keep-alive ran out), or sent what no request asked for. Either way it cannot be reused."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


_TLS: list[Any] = []  # the one TLS context of this process, made at its first https request


def _tls_context() -> Any:
    """Certificates checked against certifi's roots, as httpx checks them, unless
    ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` names others: OpenSSL resolves those variables
    (``ssl.get_default_verify_paths``), so a file or folder other than its built-in one was
    named there."""
    if not _TLS:
        import ssl

        paths = ssl.get_default_verify_paths()
        if paths.cafile not in (None, paths.openssl_cafile):
            context = ssl.create_default_context(cafile=paths.cafile)
        elif paths.capath not in (None, paths.openssl_capath):
            context = ssl.create_default_context(capath=paths.capath)
        else:
            import certifi

            context = ssl.create_default_context(cafile=certifi.where())
        _TLS.append(context)
    return _TLS[0]


def _reason(exc: BaseException) -> str:
    """Why nothing answered, in httpx's words where they differ from the system's."""
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "Server disconnected without sending a response."
    return str(exc) or type(exc).__name__
