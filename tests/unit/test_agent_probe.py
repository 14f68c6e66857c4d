"""The node agent's readiness probe against a real HTTP server on this machine: no verdict
within the initial delay, not ready after it, ready on a 200, not ready again when the service
stops answering; post_data goes as a JSON POST."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from corral.services.agent.probe import PROBE_ENV, ReadinessWatch


class _Service:
    def __init__(self) -> None:
        self.status = 503
        self.posted: list[Any] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                outer.posted.append(json.loads(self.rfile.read(size)))
                self._answer()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def service() -> Iterator[_Service]:
    svc = _Service()
    yield svc
    svc.server.shutdown()


def _wait(check: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_the_probe_is_no_verdict_then_not_ready_then_ready_and_back(service: _Service) -> None:
    probe = {"url": f"http://127.0.0.1:{service.port}/health", "initial_delay_s": 0.5}
    watch = ReadinessWatch.from_envs({PROBE_ENV: json.dumps(probe)})
    assert watch is not None
    watch.every_s = 0.1
    watch.start()
    try:
        time.sleep(0.2)
        assert watch.ready is None  # failures within the initial delay are no verdict
        _wait(lambda: watch.ready is False)
        service.status = 200
        _wait(lambda: watch.ready is True)
        service.status = 500
        _wait(lambda: watch.ready is False)
    finally:
        watch.stop()


def test_post_data_is_posted_as_json(service: _Service) -> None:
    service.status = 200
    probe = {"url": f"http://127.0.0.1:{service.port}/v1/models", "post_data": {"m": "x"}}
    watch = ReadinessWatch(probe)
    assert watch.once() is True
    assert service.posted == [{"m": "x"}]


def test_no_probe_and_an_unreachable_one() -> None:
    assert ReadinessWatch.from_envs({}) is None
    assert ReadinessWatch.from_envs({PROBE_ENV: "not json"}) is None
    watch = ReadinessWatch({"url": "http://127.0.0.1:9/", "timeout_s": 0.5})
    assert watch.once() is False
