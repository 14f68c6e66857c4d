"""The cluster records' store on a real redis-server: create once, compare-and-set, delete."""

from __future__ import annotations

import threading

import redis

from corral.services.state.clusters import ClusterNode, ClusterRecord, ClusterStore


def _store(url: str) -> ClusterStore:
    return ClusterStore(redis.Redis.from_url(url), prefix="t")


def _record(name: str = "c1") -> ClusterRecord:
    return ClusterRecord(
        name=name,
        uid="abc123",
        file_name="c.yaml",
        cluster={"cluster_name": name},
        created_at=1.0,
        updated_at=1.0,
    )


def test_a_name_is_created_once_and_listed(redis_url: str) -> None:
    store = _store(redis_url)
    assert store.create(_record("b"))
    assert store.create(_record("a"))
    assert not store.create(_record("a"))
    assert store.names() == ["a", "b"]
    got = store.get("a")
    assert got is not None and got.version == 0 and got.uid == "abc123"
    assert store.get("missing") is None


def test_a_write_from_a_stale_read_loses(redis_url: str) -> None:
    store = _store(redis_url)
    store.create(_record())
    first = store.get("c1")
    second = store.get("c1")
    assert first is not None and second is not None
    first.demand = {"bundles": [{"resources": {"CPU": 1}, "count": 1}]}
    assert store.write(first, 0) == 1
    assert first.version == 1
    second.cooldowns = {"gpu": 99.0}
    assert store.write(second, 0) == 0  # the version moved on: nothing written
    stored = store.get("c1")
    assert stored is not None and stored.version == 1 and stored.cooldowns == {}
    assert stored.demand == first.demand


def test_concurrent_updates_all_land(redis_url: str) -> None:
    store = _store(redis_url)
    store.create(_record())

    def add(i: int) -> None:
        def fn(r: ClusterRecord) -> bool:
            r.nodes[f"n{i}"] = ClusterNode(
                request_id=f"n{i}",
                node_type="cpu",
                kind="worker",
                launch_hash="h",
                committed_at=float(i),
            )
            return True

        store.update("c1", fn)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = store.get("c1")
    assert stored is not None
    assert sorted(stored.nodes) == [f"n{i}" for i in range(8)]
    assert stored.version == 8


def test_delete_checks_the_version(redis_url: str) -> None:
    store = _store(redis_url)
    store.create(_record())
    assert store.delete("c1", 5) == 0
    assert store.delete("c1", 0) == 1
    assert store.get("c1") is None and store.names() == []
    assert store.delete("c1", 0) == -1
    assert store.update("c1", lambda r: True) is None
