"""Fixtures for the integration tests (the machinery is in tests/harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import REPO, System, kill_agents


@pytest.fixture
def make_system(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., System]]:
    systems: list[System] = []

    def make(local_cloud: Path | None = None, **timers: str) -> System:
        cloud = local_cloud or REPO / "tests" / "fixtures" / "localcloud" / "runtime.yaml"
        system = System(tmp_path / f"home{len(systems)}", redis_url, cloud, **timers)
        systems.append(system)
        return system

    yield make
    for system in systems:
        system.stop()
        kill_agents(system)


