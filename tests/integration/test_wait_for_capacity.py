"""Requests wait for capacity (retry until up), through real workers, beat and the local
cloud: a request whose only zone is full waits (WAITING, `corral why` says why and when it
retries) and runs once the zone's machine is let go; `--fail-fast` fails at once; a passed
`--max-wait` fails it naming the deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral.services.state.blocks import BlockStore

from harness import REPO, System

pytestmark = pytest.mark.integration

CLOUD = REPO / "tests" / "fixtures" / "localcloud" / "waiting.yaml"
# Short waits: a sold-out zone is remembered 4 s, a retry comes 1 s after the last (2 s cap).
TIMERS = {
    "BLOCKED_TTL_S": "4",
    "WAIT_RETRY_INITIAL_S": "1",
    "WAIT_RETRY_CAP_S": "2",
}
SERVICE = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}


@pytest.fixture(scope="module")
def shared(make_module_system: Callable[..., System]) -> System:
    system = make_module_system(CLOUD, **TIMERS)
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


@pytest.fixture
def system(shared: System) -> Iterator[System]:
    """The module's installation as a fresh one: what a test leaves is taken down, its zone's
    machine freed, and no sold-out zone is remembered when the next test starts."""
    yield shared
    shared.take_all_down()
    client = redis.Redis.from_url(shared.env["CORRAL_REDIS_URL"])
    BlockStore(client).clear()
    client.close()


def _fill_the_zone(system: System) -> str:
    """A service on the zone's one machine: it runs until cancelled."""
    blocker = system.wait_state(system.submit(SERVICE), {"RUNNING", "FAILED"}, 60)
    assert blocker["state"] == "RUNNING", blocker
    return str(blocker["id"])


def _task_file(tmp_path: Path) -> Path:
    path = tmp_path / "svc.yaml"
    path.write_text("name: svc\nresources: {cloud: local, instance_type: cpu-2}\n")
    return path


def _why(system: System, rid: str) -> dict[str, Any]:
    with system.client() as c:
        resp = c.get(f"/v1/requests/{rid}/why")
    assert resp.status_code == 200, resp.text
    found: dict[str, Any] = resp.json()
    return found


def test_a_request_waits_for_capacity_then_runs(system: System) -> None:
    blocker = _fill_the_zone(system)
    rid = system.submit(SERVICE)
    waiting = system.wait_state(rid, {"WAITING", "RUNNING", "FAILED"}, 60)
    assert waiting["state"] == "WAITING", waiting
    assert waiting["attempts"][0]["outcome"] == "capacity"
    assert waiting["waiting"]["deadline"] is None  # no max_wait: it waits until up

    # It walks its chain again every second or so: read it while it waits between walks.
    why = _why(system, rid)
    for _ in range(20):
        if why["state"] == "WAITING":
            break
        why = _why(system, rid)
    assert why["code"] == "waiting", why
    assert "exhausted" in why["reason"] and "waiting for capacity" in why["reason"]
    assert why["retry_at"] is not None and why["deadline"] is None
    assert why["tried"][0]["outcome"] == "capacity"
    assert any(b["scope"].startswith("local solo-a") and b["until"] for b in why["blocked"])
    for _ in range(20):
        shown = system.cli("why", rid)
        assert shown.returncode == 0, shown.stderr
        if " WAITING: " in shown.stdout:
            break
    assert " WAITING: " in shown.stdout and "next retry:" in shown.stdout, shown.stdout
    assert "tried 1: local/solo-a cpu-2 on_demand: capacity" in shown.stdout
    assert "deadline: none" in shown.stdout

    # Still waiting a few retries later (the zone is full), then the blocker goes.
    with system.client() as c:
        assert c.post(f"/v1/requests/{blocker}/cancel").status_code == 200
    done = system.wait_state(rid, {"RUNNING", "FAILED"}, 60)
    assert done["state"] == "RUNNING", done
    assert done["attempts"][-1]["outcome"] == "ok"
    assert done["waiting"]["retries"] >= 1
    assert done["instances"][0]["zone"] == "solo-a"


def test_fail_fast_fails_at_once(system: System, tmp_path: Path) -> None:
    _fill_the_zone(system)
    launched = system.cli("launch", "--fail-fast", "--detach", str(_task_file(tmp_path)))
    assert launched.returncode == 0, launched.stderr
    rid = launched.stdout.strip().splitlines()[-1]
    done = system.wait_state(rid, {"WAITING", "FAILED", "RUNNING"}, 60)
    assert done["state"] == "FAILED", done
    assert "all 1 candidates failed or are blocked" in done["error"]
    assert "fail fast" in done["error"]
    assert done.get("waiting") is None  # it never waited


def test_a_passed_max_wait_fails_the_request_naming_the_deadline(
    system: System, tmp_path: Path
) -> None:
    _fill_the_zone(system)
    launched = system.cli("launch", "--max-wait", "6s", "--detach", str(_task_file(tmp_path)))
    assert launched.returncode == 0, launched.stderr
    rid = launched.stdout.strip().splitlines()[-1]
    waiting = system.wait_state(rid, {"WAITING", "FAILED", "RUNNING"}, 60)
    assert waiting["state"] == "WAITING", waiting
    deadline = waiting["waiting"]["deadline"]
    assert deadline is not None
    assert _why(system, rid)["deadline"] == deadline
    done = system.wait_state(rid, {"FAILED", "RUNNING"}, 60)
    assert done["state"] == "FAILED", done
    assert "max_wait 6s passed" in done["error"]
    assert done["waiting"]["deadline"] == deadline


def test_a_bad_max_wait_is_refused_with_exit_2(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    system = make_system(CLOUD)
    bad = system.cli("launch", "--max-wait", "soon", "--detach", str(_task_file(tmp_path)))
    assert bad.returncode == 2
    assert "--max-wait" in bad.stderr and "expected a duration" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_machine_of_ours_that_ends_wakes_the_request_waiting_for_its_place(
    make_system: Callable[..., System],
) -> None:
    """Capacity freed by us is not waited out: with a sold-out zone remembered for 2 minutes
    and the first retry a minute away, the waiting request walks its chain as soon as the
    machine holding its zone is let go (``failover.capacity_freed``), and runs."""
    system = make_system(
        CLOUD, BLOCKED_TTL_S="120", WAIT_RETRY_INITIAL_S="60", WAIT_RETRY_CAP_S="120"
    )
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    blocker = _fill_the_zone(system)
    rid = system.submit(SERVICE)
    waiting = system.wait_state(rid, {"WAITING", "RUNNING", "FAILED"}, 60)
    assert waiting["state"] == "WAITING", waiting
    assert waiting["waiting"]["retry_at"] - time.time() > 40  # not walking again for a while
    with system.client() as c:
        assert c.post(f"/v1/requests/{blocker}/cancel").status_code == 200
    done = system.wait_state(rid, {"RUNNING", "FAILED"}, 30)
    assert done["state"] == "RUNNING", done
    assert done["waiting"]["retries"] == 1
    with system.client() as c:
        events = c.get(f"/v1/requests/{rid}/events").json()["events"]
    lines = [str(e) for e in events]
    assert any("retry 1: capacity freed in its chain" in line for line in lines), lines
