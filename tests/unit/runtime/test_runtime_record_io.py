"""How often one launch reads and writes its request record (issue #23, item 4: compute once).

The store is the real one, on the test's redis-server; the test only counts what the runtime
asks of it, from the submit to RUNNING, for a direct launch whose machine is up at once and
for one whose first zone is sold out (a failover walks on in the same task)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from runtime_driver import Driver

from corral.services.queues import dispatch
from corral.services.runtime import launch, provisioning, requests, typed_task
from corral.services.runtime.attempt_record import attempt_id_for
from corral.services.state.blocks import BlockStore
from corral.services.state.boots import Boot, BootBook
from corral.services.state.store import Store
from corral.shared.config.task import Task
from corral.shared.errors import CapacityError
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest

SERVICE = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}


@pytest.fixture
def io(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of request-record reads (a get, alone or with another hash in its round trip, or
    the read of a compare-and-set that was not handed the record its caller had just read)
    and writes (a compare-and-set that changed it, or its creation)."""
    seen: Counter[str] = Counter()
    get, update, create = Store.get_request, Store._update, Store.create_request
    together, beside = Store.update_together, Store.get_request_beside

    def counted_get(self: Store, request_id: str) -> LaunchRequest | None:
        seen["reads"] += 1
        return get(self, request_id)

    def counted_beside(self: Store, request_id: str, key: str) -> tuple[Any, Any]:
        seen["reads"] += 1  # the request, with another hash in the same round trip
        return beside(self, request_id, key)

    def counted_update(
        self: Store, model: type, key: str, fn: Callable[[Any], tuple[bool, Any]], *args: Any
    ) -> Any:
        if model is not LaunchRequest:
            return update(self, model, key, fn, *args)
        first = [len(args) > 2 and args[2] is not None]  # handed a record: no first read

        def counted(r: Any) -> tuple[bool, Any]:  # whether to write, and what was decided
            handed = first.pop() if first else False
            seen["reads"] += 0 if handed else 1
            wrote = fn(r)
            seen["writes"] += int(wrote[0])
            return wrote

        return update(self, model, key, counted, *args)

    def counted_create(self: Store, req: LaunchRequest, event: str | None = None) -> bool:
        seen["writes"] += 1
        return create(self, req, event)

    def counted_together(
        self: Store, request_id: str, fn: Callable[[Any], bool], *args: Any, **kwargs: Any
    ) -> Any:
        first = [kwargs.get("current") is not None]

        def counted(r: Any) -> bool:
            handed = first.pop() if first else False
            seen["reads"] += 0 if handed else 1
            wrote = fn(r)
            seen["writes"] += int(wrote)
            return wrote

        return together(self, request_id, counted, *args, **kwargs)

    monkeypatch.setattr(Store, "get_request", counted_get)
    monkeypatch.setattr(Store, "get_request_beside", counted_beside)
    monkeypatch.setattr(Store, "_update", counted_update)
    monkeypatch.setattr(Store, "create_request", counted_create)
    monkeypatch.setattr(Store, "update_together", counted_together)
    yield seen


def _launch(driver: Driver, io: Counter[str]) -> dict[str, int]:
    """Submit one task and run it to RUNNING; the reads and writes it took."""
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    driver.run()
    took = dict(io)
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    return took


def test_one_direct_launch_reads_and_writes_its_record_a_few_times(
    driver: Driver, io: Counter[str]
) -> None:
    took = _launch(driver, io)
    print(f"\none launch: {took}")
    # Written: created; chain, PROVISIONING, first step and its attempt started (the attempt
    # runs in the admission's task); RUNNING with the attempt's outcome. Read: admission
    # only (every later write starts from the record its caller wrote).
    # (Before issue #23: 6 writes, 10 reads; then 4 writes, 6 reads; then 4 writes, 3 reads.)
    assert took == {"writes": 3, "reads": 1}


def test_a_failed_zone_costs_a_few_record_reads_and_writes_more(
    driver: Driver, io: Counter[str]
) -> None:
    driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    took = _launch(driver, io)
    print(f"\none launch, one failed zone: {took}")
    # The failed zone adds one write (its outcome, the next step and that step's attempt
    # started, together, from the record in hand), and no read: the next attempt, tried in
    # the same task, starts from the record that write left.
    # (Before issue #23: 9 writes, 17 reads, and a broker message for the region step; then
    # 6 writes, 10 reads; then 6 writes, 5 reads.)
    assert took == {"writes": 4, "reads": 1}


