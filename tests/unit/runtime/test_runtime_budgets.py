"""Dollar budgets at run time: the runtime's own pass (as the scheduling worker runs it, on a real
redis-server) holds back a pooled workload a budget refuses, `corral why` and the API's
/v1/requests/{id}/why name the budget, and a budget raised in its file lets it in on the next
pass."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from pydantic import SecretStr
from runtime_driver import Driver

from corral.services.api import create_app
from corral.services.runtime import requests, why
from corral.services.runtime.pooled import passes
from corral.services.runtime.pooled.registry import apply_pool, pool_view
from corral.services.settings import Settings
from corral.shared.config.task import Task

# Two cpu-2 machines (the local cloud sells them at 0.10 USD/h) for the team's work.
POOL = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "cpu-2"}],
            "partitions": [{"name": "shared", "size": 2}],
        }
    ],
}
WORKLOAD = {
    "labels": {"team": "research"},
    "compute_config": {
        "worker_nodes": [
            {"instance_type": "cpu", "flags": {"cloud_deployment": {"machine_pool": "small"}}}
        ]
    },
    "run": "sleep 1",
}
BUDGETS = """\
budgets:
  - {name: research-cpu, pool: small, selector: team=research, usd_per_hour: %s}
"""
TOKEN = "budget-t0ken"
CORRAL = Path(sys.executable).parent / "corral"


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    """The HTTP API over the test's Redis, served by uvicorn on a free port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _budgets(path: Path, usd_per_hour: float, at_s: float) -> None:
    path.write_text(BUDGETS % usd_per_hour)
    os.utime(path, ns=(int(at_s * 1e9), int(at_s * 1e9)))  # a new mtime: the file is re-read


def test_a_budget_holds_back_a_pooled_workload_and_why_names_it(
    driver: Driver, tmp_path: Path
) -> None:
    budgets = tmp_path / "budgets.yaml"
    _budgets(budgets, 0.15, 1_000)  # room for one machine's 0.10 USD/h, not two
    settings = driver.deps.settings
    settings.budgets_file = budgets
    settings.api_token = SecretStr(TOKEN)
    apply_pool(
        driver.deps, name="small", kind="machine_pool", file_name="small.yaml",
        spec=POOL, cloud="local",
    )  # fmt: skip
    driver.queue.clear()
    first, second = (
        requests.submit(driver.deps, Task.model_validate({**WORKLOAD, "name": n})).id
        for n in ("first", "second")
    )
    driver.step()  # each admission queues its workload and runs the pool's pass
    driver.step()
    phases = {w["id"]: w["phase"] for w in pool_view(driver.deps, "small")["workloads"]}
    assert phases == {first: "running", second: "pending"}  # the partition had room for both

    said = why.why(driver.deps, second)
    assert said["code"] == "over_budget" and said["budget"] == "research-cpu"
    assert "budget 'research-cpu' (pool small, team=research)" in said["reason"]
    assert "0.10 of 0.15 USD/h in use; placing it would add 0.10 USD/h" in said["reason"]

    with serving(settings) as url:
        env = {**os.environ, "CORRAL_API_URL": url, "CORRAL_API_TOKEN": TOKEN}
        env["CORRAL_HOME"] = str(tmp_path / "cli-home")
        shown = subprocess.run(
            [str(CORRAL), "why", second], env=env, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert "over_budget" in shown.stdout
        assert "held back by budget research-cpu" in shown.stdout
        told = httpx.get(
            f"{url}/v1/requests/{second}/why", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert told.status_code == 200, told.text
        assert told.json()["code"] == "over_budget" and told.json()["budget"] == "research-cpu"

    _budgets(budgets, 0.25, 2_000)  # raised: both fit
    passes.run_pass(driver.deps, "small")
    phases = {w["id"]: w["phase"] for w in pool_view(driver.deps, "small")["workloads"]}
    assert phases == {first: "running", second: "running"}
    assert why.why(driver.deps, second).get("budget") is None
