"""The API's HTTP server guards (issue #27, item 6), on a real uvicorn over a real socket with
a real Redis: a client that sends its headers or its body too slowly is cut off with 408; past
the concurrency limit a request is answered 503; a well-behaved client is served, kept-alive.

The finding: with uvicorn's defaults, 1,000 slow connections (one header line every 10 s) were
held for 90 s. uvicorn's own tests (``tests/protocols/test_http.py``) check the keep-alive
timeout and ``limit_concurrency``'s 503 the same way, with raw sockets; translated here."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from corral.services.api import create_app
from corral.services.api.server import MAX_HEADER_BYTES, GuardedHttpProtocol, server_config
from corral.services.settings import Settings

pytestmark = pytest.mark.integration

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_CONCURRENCY = 4


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    settings = Settings(
        redis_url=redis_url,
        api_token="server-test-token",
        home=tmp_path,
        prefix="srv",
        api_header_timeout_s=HEADER_TIMEOUT_S,
        api_body_timeout_s=BODY_TIMEOUT_S,
        api_max_concurrency=MAX_CONCURRENCY,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = server_config(create_app(settings), settings, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield sock.getsockname()
    server.should_exit = True
    thread.join(10)


def _connect(addr: Any) -> socket.socket:
    c = socket.create_connection(addr, timeout=10)
    return c


def _read_all(c: socket.socket, limit_s: float = 10) -> bytes:
    c.settimeout(limit_s)
    data = b""
    while True:
        try:
            chunk = c.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return data
        if not chunk:
            return data
        data += chunk


def _response(c: socket.socket) -> bytes:
    """One whole response: its head, then as many body bytes as its Content-Length says (the
    two may come in separate segments)."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = c.recv(65536)
        if not piece:
            return data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
         if line.lower().startswith(b"content-length:")),
        0,
    )  # fmt: skip
    while len(body) < length:
        piece = c.recv(65536)
        if not piece:
            break
        body += piece
    return head + b"\r\n\r\n" + body


def test_a_well_behaved_client_is_served_and_kept_alive(api: Any) -> None:
    c = _connect(api)
    for _ in range(2):
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = _response(c)
        assert head.startswith(b"HTTP/1.1 "), head
        assert b" 408 " not in head and b" 503 " not in head, head
    c.close()


def test_headers_that_trickle_are_cut_off_with_408(api: Any) -> None:
    c = _connect(api)
    c.sendall(b"GET /healthz HTTP/1.1\r\n")
    started = time.monotonic()
    closed_after = None
    for i in range(40):  # one header line every 0.25 s: 10 s if the server let it
        try:
            c.sendall(f"X-Slow-{i}: 1\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            closed_after = time.monotonic() - started
            break
        time.sleep(0.25)
        c.setblocking(False)
        try:
            got = c.recv(65536)
        except BlockingIOError:
            got = None
        finally:
            c.setblocking(True)
        if got is not None:
            assert got == b"" or b" 408 " in got.split(b"\r\n", 1)[0], got
            closed_after = time.monotonic() - started
            break
    assert closed_after is not None, "a trickling client kept its connection for 10 s"
    assert closed_after < HEADER_TIMEOUT_S + 3


def test_a_connection_that_sends_nothing_is_closed(api: Any) -> None:
    c = _connect(api)
    started = time.monotonic()
    data = _read_all(c)
    assert time.monotonic() - started < HEADER_TIMEOUT_S + 3
    assert data == b"" or b" 408 " in data


def test_a_body_that_trickles_is_cut_off(api: Any) -> None:
    c = _connect(api)
    c.sendall(
        b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer server-test-token\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    started = time.monotonic()
    cut = False
    for _ in range(40):
        time.sleep(0.25)
        try:
            c.sendall(b" ")
        except (BrokenPipeError, ConnectionResetError):
            cut = True
            break
        c.setblocking(False)
        try:
            got = c.recv(65536)
        except BlockingIOError:
            got = None
        finally:
            c.setblocking(True)
        if got is not None:
            cut = True
            assert not got.startswith(b"HTTP/1.1 2"), got
            break
    assert cut, "a trickling body kept its connection for 10 s"
    assert time.monotonic() - started < BODY_TIMEOUT_S + 3


def test_headers_larger_than_the_limit_get_400_and_the_connection_closed(api: Any) -> None:
    # As uvicorn's h11 protocol did with h11_max_incomplete_event_size: a header section
    # past the limit is refused before it is all in (the parser keeps what it has of one).
    c = _connect(api)
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    line = b"X-Big: " + b"a" * 1000 + b"\r\n"
    try:
        for _ in range(MAX_HEADER_BYTES // len(line) + 2):
            c.sendall(line)
            time.sleep(0.002)
    except (BrokenPipeError, ConnectionResetError):
        pass
    got = _read_all(c)
    assert got == b"" or got.startswith(b"HTTP/1.1 400 "), got
    # Headers just under the limit, and a body larger than it, are served.
    c = _connect(api)
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8000 + b"\r\n\r\n")
    head = _response(c)
    assert head.startswith(b"HTTP/1.1 200 "), head
    body = b'{"task": {"run": "' + b"x" * (4 * MAX_HEADER_BYTES) + b'"}}'
    c.sendall(
        b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer server-test-token\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    head = _response(c)
    assert not head.startswith(b"HTTP/1.1 400 "), head
    c.close()


def test_past_the_concurrency_limit_a_request_gets_503(api: Any) -> None:
    held = [_connect(api) for _ in range(MAX_CONCURRENCY + 1)]
    for c in held:
        c.sendall(b"GET /healthz HTTP/1.1\r\n")  # headers begun, not finished
    time.sleep(0.2)
    c = _connect(api)
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    status = c.recv(65536).split(b"\r\n", 1)[0]
    assert b" 503 " in status, status
    for h in held:
        h.close()


def test_corral_run_api_serves_with_these_guards(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process `corral run api` starts takes its uvicorn config from server_config, so the
    # guards tested above are the ones it runs with.
    from typer.testing import CliRunner

    from corral.services.cli.main import app
    from corral.services.settings import reset_settings

    seen: dict[str, Any] = {}

    def run(self: uvicorn.Server, sockets: Any = None) -> None:
        seen["config"] = self.config
        for s in sockets or ():
            s.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    for name, value in {
        "CORRAL_REDIS_URL": redis_url,
        "CORRAL_HOME": str(tmp_path),
        "CORRAL_API_TOKEN": "t",
        "CORRAL_API_HEADER_TIMEOUT_S": "3.5",
        "CORRAL_API_MAX_CONCURRENCY": "17",
    }.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    try:
        done = CliRunner().invoke(app, ["run", "api", "--port", "0"])
    finally:
        reset_settings()
    assert done.exit_code == 0, done.output
    config = seen["config"]
    assert issubclass(config.http, GuardedHttpProtocol)
    assert config.http.header_timeout_s == 3.5
    assert config.limit_concurrency == 17
