"""The Redis store against a real redis-server: idempotent creation, compare-and-set under
contention, indexes that follow state changes, progress logs and idempotency keys."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from corral.services.state.blocks import BlockStore
from corral.services.state.store import Store, Together, WriteConflict
from corral.shared.blocking import Block
from corral.shared.lifecycle import IllegalTransition, InstanceState, RequestState
from corral.shared.records import Instance, LaunchRequest

pytestmark = pytest.mark.integration

PREFIX = "t"
WHERE = {
    "cloud": "local",
    "region": "local",
    "zone": "local-a",
    "instance_type": "gpu-a10x1",
    "market": "on_demand",
}


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url)
    yield r
    r.close()


@pytest.fixture
def store(client: redis.Redis) -> Store:
    return Store(client, prefix=PREFIX)


def new_request(request_id: str = "req-1", now: float = 100.0) -> LaunchRequest:
    return LaunchRequest.new(request_id, {"run": "echo hi"}, now=now)


def new_instance(instance_id: str, request_id: str, node: int, now: float = 110.0) -> Instance:
    return Instance.new(instance_id, request_id, node, now=now, **WHERE)


def raw_version(client: redis.Redis, request_id: str) -> int:
    return int(client.hget(f"{PREFIX}:request:{request_id}", "version"))


# ---- creation ---------------------------------------------------------------------------


def test_create_is_idempotent_and_never_overwrites(store: Store) -> None:
    assert store.create_request(new_request()) is True
    other = new_request()
    other.priority = 9
    assert store.create_request(other) is False
    got = store.get_request("req-1")
    assert got is not None
    assert (got.priority, got.version, got.state) == (0, 0, RequestState.PENDING)
    assert store.get_request("nope") is None

    assert store.create_instance(new_instance("i-1", "req-1", 0)) is True
    assert store.create_instance(new_instance("i-1", "req-2", 5)) is False
    inst = store.get_instance("i-1")
    assert inst is not None
    assert (inst.request_id, inst.node_index) == ("req-1", 0)
    assert store.list_instances(request_id="req-2") == []


def test_a_fresh_instance_is_stored_as_the_creation_script_stores_one(
    store: Store, client: redis.Redis
) -> None:
    # ``fresh``: no look for the id (the caller knows it is new), 3 commands; the row, its
    # version and both indexes as the script writes them, and the row moves on as any.
    store.create_instance(new_instance("i-s", "req-1", 0))
    before = {k: int(v["calls"]) for k, v in client.info("commandstats").items()}
    assert store.create_instance(new_instance("i-f", "req-1", 1), fresh=True) is True
    after = {k: int(v["calls"]) for k, v in client.info("commandstats").items()}
    sent = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert sent == {"cmdstat_hset": 1, "cmdstat_zadd": 2, "cmdstat_info": 1}
    scripted = client.hgetall(f"{PREFIX}:instance:i-s")
    fresh = client.hgetall(f"{PREFIX}:instance:i-f")
    assert scripted[b"version"] == fresh[b"version"] == b"0"
    assert {i.id for i in store.list_instances(request_id="req-1")} == {"i-s", "i-f"}
    requested = store.list_instances(states=[InstanceState.REQUESTED])
    assert {i.id for i in requested} == {"i-s", "i-f"}
    moved = store.update_instance("i-f", lambda i: i.move(InstanceState.RUNNING, 102.0, "up"))
    assert moved is not None and moved.version == 1
    assert [i.id for i in store.list_instances(states=[InstanceState.RUNNING])] == ["i-f"]


def test_every_key_starts_with_the_prefix(store: Store, client: redis.Redis) -> None:
    store.create_request(new_request())
    store.create_instance(new_instance("i-1", "req-1", 0))
    store.update_request("req-1", lambda r: r.move(RequestState.PROVISIONING, 101.0, "placed"))
    store.append_event("req-1", "placed", 101.0)
    store.claim("launch:req-1", "worker-a", 10)
    keys = sorted(k.decode() for k in client.keys("*"))
    assert len(keys) >= 7  # no index of every request: each is in its state's index
    assert all(k.startswith(f"{PREFIX}:") for k in keys), keys


# ---- compare-and-set --------------------------------------------------------------------


def test_concurrent_increments_lose_no_update(redis_url: str) -> None:
    threads_n, per_thread = 8, 50
    Store(redis.Redis.from_url(redis_url), PREFIX).create_request(new_request())
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def bump(r: LaunchRequest) -> bool:
        r.relaunches += 1
        return True

    def worker() -> None:
        own = Store(redis.Redis.from_url(redis_url), PREFIX)  # one client per "worker"
        barrier.wait()
        try:
            for _ in range(per_thread):
                own.update_request("req-1", bump)
        except BaseException as exc:  # reported below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    final = Store(redis.Redis.from_url(redis_url), PREFIX).get_request("req-1")
    assert final is not None
    assert final.relaunches == threads_n * per_thread
    assert final.version == threads_n * per_thread


def test_a_stale_write_is_retried_on_the_fresh_record(store: Store, redis_url: str) -> None:
    store.create_request(new_request())
    rival = Store(redis.Redis.from_url(redis_url), PREFIX)
    seen_versions: list[int] = []

    def fn(r: LaunchRequest) -> bool:
        seen_versions.append(r.version)
        if len(seen_versions) == 1:  # another worker writes between our read and our write
            rival.update_request("req-1", lambda o: setattr(o, "priority", 7) or True)
        r.labels["team"] = "vision"
        return True

    written = store.update_request("req-1", fn)
    assert seen_versions == [0, 1]
    assert written is not None
    assert (written.version, written.priority, written.labels) == (2, 7, {"team": "vision"})
    assert store.get_request("req-1") == written


def test_a_carried_record_is_written_without_a_read_and_a_stale_one_is_read_again(
    store: Store, client: redis.Redis
) -> None:
    """A caller's record starts the compare-and-set (no read); one that another writer
    overtook fails it, and the write is made again on the record as stored."""
    store.create_request(new_request())
    held = store.get_request("req-1")
    assert held is not None
    before = client.info("commandstats").get("cmdstat_hget", {}).get("calls", 0)
    fresh = store.update_request("req-1", lambda r: setattr(r, "priority", 3) or True, current=held)
    after = client.info("commandstats").get("cmdstat_hget", {}).get("calls", 0)
    assert fresh is not None and (fresh.version, fresh.priority) == (1, 3)
    assert after - before == 1  # the script's own version check: no read of the record
    seen: list[int] = []

    def label(r: LaunchRequest) -> bool:
        seen.append(r.version)
        r.labels["team"] = "vision"
        return True

    written = store.update_request("req-1", label, current=held)  # held is version 0: stale
    assert seen == [0, 1] and written is not None
    assert (written.version, written.priority, written.labels) == (2, 3, {"team": "vision"})
    assert store.get_request("req-1") == written
    with pytest.raises(ValueError):
        store.update_request("other", label, current=held)


def test_endless_conflicts_end_in_write_conflict(store: Store, redis_url: str) -> None:
    store.create_request(new_request())
    rival = Store(redis.Redis.from_url(redis_url), PREFIX)
    calls = 0

    def always_raced(r: LaunchRequest) -> bool:
        nonlocal calls
        calls += 1
        rival.update_request("req-1", lambda o: setattr(o, "priority", o.priority + 1) or True)
        r.labels["x"] = "y"
        return True

    with pytest.raises(WriteConflict):
        store.update_request("req-1", always_raced, retries=2)
    assert calls == 3
    got = store.get_request("req-1")
    assert got is not None
    assert (got.priority, got.labels, got.version) == (3, {}, 3)


def test_an_abort_leaves_the_record_unchanged(store: Store, client: redis.Redis) -> None:
    store.create_request(new_request())
    before = client.hget(f"{PREFIX}:request:req-1", "json")

    def fn(r: LaunchRequest) -> bool:
        r.priority = 99
        raise RuntimeError("provider said no")

    with pytest.raises(RuntimeError, match="provider said no"):
        store.update_request("req-1", fn)
    assert client.hget(f"{PREFIX}:request:req-1", "json") == before
    assert raw_version(client, "req-1") == 0

    with pytest.raises(IllegalTransition):
        store.update_request("req-1", lambda r: r.move(RequestState.SUCCEEDED, 1.0, "x"))
    assert client.hget(f"{PREFIX}:request:req-1", "json") == before


def test_a_no_op_writes_nothing_and_returns_the_record_as_read(
    store: Store, client: redis.Redis
) -> None:
    store.create_request(new_request())

    def fn(r: LaunchRequest) -> bool:
        r.priority = 5  # changed on the copy, but the function says "no change"
        return False

    got = store.update_request("req-1", fn)
    assert got is not None
    assert (got.priority, got.version) == (0, 0)
    assert raw_version(client, "req-1") == 0
    # A repeated move is a no-op too.
    store.update_request("req-1", lambda r: r.move(RequestState.PROVISIONING, 101.0, "placed"))
    again = store.update_request(
        "req-1", lambda r: r.move(RequestState.PROVISIONING, 102.0, "placed")
    )
    assert again is not None
    assert (again.version, len(again.history)) == (1, 2)


def test_update_guards(store: Store) -> None:
    calls: list[str] = []
    assert store.update_request("missing", lambda r: calls.append(r.id) or True) is None
    assert calls == []
    store.create_request(new_request())
    with pytest.raises(TypeError):
        store.update_request("req-1", lambda r: None)  # type: ignore[arg-type,return-value]

    def sneaky(r: LaunchRequest) -> bool:
        r.state = RequestState.RUNNING  # skips the lifecycle
        return True

    with pytest.raises(ValueError, match="without move"):
        store.update_request("req-1", sneaky)

    def renames(r: LaunchRequest) -> bool:
        r.id = "req-2"
        return True

    with pytest.raises(ValueError, match="must not change id"):
        store.update_request("req-1", renames)
    got = store.get_request("req-1")
    assert got is not None
    assert (got.state, got.version) == (RequestState.PENDING, 0)


# ---- indexes ----------------------------------------------------------------------------


def ids(records: list[LaunchRequest] | list[Instance]) -> list[str]:
    return [r.id for r in records]


def test_request_indexes_follow_state_changes(store: Store, client: redis.Redis) -> None:
    for n, created in enumerate((100.0, 300.0, 200.0)):
        store.create_request(new_request(f"req-{n}", created))
    assert ids(store.list_requests()) == ["req-1", "req-2", "req-0"]  # newest first
    assert ids(store.list_requests(oldest_first=True)) == ["req-0", "req-2", "req-1"]
    assert ids(store.list_requests(limit=2)) == ["req-1", "req-2"]
    assert store.list_requests(limit=0) == []

    store.update_request("req-2", lambda r: r.move(RequestState.PROVISIONING, 301.0, "placed"))
    assert ids(store.list_requests(RequestState.PENDING)) == ["req-1", "req-0"]
    assert ids(store.list_requests(RequestState.PROVISIONING)) == ["req-2"]
    assert client.zscore(f"{PREFIX}:requests:state:PENDING", "req-2") is None

    store.update_request("req-2", lambda r: r.move(RequestState.CANCELLED, 302.0, "user"))
    assert store.list_requests(RequestState.PROVISIONING) == []
    assert ids(store.list_requests(RequestState.CANCELLED)) == ["req-2"]
    assert len(store.list_requests()) == 3
    assert store.count_requests() == 3
    assert store.count_requests(RequestState.PENDING) == 2
    assert store.count_requests(RequestState.PROVISIONING) == 0


def test_instance_indexes(store: Store) -> None:
    store.create_instance(new_instance("b-1", "req-b", 1, now=120.0))
    store.create_instance(new_instance("a-0", "req-a", 0, now=110.0))
    store.create_instance(new_instance("b-0", "req-b", 0, now=120.0))
    assert ids(store.list_instances()) == ["a-0", "b-0", "b-1"]
    assert ids(store.list_instances(request_id="req-b")) == ["b-0", "b-1"]  # node order

    store.update_instance("b-1", lambda i: i.move(InstanceState.RUNNING, 130.0, "up"))
    running = [InstanceState.RUNNING]
    assert ids(store.list_instances(states=running)) == ["b-1"]
    assert ids(store.list_instances(states=[InstanceState.REQUESTED])) == ["a-0", "b-0"]
    both = [InstanceState.REQUESTED, InstanceState.RUNNING]
    assert ids(store.list_instances(states=both)) == ["a-0", "b-0", "b-1"]
    assert ids(store.list_instances(request_id="req-b", states=running)) == ["b-1"]
    assert store.list_instances(request_id="req-a", states=running) == []
    # Every instance, whatever its state, read from the state indexes: no index of all of
    # them is written at each creation.
    assert ids(store.list_instances()) == ["a-0", "b-0", "b-1"]
    assert not store._r.exists(store._key("instances", "created"))

    def reparent(i: Instance) -> bool:
        i.request_id = "req-a"
        return True

    with pytest.raises(ValueError, match="request_id"):
        store.update_instance("b-1", reparent)
    assert store.update_instance("nope", lambda i: True) is None


def test_a_request_and_its_instances_change_together_or_not_at_all(
    store: Store, client: redis.Redis
) -> None:
    store.create_request(new_request())
    for node in (0, 1):
        store.create_instance(new_instance(f"i-{node}", "req-1", node))
    seen: list[tuple[str, str]] = []

    class Told:
        def created(self, record: LaunchRequest | Instance) -> None: ...

        def written(
            self, before: LaunchRequest | Instance, after: LaunchRequest | Instance
        ) -> None:
            seen.append((after.id, after.state.value))

    store.listeners = (Told(),)
    runs = {"req-1": 0, "i-0": 0, "i-1": 0}

    def up(i: Instance) -> bool:
        runs[i.id] += 1
        if i.state != InstanceState.REQUESTED:
            return False
        i.move(InstanceState.RUNNING, 130.0, "up")
        return True

    def run(r: LaunchRequest) -> bool:
        runs[r.id] += 1
        if runs[r.id] == 1:  # another writer gets in between this read and the write
            store.update_instance("i-1", lambda i: i.move(InstanceState.RUNNING, 120.0, "x"))
        r.labels["up"] = "yes"
        return True

    got = store.update_together("req-1", run, {"i-0": up, "i-1": up})
    assert got is not None
    req, insts = got
    # The lost race wrote nothing: every record was read again and every function run again;
    # i-1, up meanwhile, is left as it is (its function asked for no change).
    assert runs == {"req-1": 2, "i-0": 2, "i-1": 2}
    assert req.version == 1 and req.labels["up"] == "yes"
    assert [(i.id, i.version, i.state) for i in insts] == [
        ("i-0", 1, InstanceState.RUNNING), ("i-1", 1, InstanceState.RUNNING),
    ]  # fmt: skip
    assert store.get_instance("i-0") == insts[0] and store.get_request("req-1") == req
    assert ids(store.list_instances(states=[InstanceState.RUNNING])) == ["i-0", "i-1"]
    assert seen == [("i-1", "RUNNING"), ("i-0", "RUNNING"), ("req-1", "PENDING")]
    # One of them missing: nothing written, None (the caller goes one by one).
    assert store.update_together("req-1", run, {"i-0": up, "i-9": up}) is None
    assert raw_version(client, "req-1") == 1


def test_several_requests_change_together_each_all_or_nothing(
    store: Store, client: redis.Redis
) -> None:
    # A boot watch's look that saw many launches up writes them in one batch; each request's
    # records still change together or not at all, a lost race retries that request alone,
    # and a missing record leaves its request unwritten (None), as update_together does.
    for n in range(3):
        store.create_request(new_request(f"req-{n}"))
        store.create_instance(new_instance(f"i-{n}", f"req-{n}", 0))
    runs: dict[str, int] = {}

    def up(i: Instance) -> bool:
        runs[i.id] = runs.get(i.id, 0) + 1
        if i.state != InstanceState.REQUESTED:
            return False
        i.move(InstanceState.RUNNING, 130.0, "up")
        return True

    def run(r: LaunchRequest) -> bool:
        runs[r.id] = runs.get(r.id, 0) + 1
        if r.id == "req-1" and runs[r.id] == 1:  # another writer, between read and write
            store.update_request("req-1", lambda x: x.labels.update(other="yes") is None)
        r.labels["up"] = "yes"
        return True

    current = store.get_request("req-0")  # handed: not read again
    got = store.update_together_many(
        [
            Together("req-0", run, {"i-0": up}, current),
            Together("req-1", run, {"i-1": up}),
            Together("req-2", run, {"i-2": up, "i-9": up}),  # i-9 does not exist
        ]
    )
    first, second, third = got
    assert first is not None and second is not None and third is None
    assert first[0].version == 1 and first[0].labels["up"] == "yes"
    assert [(i.id, i.state) for i in first[1]] == [("i-0", InstanceState.RUNNING)]
    # req-1 lost its race: read again and written over the other writer's change.
    assert runs["req-1"] == 2 and runs["i-1"] == 2
    assert second[0].version == 2 and second[0].labels == {"other": "yes", "up": "yes"}
    assert store.get_request("req-1") == second[0]
    assert store.get_instance("i-1") == second[1][0]
    # req-2: nothing written, its existing instance included.
    assert raw_version(client, "req-2") == 0
    assert store.get_instance("i-2").state == InstanceState.REQUESTED  # type: ignore[union-attr]
    assert ids(store.list_instances(states=[InstanceState.RUNNING])) == ["i-0", "i-1"]
    assert store.update_together_many([]) == []


def test_progress_lines_of_several_requests_in_one_go(store: Store) -> None:
    store.append_event("req-1", "first", 100.0)
    store.append_events_many([("req-1", ["up", "done"]), ("req-2", []), ("req-3", ["up"])], 101.0)
    assert [(e.seq, e.text) for e in store.events("req-1")] == [
        (1, "first"),
        (2, "up"),
        (3, "done"),
    ]
    assert store.events("req-2") == []
    assert [e.at for e in store.events("req-3")] == [101.0]
    store.append_events_many([], 102.0)


def test_works_with_a_decoding_client(redis_url: str) -> None:
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True), PREFIX)
    store.create_request(new_request())
    store.create_instance(new_instance("i-0", "req-1", 0))
    store.update_instance("i-0", lambda i: i.move(InstanceState.RUNNING, 120.0, "up"))
    store.append_event("req-1", "up", 120.0)
    assert ids(store.list_requests(RequestState.PENDING)) == ["req-1"]
    assert ids(store.list_instances(states=[InstanceState.RUNNING])) == ["i-0"]
    assert [e.text for e in store.events("req-1")] == ["up"]
    assert store.claim("k", "me", 5) is True
    assert store.release("k", "me") is True


# ---- progress log -----------------------------------------------------------------------


def test_events_follow_with_a_cursor(store: Store) -> None:
    assert store.events("req-1") == []
    texts = ["PENDING -> PROVISIONING", "try aws us-east-1a p4d", "capacity: sold out"]
    seqs = [store.append_event("req-1", t, 100.0 + n) for n, t in enumerate(texts)]
    assert seqs == [1, 2, 3]
    assert [(e.seq, e.at, e.text) for e in store.events("req-1")] == [
        (1, 100.0, texts[0]),
        (2, 101.0, texts[1]),
        (3, 102.0, texts[2]),
    ]
    assert [e.seq for e in store.events("req-1", after=2)] == [3]
    assert store.events("req-1", after=3) == []
    assert store.events("req-other") == []


# ---- idempotency keys -------------------------------------------------------------------


def test_claim_and_release_respect_ownership(store: Store) -> None:
    assert store.claim("attempt:a-1", "worker-a", 30) is True
    assert store.claim("attempt:a-1", "worker-b", 30) is False
    assert store.claim("attempt:a-1", "worker-a", 30) is False  # a duplicate delivery too
    assert store.release("attempt:a-1", "worker-b") is False  # not b's to release
    assert store.claim("attempt:a-1", "worker-b", 30) is False  # still a's
    assert store.release("attempt:a-1", "worker-a") is True
    assert store.release("attempt:a-1", "worker-a") is False
    assert store.claim("attempt:a-1", "worker-b", 30) is True


def test_an_expired_claim_frees_the_key_and_the_old_owner_cannot_release_the_new(
    store: Store,
) -> None:
    assert store.claim("k", "dead-worker", 0.1) is True
    time.sleep(0.3)
    assert store.claim("k", "worker-b", 30) is True
    assert store.release("k", "dead-worker") is False
    assert store.claim("k", "worker-c", 30) is False  # b still holds it


# ---- submissions under an idempotency key -----------------------------------------------


def test_a_created_request_has_its_first_line_and_a_taken_id_writes_none(store: Store) -> None:
    assert store.create_request(new_request(), event="accepted: first") is True
    assert store.create_request(new_request(), event="accepted: again") is False
    assert [e.text for e in store.events("req-1")] == ["accepted: first"]
    assert store.create_request(new_request("req-2")) is True  # no line asked for, none written
    assert store.events("req-2") == []


def test_racing_submissions_under_one_key_create_one_request(redis_url: str) -> None:
    threads_n = 8
    barrier = threading.Barrier(threads_n)
    holders: list[str] = []

    def submit(n: int) -> None:
        own = Store(redis.Redis.from_url(redis_url), PREFIX)
        barrier.wait()
        holders.append(
            own.create_keyed_request(new_request(f"req-{n}"), "order-7", f"accepted by {n}")
        )

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    store = Store(redis.Redis.from_url(redis_url), PREFIX)
    assert len(holders) == threads_n and len(set(holders)) == 1  # every caller sees one winner
    assert ids(store.list_requests()) == holders[:1]  # and nothing else was stored
    winner = holders[0].removeprefix("req-")
    assert [e.text for e in store.events(holders[0])] == [f"accepted by {winner}"]  # its line
    for n in range(threads_n):
        if f"req-{n}" != holders[0]:
            assert store.events(f"req-{n}") == []  # a loser wrote no line
    found = store.submission("order-7")
    assert found is not None
    assert (found.request_id, found.refusal, found.received) == (holders[0], None, threads_n)


def test_a_refusal_is_kept_until_a_request_takes_the_key_and_never_after(store: Store) -> None:
    assert store.submission("k-1") is None
    refusal = {"error": "impossible", "reasons": ["no cloud sells H100:64"]}
    assert store.refuse_keyed("k-1", refusal, 100.0) is True
    found = store.submission("k-1")
    assert found is not None and not found.accepted
    assert (found.refusal, found.at, found.received) == (refusal, 100.0, 1)

    assert store.create_keyed_request(new_request("req-1", now=101.0), "k-1") == "req-1"
    assert store.refuse_keyed("k-1", refusal, 102.0) is False
    found = store.submission("k-1")
    assert found is not None and found.accepted
    assert (found.request_id, found.refusal, found.at, found.received) == ("req-1", None, 101.0, 3)


def test_submissions_with_a_decoding_client(redis_url: str) -> None:
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True), PREFIX)
    assert store.create_keyed_request(new_request(), "k") == "req-1"
    assert store.create_keyed_request(new_request("req-2"), "k") == "req-1"
    found = store.submission("k")
    assert found is not None and (found.request_id, found.received) == ("req-1", 2)


def test_a_release_lifts_the_blocks_of_its_place_but_not_a_lost_machines(
    client: redis.Redis,
) -> None:
    """BlockStore.lift (failover.capacity_freed): the place's sold-out block and the region's
    quota block end; a lost machine's block, another place's and a cloud's stay."""
    blocks = BlockStore(client, prefix=PREFIX)
    here = Block("local", "local", "local-a", "gpu-a10x1", "on_demand")
    spot_here = Block("local", "local", "local-a", "gpu-a10x1", "spot")
    region = Block("local", region="local")
    elsewhere = Block("local", "local", "local-b", "gpu-a10x1", "on_demand")
    cloud = Block("local")
    for block, outcome in ((here, "capacity"), (region, "quota"), (elsewhere, "capacity"),
                           (cloud, "auth"), (spot_here, "lost")):  # fmt: skip
        blocks.add(block, now=100.0, ttl_s=60.0, reason="t", outcome=outcome)
    assert blocks.lift([here, region, spot_here, Block("local", zone="nowhere")]) == 2
    left = {b.block for b in blocks.active(110.0)}
    assert left == {elsewhere, cloud, spot_here}
    assert blocks.lift([here, region]) == 0  # nothing left to lift: one read, no write
