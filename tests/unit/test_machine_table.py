"""services/state/machines.py, the machine table, on a real redis-server: a pool's machine is
one row (the cloud's id, the place, the one lifecycle state, its owner) written by
compare-and-set; a request's node is a row of the same table owned by its request; ledgers
stored before the table (the cloud id and place in each machine's entry) load, and their
machines' rows are written as they are read."""

from __future__ import annotations

import json
import threading

import pytest
import redis

from corral.services.state.machines import MachineTable
from corral.services.state.pool_store import det_ledgers, pool_ledgers
from corral.services.state.store import Store, WriteConflict
from corral.shared.lifecycle import InstanceState, MachineStatus
from corral.shared.placement import Placement
from corral.shared.records import Instance
from corral.shared.scheduling.det_ledger import DetAgent, DetLedger
from corral.shared.scheduling.ledger import PoolLedger, PoolMachine

AT = Placement("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot")


@pytest.fixture
def r(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def table(r: redis.Redis) -> MachineTable:
    return MachineTable(r, "corral")


def test_a_pools_machine_is_one_row_with_its_owner_written_once(table: MachineTable) -> None:
    assert table.up("m-1", ("pool", "train"), "i-0abc", AT, 10.0, machine_type="gpu")
    assert not table.up("m-1", ("pool", "train"), "i-0other", AT, 11.0)  # a redelivery
    row = table.get("m-1")
    assert row is not None and row.provider_id == "i-0abc" and row.place == AT
    assert row.state is InstanceState.RUNNING and row.version == 0
    assert row.owner == ("pool", "train") and row.machine_type == "gpu"
    assert [i.id for i in table.of_owner("pool", "train")] == ["m-1"]
    assert table.of_owner("pool", "other") == [] and table.get("m-2") is None
    assert table.get_many(["m-1", "m-2", "m-1"]) == {"m-1": row}


def test_a_pools_rows_stay_out_of_the_request_indexes(r: redis.Redis, table: MachineTable) -> None:
    """Reconcile, the metrics and the autoscaler walk a request's nodes by their indexes: a
    machine no request holds is not among them, whatever its state."""
    table.up("m-1", ("pool", "train"), "i-0abc", AT, 10.0)
    table.move("m-1", InstanceState.TERMINATING, 12.0, "reaped")
    assert Store(r, "corral").list_instances() == []
    assert not any(k.startswith(b"corral:instances:") for k in r.keys("*"))
    row = table.get("m-1")
    assert row is not None and row.state is InstanceState.TERMINATING and row.version == 1
    assert [t.to_state for t in row.history] == ["REQUESTED", "RUNNING", "TERMINATING"]


def test_a_request_node_is_a_row_owned_by_its_request(r: redis.Redis, table: MachineTable) -> None:
    store = Store(r, "corral")
    node = Instance.new("i-1", "r-1", 0, 1.0, provider_id="i-0n", **AT.fields())
    assert store.create_instance(node)
    row = table.get("i-1")
    assert row is not None and row.owner == ("request", "r-1")  # stored without an owner
    with pytest.raises(ValueError, match="created by the store"):
        table.create(node)
    # A move through the table keeps the request's state index right.
    table.move("i-1", InstanceState.RUNNING, 2.0, "up")
    assert [i.id for i in store.list_instances(states=[InstanceState.RUNNING])] == ["i-1"]
    assert store.list_instances(states=[InstanceState.REQUESTED]) == []


def test_an_older_record_without_an_owner_reads_as_its_requests(table: MachineTable) -> None:
    node = Instance.new("i-1", "r-1", 0, 1.0, **AT.fields())
    stored = json.loads(node.model_dump_json())
    assert "owner_kind" not in stored and "owner_id" not in stored  # its JSON as it always was
    older = Instance.model_validate_json(json.dumps(stored))
    assert older.owner == ("request", "r-1") and older == node
    pooled = Instance.new("m-1", "", 0, 1.0, owner_kind="pool", owner_id="p", **AT.fields())
    assert json.loads(pooled.model_dump_json())["owner_kind"] == "pool"
    assert Instance.model_validate_json(pooled.model_dump_json()).owner == ("pool", "p")


def test_writers_that_race_each_win_once(table: MachineTable) -> None:
    """Two writers read the same version; the one that lost reads again and computes again:
    both changes land, the version counts both."""
    table.up("m-1", ("pool", "train"), "i-0abc", AT, 10.0)
    gate = threading.Barrier(2)
    seen: list[int] = []

    def touch(address: str) -> None:
        def fn(row: Instance) -> bool:
            seen.append(row.version)
            if len(seen) <= 2:
                gate.wait(timeout=5)  # both read version 0 before either writes
            row.address = (row.address or "") + address
            return True

        table.update("m-1", fn)

    threads = [threading.Thread(target=touch, args=(a,)) for a in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row = table.get("m-1")
    assert row is not None and row.version == 2 and sorted(row.address or "") == ["a", "b"]
    assert seen[:2] == [0, 0] and seen[2] == 1  # the loser computed again from version 1


def test_a_writer_that_keeps_losing_gives_up(table: MachineTable, r: redis.Redis) -> None:
    table.up("m-1", ("pool", "train"), "i-0abc", AT, 10.0)

    def always_raced(row: Instance) -> bool:
        r.hincrby("corral:instance:m-1", "version", 1)  # another writer got in first
        row.address = "x"
        return True

    with pytest.raises(WriteConflict):
        table.update("m-1", always_raced, retries=2)
    assert table.update("m-2", always_raced) is None  # no such row


def test_an_update_may_not_change_the_owner_or_skip_the_lifecycle(table: MachineTable) -> None:
    table.up("m-1", ("pool", "train"), "i-0abc", AT, 10.0)

    def steal(row: Instance) -> bool:
        row.owner_id = "other"
        return True

    def jump(row: Instance) -> bool:
        row.state = InstanceState.TERMINATED
        return True

    for fn in (steal, jump):
        with pytest.raises(ValueError):
            table.update("m-1", fn)
    row = table.get("m-1")
    assert row is not None and row.version == 0 and row.owner == ("pool", "train")
    # A move the lifecycle has not, or of an ended row, is a no-op.
    table.move("m-1", InstanceState.LOST, 11.0, "its agent fell silent")
    assert table.move("m-1", InstanceState.RUNNING, 12.0, "back") is not None
    row = table.get("m-1")
    assert row is not None and row.state is InstanceState.LOST and row.version == 1


def test_an_older_pool_ledger_loads_and_its_machines_move_into_the_table(
    r: redis.Redis, table: MachineTable
) -> None:
    """A ledger stored by a version before the table kept each machine's cloud id and place
    in its entry: it still loads, its up machines' rows are written as it is read, and the
    next write of the ledger leaves the fields out."""
    ledger = PoolLedger(pool="train")
    ledger.machines["m-1"] = PoolMachine(
        machine_id="m-1", machine_type="gpu", partition="p", created_at=5.0, status="up"
    )
    ledger.machines["m-2"] = PoolMachine(
        machine_id="m-2", machine_type="gpu", partition="p", created_at=6.0
    )
    older = json.loads(ledger.model_dump_json())
    older["machines"]["m-1"].update(provider_id="i-0old", **AT.fields())
    older["machines"]["m-2"].update(provider_id=None, cloud=None)  # launching: nothing yet
    older["version"] = 3
    r.hset("corral:pool-ledger:train", mapping={"version": 3, "json": json.dumps(older)})
    r.sadd("corral:pool-ledgers", "train")
    docs = pool_ledgers(r, "corral")
    read = docs.get("train")
    assert read is not None and read.version == 3 and set(read.machines) == {"m-1", "m-2"}
    assert read.machines["m-1"].status == "up" and read.machines["m-2"].status == "launching"
    row = table.get("m-1")
    assert row is not None and row.provider_id == "i-0old" and row.place == AT
    assert row.owner == ("pool", "train") and row.machine_type == "gpu" and row.created_at == 5.0
    assert table.get("m-2") is None
    assert docs.update("train", lambda led: led.machines["m-1"].move(MachineStatus.REAPING) or True)
    stored = json.loads(r.hget("corral:pool-ledger:train", "json") or b"{}")
    assert (
        "provider_id" not in stored["machines"]["m-1"] and "zone" not in stored["machines"]["m-1"]
    )
    assert table.get("m-1") == row  # read again: the row is not written twice
    assert docs.get("train") is not None and table.get("m-1") == row


def test_an_older_master_ledger_moves_its_agents_into_the_table(
    r: redis.Redis, table: MachineTable
) -> None:
    ledger = DetLedger(master="det")
    ledger.agents["a-1"] = DetAgent(agent_id="a-1", pool="gpu", slots=8, created_at=1.0)
    older = json.loads(ledger.model_dump_json())
    older["agents"]["a-1"].update(status="up", provider_id="i-0ag", **AT.fields())
    r.hset("corral:det-ledger:det", mapping={"version": 1, "json": json.dumps(older)})
    read = det_ledgers(r, "corral").get("det")
    assert read is not None and read.agents["a-1"].status == "up"
    row = table.get("a-1")
    assert row is not None and row.owner == ("det_pool", "det") and row.market == "spot"
    assert row.provider_id == "i-0ag" and row.machine_type is None
