"""Asynchronous provisioning: a launch returns once the cloud took it, a boot watch finishes it,
and no worker waits for a machine to boot (so boot time, not worker slots, sets the pace)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from harness import REPO, System, Up, agent_pids, one_zone_cloud, wait_for

pytestmark = pytest.mark.integration

CLOUDS = REPO / "tests" / "fixtures" / "localcloud"
SERVICE = {"resources": {"cloud": "local", "instance_type": "cpu-2"}}


# The boot of the forty-launch test and of the killed-worker one (it was 8 s; each test waits
# out one boot). 4 s is still twenty times the control plane's own time per launch (40
# launches on `corral up` take about 8 s beyond the boot on a loaded two-core machine, 0.2 s
# each): forty boots one after another would take 160 s against the bound of 24 s, and boots
# that held the provisioning worker's two slots 80 s.
BOOT_S = 4.0


def _local_instances(url: str) -> dict[str, dict[str, str]]:
    """Every instance the local cloud ever started, as its records say."""
    client = redis.Redis.from_url(url, decode_responses=True)
    ids = client.smembers("corral:local:instances")
    return {i: client.hgetall(f"corral:local:instance:{i}") for i in ids}


def _one_live_instance_each(rows: list[dict[str, Any]], local: dict[str, dict[str, str]]) -> None:
    """Each request RUNNING on exactly one instance, none shared, and nothing else started."""
    live = []
    for req in rows:
        assert req["state"] == "RUNNING", req
        running = [i for i in req["instances"] if i["state"] == "RUNNING"]
        assert len(running) == 1, req["instances"]
        live.append(running[0]["provider_id"])
    assert len(set(live)) == len(live), "two requests share an instance"
    leaked = {i for i, rec in local.items() if i not in live and rec.get("state") != "terminated"}
    assert not leaked, f"instances started and not accounted for: {leaked}"


def test_forty_launches_with_a_4s_boot_run_within_three_boots(tmp_path: Path) -> None:
    """`corral up` as shipped (default timers and worker concurrency): 40 services submitted
    together on a cloud whose machines take 4 s to boot are all RUNNING well before they could
    be one after another (the speed target itself is the boots benchmark's)."""
    up = Up(tmp_path / "home", one_zone_cloud(tmp_path / "boot.yaml", 64, BOOT_S), timers={})
    # One client for every call: a client per call cost this process about 20 ms of CPU, 40
    # calls per look and ten looks a second, CPU the booting machines were short of.
    api = httpx.Client()
    try:
        url = up.wait_line(r"\[up\] api\s+(http://127\.0\.0\.1:\d+)").group(1)
        up.wait_line(r"API token in")
        token = (tmp_path / "home" / "api-token").read_text().strip()
        api.base_url = httpx.URL(url)
        api.headers["Authorization"] = f"Bearer {token}"

        def submit(i: int) -> str:
            task = {**SERVICE, "name": f"svc-{i}"}
            # a fresh install's first submits compile and load modules
            resp = api.post("/v1/requests", json={"task": task}, timeout=60)
            assert resp.status_code == 201, resp.text
            return str(resp.json()["id"])

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(submit, range(40)))
        rows: list[dict[str, Any]] = []

        def all_running() -> bool:
            rows[:] = [api.get(f"/v1/requests/{rid}").json() for rid in ids]
            return all(r["state"] == "RUNNING" for r in rows)

        wait_for(all_running, 60, "all 40 services to run", tmp_path / "home" / "logs")
        took = time.monotonic() - started
        # A sanity bound, not the target: the speed target (a multiple of the boot, measured
        # against a baseline) is tests/bench/test_bench_boots.py's. Waiting on boots one after
        # another would take 40 x 4 s.
        assert took < 6 * BOOT_S, f"40 launches with a {BOOT_S:g} s boot took {took:.1f}s"
        # The printed address hides the password; the full one is in the home (mode 0600).
        redis_url = (tmp_path / "home" / "redis-url").read_text().strip()
        _one_live_instance_each(rows, _local_instances(redis_url))
    finally:
        api.close()
        assert up.stop() == 0, up.output()


