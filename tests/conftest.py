"""Fixtures shared by every test: a real redis-server on a free port, example paths."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# Test helper modules (tests/harness.py) import by name.
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
FIXTURES = REPO / "tests" / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server process of the test's own, on a free loopback port."""

    def __init__(self, data_dir: Path) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed; run `make setup` (ops/setup.sh)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(data_dir),
                # As Corral starts its own (services/cli/supervisor.py): a limit, no eviction.
                "--maxmemory",
                str(1024**3),
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail("redis-server did not start within 10 s")

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as c:
            c.sendall(b"FLUSHALL\r\n")
            c.recv(16)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's alone, for a test that stops it (the session's serves
    every other test)."""
    data = tmp_path / "own-redis"
    data.mkdir()
    server = RedisServer(data)
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A clean database on the session's redis-server."""
    redis_server.flush()
    return redis_server.url


def _systems(home: Path, redis_url: str) -> tuple[Callable[..., Any], list[Any]]:
    """A function that builds Corral installations under ``home`` on ``redis_url``, and the
    list of those it built."""
    from harness import LOCAL_ONLY, System

    systems: list[System] = []

    def make(
        local_cloud: Path | None = None, env: dict[str, str] | None = None, **timers: str
    ) -> System:
        cloud = local_cloud or FIXTURES / "localcloud" / "runtime.yaml"
        env = {**LOCAL_ONLY, **(env or {})}  # the local cloud unless the test names its clouds
        system = System(home / f"home{len(systems)}", redis_url, cloud, env, **timers)
        systems.append(system)
        return system

    return make, systems


def _stop_all(systems: list[Any]) -> None:
    from harness import kill_agents

    for system in systems:
        system.stop(grace_s=0)
        kill_agents(system)


@pytest.fixture
def make_system(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., Any]]:
    """Build real Corral installations (API, workers, beat as processes) on the test's Redis;
    everything they started, local instances included, is stopped afterwards."""
    make, systems = _systems(tmp_path, redis_url)
    yield make
    _stop_all(systems)


@pytest.fixture(scope="module")
def make_module_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """``make_system`` for an installation that a whole test module shares: started once, not
    once per test (each start is about 7 s of CPU for the API, the workers and beat). For the
    tests of a module that each use requests, names and pools of their own, and neither stop
    nor restart a component (those start their own with ``make_system``). It runs on a
    redis-server of the module's own: other tests flush the session's."""
    server = RedisServer(tmp_path_factory.mktemp("module-redis"))
    make, systems = _systems(tmp_path_factory.mktemp("module-homes"), server.url)
    try:
        yield make
    finally:
        _stop_all(systems)
        server.stop()
