"""Pooled work that ends outside a pass wakes its pool at reconcile's next look
(runtime/pooled/ends.py): a machine the cloud lost, an assignment's end its agents reported;
and the wakes of one pool coalesce into one pass waiting on the queue."""

from __future__ import annotations

from typing import Any

from runtime_driver import SMALL_POOL, Driver
from runtime_driver import SMALL_POOL_WORKLOAD as WORKLOAD

from corral.services.queues import dispatch
from corral.services.runtime import reconcile, requests
from corral.services.runtime.pooled import passes, work
from corral.services.runtime.pooled.registry import apply_pool, pool_view
from corral.shared.config.task import Task
from corral.shared.lifecycle import MachineState, MachineStatus
from corral.shared.scheduling.ledger import PoolLedger


class EndedWork:
    """The agents' port as reconcile reads it: which machines' work ended since last asked."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    def ended_work(self) -> list[str]:
        taken, self.ended = self.ended, []
        return taken


def _placed(driver: Driver) -> tuple[str, str]:
    """The small pool with one workload running on its machine: (request id, cloud id)."""
    apply_pool(
        driver.deps, name="small", kind="machine_pool", file_name="small.yaml",
        spec=SMALL_POOL, cloud="local",
    )  # fmt: skip
    driver.queue.clear()  # the pass applying publishes: nothing to do yet
    rid = requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "run": "sleep 300"})).id
    driver.run()
    [machine] = pool_view(driver.deps, "small")["machines"]
    assert machine["status"] == "up" and machine["workload"] == rid
    row = driver.deps.machines.get(machine["id"])
    assert row is not None and row.provider_id
    return rid, row.provider_id


def _passes(driver: Driver) -> list[list[Any]]:
    return [p.args for p in driver.queue if p.name == dispatch.POOL_PASS]


def test_a_lost_pool_machine_is_dropped_and_its_pool_woken_at_reconcile(driver: Driver) -> None:
    rid, provider_id = _placed(driver)
    assert not driver.queue
    reconcile.reconcile(driver.deps)
    assert not _passes(driver)  # nothing ended: nothing woken
    driver.fake.lose(provider_id)
    counts = reconcile.reconcile(driver.deps)
    assert counts["pool_machines_lost"] == 1 and counts["pools_woken"] == 1
    assert _passes(driver) == [["small", True]]
    assert pool_view(driver.deps, "small")["machines"] == []  # dropped, its work queued
    texts = [e.text for e in driver.deps.store.events(rid)]
    assert any("was lost" in t for t in texts), texts
    driver.run(until=lambda: bool(pool_view(driver.deps, "small")["machines"]))
    [again] = pool_view(driver.deps, "small")["machines"]
    assert again["workload"] == rid  # a new machine launched for it


def test_a_retiring_machine_the_cloud_lost_is_lost_on_its_row(driver: Driver) -> None:
    """A retiring machine (its replacement up, its work not yet handed over) that its cloud
    lost shows LOST on its row, as an up one does, then TERMINATING as what is left of it is
    terminated (before, the lifecycle had no RETIRING -> LOST move and it showed only
    TERMINATING)."""
    _, provider_id = _placed(driver)
    [machine] = pool_view(driver.deps, "small")["machines"]

    def retire(ledger: PoolLedger) -> bool:
        return ledger.machines[machine["id"]].move(MachineStatus.RETIRING)

    ledger = driver.deps.ledgers.update("small", retire)
    assert ledger is not None
    # The pool's word carried onto the row, as its sync does (a sync here would also hand the
    # work over: this pool has no replacement coming).
    row = work.mirror(driver.deps, driver.deps.machines.get(machine["id"]),
                      ledger.machines[machine["id"]])  # fmt: skip
    assert row is not None and row.state is MachineState.RETIRING
    driver.fake.lose(provider_id)
    assert reconcile.reconcile(driver.deps)["pool_machines_lost"] == 1
    row = driver.deps.machines.get(machine["id"])
    assert row is not None
    moves = [(t.from_state, t.to_state) for t in row.history]
    assert moves[-2:] == [("RETIRING", "LOST"), ("LOST", "TERMINATING")], moves


def test_a_reported_end_of_work_wakes_the_machines_pool(driver: Driver) -> None:
    _, provider_id = _placed(driver)
    agents = EndedWork()
    driver.fake.node_work = agents  # type: ignore[assignment]
    agents.ended = [provider_id, provider_id, "fk-unknown"]
    counts = reconcile.reconcile(driver.deps)
    assert counts["pools_woken"] == 1 and _passes(driver) == [["small", True]]
    reconcile.reconcile(driver.deps)  # taken: not woken twice for one report
    assert _passes(driver) == [["small", True]]


def test_wakes_coalesce_until_the_pass_starts(driver: Driver) -> None:
    _placed(driver)
    assert passes.wake(driver.deps, "small")
    assert not passes.wake(driver.deps, "small")  # one waits already: it reads this too
    passes.run_pass(driver.deps, "small")  # another pass frees no wake: the woken one will
    assert not passes.wake(driver.deps, "small")
    assert _passes(driver) == [["small", True]]
    driver.step()  # the woken pass starts: a wake after it sends again
    assert passes.wake(driver.deps, "small")
    assert _passes(driver) == [["small", True]]