def test_an_admission_reads_the_blocks_with_its_request_and_writes_its_lines_with_its_walk(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Round trips, not commands: the blocks in force come in the round trip that reads the
    # request, and the walk's progress lines (PROVISIONING, the attempt run here) go in the
    # script of its compare-and-set. (Before: a read of the blocks and an RPUSH of their own.)
    calls: Counter[str] = Counter()
    active, append = BlockStore.active, Store.append_events

    def counted_active(self: BlockStore, now: float) -> Any:
        calls["blocks read alone"] += 1
        return active(self, now)

    def counted_append(self: Store, request_id: str, texts: Any, now: float) -> int:
        calls["lines written alone"] += 1
        return append(self, request_id, texts, now)

    monkeypatch.setattr(BlockStore, "active", counted_active)
    monkeypatch.setattr(Store, "append_events", counted_append)
    driver.fake.boot_delay_s = 60.0  # still booting when the admission's task ends
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    driver.run(until=lambda: bool(driver.deps.boots.of("local")))
    assert driver.ran == ["corral.schedule.admit"]
    assert calls == {}
    texts = [e.text for e in driver.deps.store.events(rid)]
    assert texts[1:3] == [
        "state: PROVISIONING (3 candidates)",
        "attempt 1/3: local lab-east/lab-east-a cpu-2 (on_demand)",
    ]


def test_an_attempt_started_in_its_own_task_does_not_look_up_its_boot(
    driver: Driver, io: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The boot book is read to keep a redelivered attempt's first deadline; an attempt this
    # task's own write started has no earlier boot to find.
    looked: list[str] = []
    get = BootBook.get

    def counted(self: BootBook, cloud: str, attempt_id: str) -> Boot | None:
        looked.append(attempt_id)
        return get(self, cloud, attempt_id)

    monkeypatch.setattr(BootBook, "get", counted)
    driver.fake.boot_delay_s = 60.0  # still booting when the task ends
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    driver.run(until=lambda: bool(driver.deps.boots.of("local")))
    assert looked == []
    # The same attempt again (a redelivered task): it looks the boot up and keeps the first
    # deadline, launching nothing more.
    (first,) = driver.deps.boots.of("local")
    assert first.spec.request_id == rid
    later = first.model_copy(update={"deadline": first.deadline + 500})
    launch.start(driver.deps, later)
    assert looked == [first.key]
    (kept,) = driver.deps.boots.of("local")
    assert kept.deadline == first.deadline


@pytest.mark.parametrize("failed_zones", [0, 1])
def test_an_attempt_run_by_the_task_whose_write_started_it_is_claimed_by_that_write(
    driver: Driver, monkeypatch: pytest.MonkeyPatch, failed_zones: int
) -> None:
    # The walk that starts an attempt for its own task to run takes the attempt's claim in
    # its compare-and-set's script: no claim of its own (a SET and a round trip), and the
    # attempt is never recorded started and unclaimed. The same for the zone after a failed
    # one, started by the failure's walk.
    taken: list[str] = []
    claim = Store.claim

    def counted(self: Store, key: str, owner: str, ttl_s: float) -> bool:
        taken.append(key)
        return claim(self, key, owner, ttl_s)

    monkeypatch.setattr(Store, "claim", counted)
    for _ in range(failed_zones):
        driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert [k for k in taken if k.startswith("attempt:")] == []  # the boot watch's is its own
    started = [a.attempt_id for a in req.attempts if a.outcome != "blocked"]
    assert len(started) == 1 + failed_zones
    # Each was claimed all the same: the claims lapse (claim_ttl_s) rather than being freed.
    assert all(driver.deps.store.is_claimed(f"attempt:{a}") for a in started)


def test_an_attempt_claimed_by_another_delivery_waits_for_it_as_before(driver: Driver) -> None:
    # The walk's write still starts the attempt (its script writes the request whoever holds
    # the claim), and the task defers the attempt, as when its own claim was refused.
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    pending = driver.deps.store.get_request(rid)
    assert pending is not None
    key = f"attempt:{attempt_id_for(pending, 0, 0)}"
    assert driver.deps.store.claim(key, "another-delivery", 30.0)
    assert driver.step() == "attempt deferred"
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.PROVISIONING
    assert [a.attempt_id for a in req.attempts] == [key.removeprefix("attempt:")]
    assert driver.names() == [dispatch.ATTEMPT]
    assert driver.deps.store.release(key, "another-delivery")  # still the other's
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING


def test_an_attempt_handed_to_the_queue_after_a_long_run_of_refusals_is_not_left_claimed(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task stops walking inline after INLINE_ATTEMPTS zones and publishes the next
    # attempt, which the walk's write had claimed for it: the claim is given back first, so
    # the published attempt runs at once (not after the claim lapses and a retry).
    monkeypatch.setattr(provisioning, "INLINE_ATTEMPTS", 1)
    driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    assert driver.step() == "failed over"  # the admission's task: one zone, then the queue
    assert driver.names() == [dispatch.ATTEMPT]
    driver.run()  # a refused claim would raise RetryLater here, and nothing would run it
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING


def test_one_direct_launch_costs_a_few_redis_commands(driver: Driver, redis_url: str) -> None:
    # Every Redis command the runtime sends for one launch that is up at once, submit to
    # RUNNING (the queues are the driver's and the cloud is the fake: the broker, the local
    # cloud and its agents are not counted here; the launch-cost benchmark counts them all).
    client = redis.Redis.from_url(redis_url)
    skip = {"cmdstat_info", "cmdstat_hello", "cmdstat_client|setinfo", "cmdstat_script|load"}

    def calls() -> Counter[str]:
        stats = client.info("commandstats")
        return Counter({k: int(v["calls"]) for k, v in stats.items() if k not in skip})

    requests.submit(driver.deps, Task.model_validate(SERVICE))  # connections and scripts warm
    driver.run()
    before = calls()
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    driver.run()
    took = calls() - before
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    print(f"\none launch: {sum(took.values())} commands: {dict(took)}")
    # 48 before the fourth round: the registered pools read at submit (a plain task cannot go
    # to one), the index of every instance, one script per record at RUNNING (now one for the
    # instance and the request together). 45 before the fifth: the index of every request.
    # 44 before issue #48's launch-path round: the attempt's claim released (a script of three
    # commands) rather than left to lapse once the attempt is over. 41 before the `cmds`
    # round: the instance row of an attempt its task's own write started, created by the
    # creation script (its look for the id and its EVALSHA) rather than written directly.
    # 39 before the rows carried: the instance row read back for RUNNING's compare-and-set
    # (the launch that wrote it hands it on, as the boot it books carries it to the watch).
    assert sum(took.values()) == 38


def _booting(driver: Driver) -> tuple[str, Boot]:
    """A direct launch still booting when its admission's task ends: its request id and the
    boot the watch will finish (within the attempt's deadline, 30 s here)."""
    driver.fake.boot_delay_s = 5.0
    rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
    driver.run(until=lambda: bool(driver.deps.boots.of("local")))
    (boot,) = driver.deps.boots.of("local")
    return rid, boot


def _hgets(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_hget", {}).get("calls", 0))


def test_a_boot_carries_its_instance_rows_and_the_watch_does_not_read_them(
    driver: Driver, redis_url: str
) -> None:
    # The launch books its boot with the instance rows it just created (version 0), and the
    # watch that sees the machine up starts its compare-and-set from them: one HGET less per
    # machine than for a boot without them (as one booked before boots carried rows is read).
    client = redis.Redis.from_url(redis_url)
    hgets = {}
    for carried in (True, False):
        rid, boot = _booting(driver)
        rows = driver.deps.store.list_instances(rid)
        assert [r.model_dump() for r in boot.rows] == [r.model_dump() for r in rows]
        assert [r.version for r in boot.rows] == [0]
        if not carried:
            driver.deps.boots.add(boot.model_copy(update={"rows": []}))
        driver.fake.advance(10.0)  # up by the watch's next look
        before = _hgets(client)
        driver.run()
        hgets[carried] = _hgets(client) - before
        req = driver.deps.store.get_request(rid)
        assert req is not None and req.state == RequestState.RUNNING
        (inst,) = driver.deps.store.list_instances(rid)
        assert inst.state.value == "RUNNING" and inst.version == 1
    print(f"\nthe watch's HGETs, the rows carried and not: {hgets}")
    assert hgets[False] - hgets[True] == 1


def test_a_carried_row_changed_since_its_launch_is_read_again(driver: Driver) -> None:
    # The row the boot carries is a copy: a write to the stored row after the launch (here,
    # the address a reconcile or an agent could fill in) fails the watch's compare-and-set
    # from the copy, and the watch reads the row and moves it on, keeping that write.
    rid, boot = _booting(driver)
    (row,) = boot.rows

    def addressed(inst: Any) -> bool:
        inst.address = "10.0.0.9"
        return True

    assert driver.deps.store.update_instance(row.id, addressed) is not None
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    (inst,) = driver.deps.store.list_instances(rid)
    assert inst.state.value == "RUNNING" and inst.address == "10.0.0.9" and inst.version == 2


def test_a_failed_zone_costs_a_few_redis_commands_more(driver: Driver, redis_url: str) -> None:
    # The commands one sold-out zone adds to a launch (the fake cloud's refusal costs none):
    # its claim (1), the block remembered (a script: 3), the blocks read for the walk (1), the
    # walk's one compare-and-set (the failed outcome, the next step and its attempt started: a
    # script, 3) and one progress-line command for the failure's line and the walk's (1).
    client = redis.Redis.from_url(redis_url)
    skip = {"cmdstat_info", "cmdstat_hello", "cmdstat_client|setinfo", "cmdstat_script|load"}

    def launch_commands(failed_zones: int) -> int:
        for _ in range(failed_zones):
            sold_out = CapacityError("sold out", code="InsufficientCapacity")
            driver.fake.fail_next(sold_out, "lab-east-a")
        driver.deps.blocks.clear()
        before = Counter({k: int(v["calls"]) for k, v in client.info("commandstats").items()})
        rid = requests.submit(driver.deps, Task.model_validate(SERVICE)).id
        driver.run()
        after = Counter({k: int(v["calls"]) for k, v in client.info("commandstats").items()})
        req = driver.deps.store.get_request(rid)
        assert req is not None and req.state == RequestState.RUNNING
        return sum(n for k, n in (after - before).items() if k not in skip)

    launch_commands(0)  # connections and scripts warm
    launch_commands(1)
    extra = launch_commands(1) - launch_commands(0)
    print(f"\none failed zone: {extra} commands more")
    # 13 before issue #48's launch-path round: the failure's line in a command of its own,
    # the failed attempt's claim released (a script of three commands).
    assert extra == 9


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of the task parsed from its stored form (``Task.model_validate``) by the
    runtime's steps."""
    seen: Counter[str] = Counter()
    validate = Task.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Task], obj: Any, *args: Any, **kwargs: Any) -> Task:
        seen["task"] += 1
        return validate(cls, obj, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Task, "model_validate", classmethod(counted))
    return seen


@pytest.mark.parametrize("failed_zones", [0, 1])
def test_one_direct_launch_parses_its_task_once_in_the_runtime(
    driver: Driver, parses: Counter[str], failed_zones: int
) -> None:
    # Parsed once at submit (here, by the test: the API's parse of the user's file); then once
    # by the admission, which hands it to the attempt it runs in its own task, and the zones
    # that attempt walks on to share it. (Before issue #48 item 2: twice with the zone up at
    # once, three times with one failed zone: the admission, then each zone's attempt.)
    for _ in range(failed_zones):
        driver.fake.fail_next(CapacityError("sold out", code="InsufficientCapacity"), "lab-east-a")
    task = Task.model_validate(SERVICE)
    parses.clear()
    rid = requests.submit(driver.deps, task).id
    # The admission as a worker runs it, in a process other than the API's that accepted the
    # request: it holds no typed task (runtime/typed_task.py), so it parses the stored one.
    # (In the accepting process nothing is parsed again: test_structure_counts.py.)
    typed_task.forget_all()
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    assert sum(a.outcome not in (None, "ok") for a in req.attempts) == failed_zones
    assert parses["task"] == 1
