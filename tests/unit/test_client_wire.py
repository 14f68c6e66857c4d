"""The client's HTTP (``corral.services.client.wire``) against a real server on a loopback port:
what it sends (path under the base URL's prefix, the query as httpx wrote it, headers, JSON),
keep-alive and a connection the server closed, a proxy named by the environment, and the
failures' messages (httpx's, which the CLI prints)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from corral.services.client.wire import BadAddress, Http, Unreachable


class Server:
    """Records each request (target, headers, body, connection) and answers with JSON."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self.close_after = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.seen.append(
                    {
                        "method": self.command,
                        "target": self.path,
                        "headers": dict(self.headers),
                        "body": body,
                        "peer": self.client_address,
                    }
                )
                time.sleep(server.delay_s)
                status = 404 if self.path.endswith("/missing") else 200
                data = json.dumps({"ok": status == 200, "target": self.path}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if server.close_after:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_HEAD = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_the_request_as_httpx_sent_it(server: Server) -> None:
    http = Http(server.url + "/prefix", {"Authorization": "Bearer tok"}, 5.0)
    params = {"limit": 100, "state": "RUNNING", "eof": True, "off": False, "none": None}
    got = http.request("GET", "/v1/requests", params=params)
    assert (got.status_code, got.is_error, got.reason_phrase) == (200, False, "OK")
    assert got.json()["target"] == (
        "/prefix/v1/requests?limit=100&state=RUNNING&eof=true&off=false&none="
    )
    http.request("POST", "/v1/x", json={"command": "é", "node": 0}, headers={"X-Y": "1"})
    http.request("PUT", "/v1/b", content=b"\x1f\x8b", headers={"Content-Type": "a/b"})
    get, post, put = server.seen
    assert get["headers"]["Authorization"] == "Bearer tok"
    assert post["body"] == '{"command":"é","node":0}'.encode()
    assert post["headers"]["Content-Type"] == "application/json"
    assert post["headers"]["X-Y"] == "1"
    assert put["body"] == b"\x1f\x8b" and put["headers"]["Content-Type"] == "a/b"
    assert http.request("GET", "/missing").is_error  # 404 is an error
    http.close()


def test_one_connection_is_kept_and_replaced_when_the_server_closes_it(server: Server) -> None:
    http = Http(server.url, {}, 5.0)
    for _ in range(3):
        http.request("GET", "/a")
    assert len({s["peer"] for s in server.seen}) == 1  # kept alive
    server.close_after = True  # the server ends the connection after this answer
    http.request("GET", "/b")
    server.close_after = False
    http.request("GET", "/c")
    assert len({s["peer"] for s in server.seen}) == 2
    http.close()


def test_a_connection_closed_while_idle_is_opened_again() -> None:
    """A server that closes a kept connection between requests (its keep-alive ran out)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(answer)
            conn.close()  # without saying Connection: close

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    http = Http(f"http://127.0.0.1:{port}", {}, 5.0)
    assert http.request("GET", "/one").json() == {}
    time.sleep(0.2)  # the close has arrived
    assert http.request("GET", "/two").json() == {}
    thread.join(5)
    listener.close()
    http.close()


def test_the_failures_keep_httpx_messages(server: Server) -> None:
    refused = socket.create_server(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    refused.close()
    with pytest.raises(Unreachable, match=r"^\[Errno 111\] Connection refused$"):
        Http(f"http://127.0.0.1:{port}", {}, 5.0).request("GET", "/")
    server.delay_s = 1.0
    with pytest.raises(Unreachable, match=r"^timed out$"):
        Http(server.url, {}, 0.2).request("GET", "/slow")
    unsupported = re.escape("Request URL has an unsupported protocol 'ftp://'.")
    with pytest.raises(BadAddress, match=f"^{unsupported}$"):
        Http("ftp://x", {}, 1.0).request("GET", "/")
    with pytest.raises(BadAddress, match="is missing an 'http://' or 'https://' protocol"):
        Http("127.0.0.1:8000", {}, 1.0).request("GET", "/")
    with pytest.raises(BadAddress, match=r"^Invalid port: 'notaport'$"):
        Http("http://host:notaport", {}, 1.0)
    with pytest.raises(BadAddress, match="IPv6"):
        Http("http://[::1", {}, 1.0)


def test_a_proxy_from_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy (here the same server) is sent the whole URL, with its credentials."""
    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{server.port}")
    http = Http("http://api.example:8000/base", {}, 5.0)
    http.request("GET", "/v1/x", params={"a": 1})
    [seen] = server.seen
    assert seen["target"] == "http://api.example:8000/base/v1/x?a=1"
    assert seen["headers"]["Proxy-Authorization"] == "Basic dXNlcjpwQHNz"  # user:p@ss
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    Http(server.url, {}, 5.0).request("GET", "/direct")
    assert server.seen[-1]["target"] == "/direct"


def test_threads_share_it_each_on_its_own_connection(server: Server) -> None:
    """`corral attach` writes from one thread while another waits for output."""
    http = Http(server.url, {}, 5.0)
    server.delay_s = 0.3
    got: list[Any] = []
    threads = [
        threading.Thread(target=lambda i=i: got.append(http.request("GET", f"/t{i}").json()))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(g["target"] for g in got) == ["/t0", "/t1", "/t2", "/t3"]
    assert len({s["peer"] for s in server.seen}) == 4  # none waited for another's answer
    server.delay_s = 0.0
    http.request("GET", "/after")  # a kept one is reused
    assert len({s["peer"] for s in server.seen}) == 4
    http.close()
