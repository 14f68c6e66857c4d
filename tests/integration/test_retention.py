"""Retention (issue #27, item 9), on a real redis-server: what finished longer ago than the
retention time is exported to a JSON-lines file (mode 0600), then deleted with its events,
instances and keyed submissions; what is recent or still has a machine up stays."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest
import redis

from corral.services.state.machines import MachineTable
from corral.services.state.retention import DAY_S, sweep
from corral.services.state.store import Store
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.placement import Placement
from corral.shared.records import Instance, LaunchRequest

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0
KEEP_S = 30 * DAY_S


@pytest.fixture
def store(redis_url: str) -> Store:
    return Store(redis.Redis.from_url(redis_url), prefix=f"ret{uuid.uuid4().hex[:6]}")


def _request(store: Store, rid: str, state: RequestState, finished_at: float) -> None:
    req = LaunchRequest(
        id=rid, task={"run": "true"}, state=state, created_at=finished_at - 60,
        updated_at=finished_at,
    )  # fmt: skip
    assert store.create_request(req)
    store.append_event(rid, "accepted", finished_at - 60)
    store.append_event(rid, f"state: {state}", finished_at)


def _instance(store: Store, rid: str, state: InstanceState, at: float) -> None:
    inst = Instance(
        id=f"{rid}-i0", request_id=rid, node_index=0, cloud="local", region="lab",
        zone="lab-a", instance_type="cpu-2", market="on_demand", state=state,
        created_at=at, updated_at=at,
    )  # fmt: skip
    assert store.create_instance(inst)


def test_old_finished_requests_are_exported_then_deleted(store: Store, tmp_path: Path) -> None:
    old = NOW - KEEP_S - DAY_S
    _request(store, "r-old", RequestState.SUCCEEDED, old)
    _instance(store, "r-old", InstanceState.TERMINATED, old)
    _request(store, "r-recent", RequestState.FAILED, NOW - DAY_S)
    _request(store, "r-running", RequestState.RUNNING, old)
    _request(store, "r-old-up", RequestState.TERMINATED, old)  # a machine not yet ended
    _instance(store, "r-old-up", InstanceState.RUNNING, old)
    # A keyed submission that created r-old, and a refusal long ago, and a recent one.
    store._r.hset(store._key("submission", "k-old"), mapping={"request_id": "r-old", "at": old})
    store._r.hset(store._key("submission", "k-refused"), mapping={"refusal": "{}", "at": old})
    store._r.hset(store._key("submission", "k-new"), mapping={"refusal": "{}", "at": NOW})

    done = sweep(store, now=NOW, keep_s=KEEP_S, export_dir=tmp_path / "exports")

    assert (done.requests, done.submissions) == (1, 1)
    assert done.kept_running == ["r-old-up"]
    assert store.get_request("r-old") is None and store.events("r-old") == []
    assert store.get_instance("r-old-i0") is None
    assert store.submission("k-old") is None and store.submission("k-refused") is None
    for rid in ("r-recent", "r-running", "r-old-up"):
        assert store.get_request(rid) is not None
    assert store.submission("k-new") is not None
    assert "r-old" not in {r.id for r in store.list_requests(limit=100)}
    assert store._r.exists(store._key("instances", "request", "r-old")) == 0
    # The export came first, whole, readable by the owner only.
    assert done.export_file is not None
    assert stat.S_IMODE(done.export_file.stat().st_mode) == 0o600
    lines = [json.loads(x) for x in done.export_file.read_text().splitlines()]
    [req_line] = [x for x in lines if x["kind"] == "request"]
    assert req_line["request"]["id"] == "r-old"
    assert [e["text"] for e in req_line["events"]] == ["accepted", "state: SUCCEEDED"]
    assert [i["id"] for i in req_line["instances"]] == ["r-old-i0"]
    assert set(req_line["submissions"]) == {"k-old"}
    assert [x["key"] for x in lines if x["kind"] == "submission"] == ["k-refused"]
    # A second sweep finds nothing more.
    again = sweep(store, now=NOW, keep_s=KEEP_S, export_dir=tmp_path / "exports")
    assert (again.requests, again.submissions) == (0, 0)


def test_the_retention_time_is_a_setting(tmp_path: Path) -> None:
    from corral.services.settings import Settings

    assert Settings(home=tmp_path).retention_days == 30
    assert Settings(home=tmp_path, retention_days=7).retention_days == 7
    with pytest.raises(ValueError):
        Settings(home=tmp_path, retention_days=0)


def test_a_pools_machine_rows_go_once_they_ended_long_ago(store: Store, tmp_path: Path) -> None:
    """A pool's row of the machine table outlives the machine's place in its ledger; it is
    exported, then deleted with its owner's index entry, once it ended before the retention
    time. A row still running, or ended recently, stays."""
    table = MachineTable(store._r, store.prefix)
    old = NOW - KEEP_S - DAY_S
    at = Placement("local", "lab", "lab-a", "cpu-2", "on_demand")
    for mid in ("m-gone", "m-up", "m-recent"):
        assert table.up(mid, ("pool", "p"), f"i-{mid}", at, old, machine_type="cpu")
    table.move("m-gone", InstanceState.TERMINATING, old + 60, "reaped")
    table.move("m-recent", InstanceState.TERMINATING, NOW - DAY_S, "reaped")

    done = sweep(store, now=NOW, keep_s=KEEP_S, export_dir=tmp_path / "exports")

    assert done.machines == 1
    assert table.get("m-gone") is None
    assert sorted(r.id for r in table.of_owner("pool", "p")) == ["m-recent", "m-up"]
    assert done.export_file is not None
    lines = [json.loads(x) for x in done.export_file.read_text().splitlines()]
    [row] = [x["machine"] for x in lines if x["kind"] == "machine"]
    assert row["id"] == "m-gone" and row["provider_id"] == "i-m-gone"
    assert row["owner_kind"] == "pool" and row["state"] == "TERMINATING"
    assert sweep(store, now=NOW, keep_s=KEEP_S, export_dir=tmp_path / "exports").machines == 0
