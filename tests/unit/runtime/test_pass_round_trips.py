"""The Redis round trips of one steady pool pass (``run_pass``: the pass and its sync) with
its work running on machines that are up, on the fake provider. A machine's cloud id and
place live in the machine table, not in its ledger entry: the pass reads its machines' rows
in one pipelined read with the ledger, and its sync carries the ledger and rows the pass
read, so a pass costs no round trip more than when the ledger held them (11 and 8 on the
commit before the table, counted by this same test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from redis.connection import Connection
from runtime_driver import SMALL_POOL, Driver
from runtime_driver import SMALL_POOL_WORKLOAD as WORKLOAD

from corral.services.runtime import requests
from corral.services.runtime.pooled import passes
from corral.services.runtime.pooled.registry import apply_pool, pool_view
from corral.shared.config.task import Task

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _round_trips(driver: Driver, name: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Sends to Redis during one pass (a pipeline is one), after a pass that warmed up."""
    sent: list[int] = []
    send = Connection.send_packed_command

    def counted(self: Connection, command: Any, check_health: bool = True) -> None:
        sent.append(1)
        send(self, command, check_health)

    passes.run_pass(driver.deps, name)  # scripts loaded, connections open
    with monkeypatch.context() as patch:
        patch.setattr(Connection, "send_packed_command", counted)
        passes.run_pass(driver.deps, name)
    return len(sent)


def _phases(driver: Driver, name: str) -> list[str]:
    view = pool_view(driver.deps, name)
    return [w["phase"] for w in view["workloads"]] + [m["status"] for m in view["machines"]]


def test_a_machine_pool_pass_costs_no_round_trip_more(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    [machine_type] = SMALL_POOL["machine_types"]  # type: ignore[misc]
    two = {**machine_type, "partitions": [{"name": "shared", "size": 2}]}
    apply_pool(
        driver.deps, name="small", kind="machine_pool", file_name="small.yaml",
        spec={**SMALL_POOL, "machine_types": [two]}, cloud="local",
    )  # fmt: skip
    driver.queue.clear()
    for name in ("a", "b"):
        task = {**WORKLOAD, "name": name, "run": "sleep 100"}
        requests.submit(driver.deps, Task.model_validate(task))
    driver.run(until=lambda: _phases(driver, "small") == ["running", "running", "up", "up"])
    driver.run(limit=50)
    assert _round_trips(driver, "small", monkeypatch) <= 11


def test_a_determined_pass_costs_no_round_trip_more(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = yaml.safe_load((FIXTURES / "pools" / "master-local.yaml").read_text())
    apply_pool(
        driver.deps, name="det", kind="master_config", file_name="master.yaml",
        spec=master, cloud="local",
    )  # fmt: skip
    driver.queue.clear()
    task = {"name": "t", "resources": {"slots": 2}, "run": "sleep 100"}
    requests.submit(driver.deps, Task.model_validate(task))
    driver.run(until=lambda: _phases(driver, "det")[:1] == ["running"])
    driver.run(limit=50)
    assert "up" in _phases(driver, "det")
    assert _round_trips(driver, "det", monkeypatch) <= 8
