"""A machine pool's machines walk their zones with the block memory every launch shares (issue
#48 item 2), on a real system (API, scheduling and provisioning workers, beat) and the local
cloud: a zone a direct request found sold out for a type is passed over by a pool machine of
that type with no call there, and a zone a pool machine found sold out is passed over by the
next direct request. Each zone sells out once only (``times: 1``), so a call made there after
the first would succeed: a machine or request that lands in the next zone never called it.
The walk's own cases: tests/unit/test_machine_walk.py, tests/unit/runtime/test_pooled_walk.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from corral.services.cli.pools_api_cmd import pool_body
from corral.services.client import Client
from corral.services.state.blocks import BlockStore

from harness import System, wait_for

pytestmark = pytest.mark.integration

# lab-a then lab-b (equal prices: the file's order), each type sold out once in lab-a.
CLOUD = {
    "instance_types": [
        {"name": "cpu-2", "vcpus": 2, "memory_gib": 4, "price_usd_per_hour": 0.10},
        {"name": "cpu-4", "vcpus": 4, "memory_gib": 8, "price_usd_per_hour": 0.20},
    ],
    "regions": [
        {
            "name": "lab",
            "zones": [
                {
                    "name": "lab-a",
                    "capacity": {"cpu-2": 4, "cpu-4": 4},
                    "errors": {
                        "cpu-2": {"kind": "capacity", "times": 1},
                        "cpu-4": {"kind": "capacity", "times": 1},
                    },
                },
                {"name": "lab-b", "capacity": {"cpu-2": 4, "cpu-4": 4}},
            ],
        }
    ],
}


def pool(itype: str) -> dict[str, Any]:
    return {
        "kind": "ANYSCALE_MANAGED",
        "machine_types": [
            {
                "machine_type": "worker",
                "launch_templates": [{"instance_type": itype}],
                "partitions": [{"name": "shared", "size": 2}],
            }
        ],
    }


# Two groups: cpu-2 in lab-a only, then cpu-4; a workload drawing on them in that order.
TWO_GROUPS = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "first",
            "launch_templates": [{"instance_type": "cpu-2", "zones": ["lab-a"]}],
            "partitions": [{"name": "shared", "size": 2}],
        },
        {
            "machine_type": "second",
            "launch_templates": [{"instance_type": "cpu-4"}],
            "partitions": [{"name": "shared", "size": 2}],
        },
    ],
}
TWO_GROUPS_WORKLOAD = {
    "name": "on-two-groups",
    "compute_config": {
        "worker_nodes": [
            {
                "instance_type": group,
                "flags": {"cloud_deployment": {"machine_pool": "pool-two-groups"}},
            }
            for group in ("first", "second")
        ]
    },
    "run": "sleep 600",
}


def workload(pool_name: str) -> dict[str, Any]:
    flags = {"cloud_deployment": {"machine_pool": pool_name}}
    return {
        "name": f"on-{pool_name}",
        "compute_config": {"worker_nodes": [{"instance_type": "worker", "flags": flags}]},
        "run": "sleep 600",
    }


def direct(itype: str) -> dict[str, Any]:
    return {"name": f"direct-{itype}", "resources": {"cloud": "local", "instance_type": itype},
            "run": "sleep 600"}  # fmt: skip


def trail(req: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(a["zone"], a["outcome"]) for a in req["attempts"]]


def running_zones(system: System, rid: str) -> list[str]:
    return [i["zone"] for i in system.request(rid)["instances"] if i["state"] == "RUNNING"]


def test_pool_and_direct_launches_skip_the_zones_each_other_found_sold_out(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    cloud = tmp_path / "two-zones.yaml"
    cloud.write_text(yaml.safe_dump(CLOUD, sort_keys=False))
    system = make_system(cloud, BLOCKED_TTL_S="600")
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    client = Client(system.api_url, system.token)
    for itype in ("cpu-2", "cpu-4"):
        path = tmp_path / f"pool-{itype}.yaml"
        path.write_text(yaml.safe_dump(pool(itype)))
        client.apply_pool(**pool_body(path, f"pool-{itype}", None))

    # A direct request finds cpu-2 sold out in lab-a (a capacity block there, for cpu-2
    # on-demand) and runs in lab-b.
    first = system.wait_state(system.submit(direct("cpu-2")), {"RUNNING", "FAILED"})
    assert trail(first) == [("lab-a", "capacity"), ("lab-b", "ok")]
    # A pool machine of cpu-2 goes to lab-b with no call in lab-a (which would take it now).
    on_pool = system.submit(workload("pool-cpu-2"))
    wait_for(lambda: system.request(on_pool)["state"] == "RUNNING", 60, "the pool workload",
             system.home / "logs")  # fmt: skip
    assert running_zones(system, on_pool) == ["lab-b"]
    events = [e["text"] for e in system.get(f"/v1/requests/{on_pool}/events").json()["events"]]
    assert not [t for t in events if "could not be launched" in t], events

    # The other way: a pool machine of cpu-4 finds it sold out in lab-a and comes up in lab-b;
    # the next direct request for cpu-4 passes lab-a over as blocked.
    other = system.submit(workload("pool-cpu-4"))
    wait_for(lambda: system.request(other)["state"] == "RUNNING", 60, "the cpu-4 workload",
             system.home / "logs")  # fmt: skip
    assert running_zones(system, other) == ["lab-b"]
    second = system.wait_state(system.submit(direct("cpu-4")), {"RUNNING", "FAILED"})
    assert trail(second) == [("lab-a", "blocked"), ("lab-b", "ok")]
    assert "remembered as capacity" in second["attempts"][0]["error"]
    # The blocks at their scope: each type on-demand in lab-a, nothing wider.
    memory = BlockStore(redis.Redis.from_url(system.env["CORRAL_REDIS_URL"]))
    blocks = [r.block for r in memory.active(time.time())]
    assert sorted((b.zone, b.instance_type, b.market) for b in blocks) == [
        ("lab-a", "cpu-2", "on_demand"),
        ("lab-a", "cpu-4", "on_demand"),
    ]

    # A pool whose first group can launch cpu-2 in lab-a only (every place of it blocked now)
    # books no new machine there: its workload goes to the second group at once, with no
    # launch that could only fail (no setback, no failure on its events).
    path = tmp_path / "pool-two-groups.yaml"
    path.write_text(yaml.safe_dump(TWO_GROUPS))
    client.apply_pool(**pool_body(path, "pool-two-groups", None))
    down = system.submit(TWO_GROUPS_WORKLOAD)
    wait_for(lambda: system.request(down)["state"] == "RUNNING", 60, "the two-group workload",
             system.home / "logs")  # fmt: skip
    events = [e["text"] for e in system.get(f"/v1/requests/{down}/events").json()["events"]]
    assert not [t for t in events if "could not be launched" in t or "backing off" in t], events
    [node] = [i for i in system.request(down)["instances"] if i["state"] == "RUNNING"]
    assert (node["instance_type"], node["zone"]) == ("cpu-4", "lab-b"), node