def test_a_boot_that_never_completes_times_out_and_fails_over(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    # neverboots.yaml with a quicker good zone (0.5 s, not 2 s): its boot is not what is
    # shown, and it has to fit in the same 3 s deadline, so a shorter one leaves more room.
    good = "{name: good-a, capacity: {cpu-2: 64}, launch_delay_s: %s}"
    cloud = tmp_path / "neverboots.yaml"
    cloud.write_text((CLOUDS / "neverboots.yaml").read_text().replace(good % 2, good % 0.5))
    assert good % 0.5 in cloud.read_text()
    system = make_system(cloud, ATTEMPT_DEADLINE_S="3")
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    req = system.wait_state(system.submit({**SERVICE, "name": "svc"}), {"RUNNING", "FAILED"}, 60)
    assert req["state"] == "RUNNING"
    outcomes = [(a["zone"], a["outcome"]) for a in req["attempts"]]
    assert outcomes == [("stuck-a", "timeout"), ("good-a", "ok")]
    # The machine that never booted was terminated at the deadline, not left to bill.
    [late] = [i for i in req["instances"] if i["zone"] == "stuck-a"]
    assert late["state"] == "TERMINATED"
    local = _local_instances(system.env["CORRAL_REDIS_URL"])
    assert local[late["provider_id"]]["state"] == "terminated"
    wait_for(lambda: agent_pids([late["provider_id"]]) == [], 10, "the late machine to be gone")


def test_boots_outlive_a_killed_provisioning_worker(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    """SIGKILL the only provisioning worker while 20 machines boot, start another: every
    request RUNNING on one instance, none launched twice, none leaked."""
    # The killed worker's unacknowledged tasks run again 4 s after (20 s in the other tests:
    # a kill that caught one waited that long, a run of 26 s where most take 9).
    system = make_system(
        one_zone_cloud(tmp_path / "boot.yaml", 64, BOOT_S), VISIBILITY_TIMEOUT_S="4"
    )
    system.start_api()
    system.start_worker("schedule")
    worker = system.start_worker("provision", "provision-a")
    system.start_beat()
    ids = [system.submit({**SERVICE, "name": f"svc-{i}"}) for i in range(20)]
    url = system.env["CORRAL_REDIS_URL"]
    wait_for(lambda: len(_local_instances(url)) >= 10, 30, "machines to start booting")
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)
    # The kill landed while machines boot (none booted is the usual case: the first 10 are
    # started within about a second of each other, and boot for 4 s).
    booting = [r for r in _local_instances(url).values() if not r.get("first_heartbeat_at")]
    assert booting, "every machine had booted before the worker was killed"
    system.start_worker("provision", "provision-b")
    rows = [system.wait_state(rid, {"RUNNING", "FAILED"}, 90) for rid in ids]
    _one_live_instance_each(rows, _local_instances(url))


LIMITED_LAUNCHES = 16


def test_launch_limits_hold_across_two_provisioning_workers(
    make_system: Callable[..., System],
) -> None:
    """3 launch calls/s (burst 1) and 5 in flight for the local cloud, two provisioning
    workers, 16 launches with a 2 s boot: never more calls in a second than the bucket allows,
    never more than 5 machines booting at once."""
    limits = {"local": {"calls_per_s": 3, "burst": 1, "in_flight": 5}}
    system = make_system(
        CLOUDS / "neverboots.yaml",
        env={"CORRAL_LAUNCH_LIMITS": json.dumps(limits)},
        ATTEMPT_DEADLINE_S="30",
    )
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision", "provision-a")
    system.start_worker("provision", "provision-b")
    system.start_beat()
    task = {"resources": {"cloud": "local", "instance_type": "cpu-2", "zone": "good-a"}}
    # 16 launches (it was 24; each costs 0.4 s, the in-flight cap's pace): the bucket alone
    # would keep 3/s x 2 s = 6 booting, so the cap binds from about the sixth launch on, and
    # the calls span five seconds of the bucket's pace.
    ids = [system.submit({**task, "name": f"svc-{i}"}) for i in range(LIMITED_LAUNCHES)]
    rows = [system.wait_state(rid, {"RUNNING", "FAILED"}, 120) for rid in ids]
    assert all(r["state"] == "RUNNING" for r in rows)
    records = _local_instances(system.env["CORRAL_REDIS_URL"]).values()
    calls = sorted(float(r["created_at"]) for r in records)
    assert len(calls) == LIMITED_LAUNCHES  # one launch call per request: none repeated
    # Token bucket: the calls in any window of w seconds are at most burst + 3 * w. The
    # records' times are taken after the bucket's, by a worker sharing two cores with the
    # rest: 0.25 s of slack (without the bucket, the 16 calls come within about a second).
    for i, first in enumerate(calls):
        for j in range(i, len(calls)):
            window = calls[j] - first
            assert j - i + 1 <= 1 + 3 * (window + 0.25), (j - i + 1, window)
    # In flight: from the launch call to the machine's first heartbeat.
    spans = [(float(r["created_at"]), float(r["first_heartbeat_at"])) for r in records]
    booting_at = [sum(a <= t < b for a, b in spans) for t, _ in spans]
    assert max(booting_at) <= 5, max(booting_at)
