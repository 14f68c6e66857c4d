"""The runtime's steps without Celery: a real Deps on the test's redis-server, the fake
provider as the local cloud, and a :class:`~runtime_driver.Driver` in place of the queues."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime_driver import Driver

from corral.services.observability.events import EventMetrics
from corral.services.queues import dispatch
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings

from fakes.provider import FakeProvider

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
EPOCH = 1_800_000_000.0  # the runtime's clock: the fake's clock plus this


@pytest.fixture
def fake() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def make_deps(redis_url: str, tmp_path: Path, fake: FakeProvider) -> Callable[..., Deps]:
    def make(local_cloud: str = "runtime.yaml", **timers: float) -> Deps:
        settings = Settings(
            redis_url=redis_url,
            prefix=f"t{uuid.uuid4().hex[:8]}",
            home=tmp_path / "home",
            clouds=["local"],
            local_cloud_file=FIXTURES / "localcloud" / local_cloud,
            timers={"attempt_deadline_s": 30.0, **timers},
        )
        deps = Deps(settings, clock=lambda: EPOCH + fake.now, store_listeners=(EventMetrics(),))
        deps._providers["local"] = fake  # type: ignore[assignment]
        fake.local_cloud = deps.local_cloud
        return deps

    return make


@pytest.fixture
def driver(
    make_deps: Callable[..., Deps], fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Driver]:
    drv = Driver(make_deps(), fake)
    monkeypatch.setattr(dispatch, "send", drv.send)
    yield drv
