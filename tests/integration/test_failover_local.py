"""Failover chains on the local cloud, through real workers: sold-out zones, quota, pins,
the shared memory of sold-out zones, and throttling retried in place."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from corral.services.providers.local import EXAMPLE_CLOUD_FILE
from corral.services.state.blocks import BlockStore

from harness import REPO, System, wait_for

pytestmark = pytest.mark.integration

CLOUD = REPO / "tests" / "fixtures" / "localcloud" / "failover.yaml"
HANG = REPO / "tests" / "fixtures" / "localcloud" / "hang.yaml"
HUNG_TYPE = "cpu-2-hang"  # hang.yaml's one type, renamed: only its regions offer it


def _with_hung_regions(path: Path) -> Path:
    """failover.yaml with hang.yaml's regions after its own, offering ``HUNG_TYPE`` alone: the
    failover tests' chains are failover.yaml's, and a ``HUNG_TYPE`` launch walks hang.yaml's
    (equal prices keep the file's order)."""
    cloud = yaml.safe_load(CLOUD.read_text())
    hang = yaml.safe_load(HANG.read_text())
    [hang_type] = hang["instance_types"]
    cloud["instance_types"].append({**hang_type, "name": HUNG_TYPE})
    for region in hang["regions"]:
        for zone in region["zones"]:
            zone["capacity"] = {HUNG_TYPE: zone["capacity"][hang_type["name"]]}
    cloud["regions"] += hang["regions"]
    path.write_text(yaml.safe_dump(cloud, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def shared(
    make_module_system: Callable[..., System], tmp_path_factory: pytest.TempPathFactory
) -> System:
    """One installation for every test here (each start is seconds of CPU): each launches
    instance types no other one runs, and starts with no scope remembered (``system``)."""
    cloud = _with_hung_regions(tmp_path_factory.mktemp("failover") / "failover-hang.yaml")
    # The hung test's deadline (2 s when it had an installation of its own): 3 s is still
    # half of hang.yaml's 6 s boot, and leaves the other tests' attempts (a machine that boots
    # at once, its agent reporting in) room on a busy machine.
    system = make_module_system(cloud, BLOCKED_TTL_S="120", ATTEMPT_DEADLINE_S="3")
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


@pytest.fixture
def system(shared: System) -> Iterator[System]:
    """The shared installation with its memory of failed scopes emptied, as on a fresh one (a
    quota error blocks its quota family in the region)."""
    client = redis.Redis.from_url(shared.env["CORRAL_REDIS_URL"])
    BlockStore(client).clear()
    yield shared
    client.close()


def _trail(req: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["zone"], a["outcome"]) for a in req["attempts"]]


def gpu(accelerators: str, **resources: Any) -> dict[str, Any]:
    return {
        "name": "train",
        "resources": {"cloud": "local", "accelerators": accelerators, **resources},
    }


def test_sold_out_region_then_memory_of_it(system: System) -> None:
    first = system.wait_state(system.submit(gpu("A100:8")), {"RUNNING", "FAILED"})
    assert first["state"] == "RUNNING"
    assert _trail(first) == [("east-a", "capacity"), ("east-b", "capacity"), ("west-a", "ok")]
    assert first["instances"][0]["zone"] == "west-a"

    # Within the TTL a second request never tries the sold-out zones: it lists them as blocked.
    second = system.wait_state(system.submit(gpu("A100:8")), {"RUNNING", "FAILED"})
    assert second["state"] == "RUNNING"
    assert _trail(second) == [("east-a", "blocked"), ("east-b", "blocked"), ("west-a", "ok")]
    assert "remembered as capacity" in second["attempts"][0]["error"]


def test_quota_skips_the_rest_of_the_region_for_its_family(system: System) -> None:
    req = system.wait_state(system.submit(gpu("V100:4")), {"RUNNING", "FAILED"})
    assert req["state"] == "RUNNING"
    assert _trail(req) == [("east-a", "quota"), ("east-b", "blocked"), ("west-a", "ok")]


def test_pinned_region_never_leaves_it(system: System) -> None:
    pinned = {**gpu("A100:8", region="east"), "retry_until_up": False}  # fail fast
    req = system.wait_state(system.submit(pinned), {"RUNNING", "FAILED"})
    assert req["state"] == "FAILED"
    assert {a["zone"] for a in req["attempts"]} == {"east-a", "east-b"}
    assert all(a["region"] == "east" for a in req["attempts"])
    # The CLI shows the account as a table when it failed.
    shown = system.cli("status", req["id"])
    assert "east-a" in shown.stdout and "capacity" in shown.stdout


def test_throttling_is_retried_in_the_same_zone(system: System) -> None:
    task = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    req = system.wait_state(system.submit(task), {"RUNNING", "FAILED"})
    assert req["state"] == "RUNNING"
    assert _trail(req) == [("east-a", "throttled"), ("east-a", "throttled"), ("east-a", "ok")]


def test_a_hung_region_is_cut_off_and_remembered(system: System) -> None:
    task = {"name": "svc", "resources": {"cloud": "local", "instance_type": HUNG_TYPE}}
    req = system.wait_state(system.submit(task), {"RUNNING", "FAILED"}, 60)
    assert req["state"] == "RUNNING"
    # The hung zone is cut at the deadline and its whole region is passed over.
    assert _trail(req) == [("slow-a", "timeout"), ("slow-b", "blocked"), ("fast-a", "ok")]
    # What the late launch created in the hung zone is found and terminated by reconcile.
    client = redis.Redis.from_url(system.env["CORRAL_REDIS_URL"], decode_responses=True)
    # The hung zone's machine was recorded while it booted and ended when it timed out.
    assert [(i["zone"], i["state"]) for i in req["instances"]] == [
        ("slow-a", "TERMINATED"),
        ("fast-a", "RUNNING"),
    ]
    late, keep = (i["provider_id"] for i in req["instances"])

    def no_stray() -> bool:
        # This request's machines alone: the other tests' run on the same installation.
        everything = client.smembers("corral:local:instances")
        records = {i: client.hgetall(f"corral:local:instance:{i}") for i in everything - {keep}}
        ours = [r for i, r in records.items() if i == late or r.get("request_id") == req["id"]]
        ended = all(r.get("state") in (None, "terminated", "lost") for r in ours)
        return late in everything and ended

    wait_for(no_stray, 60, "the hung zone's late instance to be cleaned up", system.home / "logs")


# --- issue #46: blocks at the scope the cloud meant -------------------------------------------
def _remembered(system: System) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(system.env["CORRAL_REDIS_URL"])
    try:
        now = float(client.time()[0])
        return [b.block.to_dict() for b in BlockStore(client).active(now)]
    finally:
        client.close()


def test_a_t4_quota_error_leaves_the_regions_cpus_alone(system: System) -> None:
    t4 = system.wait_state(system.submit(gpu("T4:1")), {"RUNNING", "FAILED"})
    assert t4["state"] == "RUNNING"
    # The T4 quota of the region is out (its other zone's T4s too); the next region serves.
    assert _trail(t4) == [("capped-a", "quota"), ("capped-b", "blocked"), ("t4-a", "ok")]
    assert "quota on_demand:T4" in t4["attempts"][1]["error"]
    [block] = [b for b in _remembered(system) if b["region"] == "capped"]
    assert (block["quota_family"], block["scope"], block["zone"]) == ("on_demand:T4", "quota", None)
    # A CPU job in that region launches where the T4 quota ran out, with no blocked attempt.
    task = {"name": "cpu", "resources": {"cloud": "local", "instance_type": "cpu-4q"}}
    cpu = system.wait_state(system.submit(task), {"RUNNING", "FAILED"})
    assert cpu["state"] == "RUNNING"
    assert _trail(cpu) == [("capped-a", "ok")]
    # A T4 request pinned to that region is passed over it, and `why` names the block's scope.
    pinned = {**gpu("T4:1", region="capped"), "retry_until_up": False}
    req = system.wait_state(system.submit(pinned), {"RUNNING", "FAILED"})
    assert _trail(req) == [("capped-a", "blocked")]  # one block: told once for both zones
    with system.client() as api:
        shown = api.get(f"/v1/requests/{req['id']}/why").json()
    assert [(b["kind"], b["quota_family"]) for b in shown["blocked"]] == [("quota", "on_demand:T4")]
    assert (
        "blocked ahead: quota local capped: quota on_demand:T4"
        in system.cli("why", req["id"]).stdout
    )


def test_a_shortfall_blocks_only_bigger_asks(system: System) -> None:
    two = {**gpu("A10G:2"), "num_nodes": 2, "retry_until_up": False}
    req = system.wait_state(system.submit(two), {"RUNNING", "FAILED"})
    assert req["state"] == "FAILED"
    assert _trail(req) == [("short-a", "capacity")]
    assert "1 of 1 gpu-a10g-2 free, asked for 2" in req["attempts"][0]["error"]
    [block] = [b for b in _remembered(system) if b["zone"] == "short-a"]
    assert (block["above"], block["scope"]) == (1, "shortfall")
    # The README's 1-node case: it fits what is free, so it launches there, fail-fast or not.
    one = {**gpu("A10G:2"), "retry_until_up": False}
    req = system.wait_state(system.submit(one), {"RUNNING", "FAILED"})
    assert req["state"] == "RUNNING"
    assert _trail(req) == [("short-a", "ok")]
    # A second 2-node ask meets the ceiling: passed over, not tried again.
    again = system.wait_state(system.submit(two), {"RUNNING", "FAILED"})
    assert _trail(again) == [("short-a", "blocked")]
    assert "asks of more than 1 node" in again["attempts"][0]["error"]


def test_machines_that_never_register_do_not_block_their_region(system: System) -> None:
    task = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-1u"}}
    first = system.wait_state(system.submit(task), {"RUNNING", "FAILED"}, 90)
    assert first["state"] == "RUNNING"
    # The cloud started them; their agents never registered: their fault, replaced next door.
    assert _trail(first) == [("unreg-a", "unregistered"), ("unreg-b", "ok")]
    assert "never registered" in first["attempts"][0]["error"]
    assert not [b for b in _remembered(system) if b["region"] == "unreg"]
    # The next request in that region is not blocked: it launches in the same zone.
    second = system.wait_state(system.submit(task), {"RUNNING", "FAILED"}, 60)
    assert second["state"] == "RUNNING"
    assert _trail(second) == [("unreg-a", "ok")]
    shown = system.cli("status", first["id"])
    assert "unregistered" in shown.stdout


def test_the_readme_a100_job_runs_after_a_two_node_ask_found_one_free(
    make_system: Callable[..., System],
) -> None:
    """Issue #46, as reported: on the example cloud a 2-node A100 ask finds lab-west-a with
    "1 of 1 gpu-a100-8 free, asked for 2"; the README's 1-node train-a100.yaml, fail-fast, then
    launches there (it failed "all 3 candidates failed or are blocked (0 tried)")."""
    system = make_system(EXAMPLE_CLOUD_FILE)
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    readme = yaml.safe_load((REPO / "examples" / "workload" / "train-a100.yaml").read_text())
    two = {**readme, "name": "train-2", "num_nodes": 2, "retry_until_up": False}
    req = system.wait_state(system.submit(two), {"RUNNING", "FAILED"}, 90)
    assert req["state"] == "FAILED"
    [west] = [a for a in req["attempts"] if a["zone"] == "lab-west-a"]
    assert west["outcome"] == "capacity"
    assert "1 of 1 gpu-a100-8 free, asked for 2" in west["error"]
    one = {**readme, "retry_until_up": False}
    req = system.wait_state(system.submit(one), {"RUNNING", "SUCCEEDED", "FAILED"}, 90)
    assert req["state"] in ("RUNNING", "SUCCEEDED"), req["error"]
    # lab-east is passed over as blocked without a try (lab-east-a is both sold out and under
    # the region's A100 quota: which block the walk names first, and so whether it names
    # lab-east-b apart, is either), and lab-west-a's one free machine takes the 1-node ask.
    trail = _trail(req)
    assert trail[-1] == ("lab-west-a", "ok")
    assert all(outcome == "blocked" for _zone, outcome in trail[:-1]), trail
    assert {zone for zone, _ in trail[:-1]} <= {"lab-east-a", "lab-east-b"}
