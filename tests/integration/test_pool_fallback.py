"""A machine pool falls back instead of storming (issue #46), on a real system (API,
scheduling and provisioning workers, beat) and the local cloud.

The Anyscale seed's GCP pool and compute config, as written, on a local cloud with one machine
in the reservation the reserved partition (size 2) draws on and spot sold out: the workload's
second reserved machine fails, it backs off and is placed on spot, whose machines fail, backs
off again and runs on on-demand; within a minute, with a few events, not thousands (4,267 in
about 60 s before). The decisions' own tests: tests/unit/test_pool_fallback.py.
"""

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
from corral.services.state.store import Store

from harness import REPO, System, wait_for

pytestmark = pytest.mark.integration

FIXTURES = REPO / "tests" / "fixtures"
CLOUD = FIXTURES / "localcloud" / "pools-gcp-short.yaml"
SEED_POOL = FIXTURES / "seeds" / "anyscale-machine-pool-gcp.yaml"
SEED_COMPUTE = FIXTURES / "seeds" / "anyscale-compute-config-gcp.yaml"
POOL = "demo-machine-pool"  # the name the seed's compute config uses


def _events(store: Store, rid: str) -> list[tuple[float, str]]:
    return [(e.at, e.text) for e in store.events(rid)]


def test_the_seed_gcp_pool_short_of_reserved_falls_to_spot_then_on_demand_within_a_minute(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    system = make_system(CLOUD)
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    client = Client(system.api_url, system.token)
    client.apply_pool(**pool_body(SEED_POOL, POOL, None))
    task = tmp_path / "train.yaml"
    task.write_text(
        yaml.safe_dump(
            {
                "name": "train",
                "num_nodes": 2,
                "compute_config": str(SEED_COMPUTE),
                "run": "sleep 600",
            }
        )
    )
    rid = str(client.launch(task).id)
    began = time.time()

    # While it backs off, `why` says which group failed, when, and when the next try is.
    told: dict[str, Any] = {}

    def backing_off() -> bool:
        found = system.get(f"/v1/requests/{rid}/why").json()
        if found.get("code") == "backing_off":
            told.update(found)
            return True
        return False

    wait_for(backing_off, 30, "the workload to back off", system.home / "logs")
    assert "a reserved-a100 machine failed to launch at" in told["reason"], told
    assert "reservation shared-a100 has 0 of 1" in told["reason"], told
    assert "next try at" in told["reason"] and "on spot-a100" in told["reason"], told

    def on_demand() -> bool:
        req = system.request(rid)
        workers = [
            (i["machine_type"], i["market"])
            for i in req["instances"]
            if i["state"] == "RUNNING" and i["machine_type"] != "head_node"
        ]
        return req["state"] == "RUNNING" and workers == [("ondemand-a100", "on_demand")] * 2

    wait_for(on_demand, 60, "the workload to run on on-demand", system.home / "logs")
    assert time.time() - began < 60
    # It stays there, and the pool asks nothing more of the short groups meanwhile.
    time.sleep(8)
    store = Store(redis.Redis.from_url(system.env["CORRAL_REDIS_URL"]), prefix="corral")
    events = _events(store, rid)
    minute = [text for at, text in events if at - began <= 60]
    failed = [t for t in minute if "could not be launched" in t]
    placed = [t for t in minute if t.startswith("scheduler: placed")]
    assert len(failed) == 2, "\n".join(failed)
    assert "reserved-a100 could" in failed[0] and "spot-a100 could" in failed[1], failed
    assert "next try at" in failed[0] and "reserved-a100 passed over until" in failed[0]
    assert len(placed) == 3, "\n".join(placed)
    assert "2 on ondemand-a100/any" in placed[-1]
    # A few events a minute, everything counted (placements, failures, machines up, nodes,
    # states): 4,267 before.
    assert len(minute) <= 25, "\n".join(minute)
    assert not [t for at, t in events if at - began > 60 and "could not be launched" in t]
    assert system.request(rid)["state"] == "RUNNING"
    client.terminate(rid)
    system.wait_state(rid, {"TERMINATED"}, 60)
