"""Failover chains on the local cloud, through real workers: sold-out zones, quota, pins,
the shared memory of sold-out zones, and throttling retried in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness import REPO, System

pytestmark = pytest.mark.integration

CLOUD = REPO / "tests" / "fixtures" / "localcloud" / "failover.yaml"


def _system(make_system: Callable[..., System]) -> System:
    system = make_system(CLOUD, BLOCKED_TTL_S="120")
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


def _trail(req: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["zone"], a["outcome"]) for a in req["attempts"]]


def gpu(accelerators: str, **resources: Any) -> dict[str, Any]:
    return {"name": "train", "resources": {"cloud": "local", "accelerators": accelerators,
                                           **resources}}


def test_sold_out_region_then_memory_of_it(make_system: Callable[..., System]) -> None:
    system = _system(make_system)
    first = system.wait_state(system.submit(gpu("A100:8")), {"RUNNING", "FAILED"})
    assert first["state"] == "RUNNING"
    assert _trail(first) == [("east-a", "capacity"), ("east-b", "capacity"), ("west-a", "ok")]
    assert first["instances"][0]["zone"] == "west-a"

    # Within the TTL a second request never tries the sold-out zones: it lists them as blocked.
    second = system.wait_state(system.submit(gpu("A100:8")), {"RUNNING", "FAILED"})
    assert second["state"] == "RUNNING"
    assert _trail(second) == [("east-a", "blocked"), ("east-b", "blocked"), ("west-a", "ok")]
    assert "remembered as capacity" in second["attempts"][0]["error"]


def test_quota_skips_the_rest_of_the_region(make_system: Callable[..., System]) -> None:
    system = _system(make_system)
    req = system.wait_state(system.submit(gpu("V100:4")), {"RUNNING", "FAILED"})
    assert req["state"] == "RUNNING"
    assert _trail(req) == [("east-a", "quota"), ("east-b", "blocked"), ("west-a", "ok")]


def test_pinned_region_never_leaves_it(make_system: Callable[..., System]) -> None:
    system = _system(make_system)
    req = system.wait_state(system.submit(gpu("A100:8", region="east")), {"RUNNING", "FAILED"})
    assert req["state"] == "FAILED"
    assert {a["zone"] for a in req["attempts"]} == {"east-a", "east-b"}
    assert all(a["region"] == "east" for a in req["attempts"])
    # The CLI shows the account as a table when it failed.
    shown = system.cli("status", req["id"])
    assert "east-a" in shown.stdout and "capacity" in shown.stdout


def test_throttling_is_retried_in_the_same_zone(make_system: Callable[..., System]) -> None:
    system = _system(make_system)
    task = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    req = system.wait_state(system.submit(task), {"RUNNING", "FAILED"})
    assert req["state"] == "RUNNING"
    assert _trail(req) == [("east-a", "throttled"), ("east-a", "throttled"), ("east-a", "ok")]
