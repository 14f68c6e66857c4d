"""/metrics of a real installation (API, prefork workers, beat) read with Prometheus's own text
parser: the counters move with launches (one of them failing over), the state gauges match
what the API says, a killed pool process loses no count, the dashboard names only metrics
that are really served, and with CORRAL_LOG_FORMAT=json every log line is JSON and the lines
of a request's work carry its id."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from corral.services.observability.exposition import DIR_PREFIX
from corral.services.providers.registry import registered_clouds
from corral.services.queues import dispatch

from dashboards import dashboard_metric_names
from harness import REPO, System, free_port, wait_for

pytestmark = pytest.mark.integration

CLOUD = REPO / "tests" / "fixtures" / "localcloud" / "runtime.yaml"
DASHBOARD = REPO / "ops" / "grafana" / "corral-dashboard.json"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> tuple[set[str], Samples]:
    """The names served (families and samples) and the samples of one scrape, as Prometheus
    would parse it."""
    text = httpx.get(url, timeout=10).text
    names: set[str] = set()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        for s in family.samples:
            names.add(s.name)
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return names, samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def service(name: str, accelerators: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"cloud": "local"}
    resources.update({"accelerators": accelerators} if accelerators else {"instance_type": "cpu-2"})
    return {"name": name, "resources": resources}


def children_of(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(p) for p in found]


def test_metrics_move_with_launches(make_system: Callable[..., System]) -> None:
    system = make_system(CLOUD, env={"CORRAL_LOG_FORMAT": "json"})
    api = system.start_api()
    ports = {"schedule": free_port(), "provision": free_port()}
    for role, port in ports.items():
        system.start_worker(role, metrics_port=port)
    system.start_beat()
    worker_url = f"http://127.0.0.1:{ports['provision']}/metrics"
    wait_for(lambda: _answers(worker_url), 60, "the provisioning worker's /metrics")

    _, before = scrape(worker_url)
    assert total(before, "corral_attempts_total") == 0

    ids = [system.submit(service(f"svc-{i}")) for i in range(2)]
    ids.append(system.submit({**service("job"), "run": "echo done"}))
    views = [system.wait_state(i, {"RUNNING"}) for i in ids[:2]]
    system.wait_state(ids[2], {"SUCCEEDED"})
    # Last, as its quota error blocks the region's A100s for whatever comes after it.
    ids.append(system.submit(service("train", "A100:8")))  # east-a sold out, east-b quota
    views.append(system.wait_state(ids[3], {"RUNNING"}))
    trail = [(a["zone"], a["outcome"]) for a in views[2]["attempts"]]
    assert trail == [("lab-east-a", "capacity"), ("lab-east-b", "quota"), ("lab-west-a", "ok")]

    # The provisioning worker: counted where the attempts ended, summed over its processes.
    # A task is counted once its body returned, a job's machine once reconcile let it go: a
    # moment after the states the API shows.
    def settled() -> bool:
        _, now = scrape(worker_url)
        tasks = total(now, "corral_celery_tasks_total", task=dispatch.ADMIT, outcome="success")
        # One task per launch: a direct request is admitted on its cloud's provisioning queue
        # and that task runs its first attempt; the A100's failover walks its three zones of
        # one cloud in it (no broker hop per refused zone).
        return tasks >= 4 and total(now, "corral_instances_ended_total", state="TERMINATED") >= 1

    wait_for(settled, 30, "the worker's counts of the tasks and the job's machine")
    w_names, w = scrape(worker_url)
    assert total(w, "corral_attempts_total", outcome="ok") == 4
    assert total(w, "corral_attempts_total", region="lab-east", outcome="capacity") == 1
    assert total(w, "corral_attempts_total", region="lab-east", outcome="quota") == 1
    assert total(w, "corral_time_to_capacity_seconds_count", route="direct") == 4
    assert total(w, "corral_failover_depth_count", result="running") == 4
    assert total(w, "corral_failover_depth_sum", result="running") == 2  # the A100's two zones
    assert total(w, "corral_failover_depth_bucket", result="running", le="0.0") == 3
    assert total(w, "corral_celery_tasks_total", task=dispatch.ADMIT, outcome="success") >= 4
    assert total(w, "corral_celery_tasks_total", task=dispatch.ATTEMPT) == 0

    # The API: state from Redis, as the API itself reports it.
    a_names, a = scrape(f"{api}/metrics")
    assert total(a, "corral_store_up") == 1
    assert total(a, "corral_requests", state="RUNNING") == 3
    assert total(a, "corral_requests", state="SUCCEEDED") == 1
    assert total(a, "corral_requests_live", route="direct", state="RUNNING") == 3
    assert total(a, "corral_requests_created_total", route="direct") == 4
    assert total(a, "corral_instances", cloud="local", state="RUNNING") == 3
    prices = {
        t["name"]: t["price_usd_per_hour"]
        for t in yaml.safe_load(CLOUD.read_text())["instance_types"]
    }
    expected = sum(prices[i["instance_type"]] for v in views for i in v["instances"])
    assert total(a, "corral_cost_usd_per_hour", cloud="local") == pytest.approx(expected)
    assert total(a, "corral_blocked_scopes", scope="zone", outcome="capacity") == 1
    # Issue #46: the A100 quota family of the region, not the region.
    assert total(a, "corral_blocked_scopes", scope="quota_family", outcome="quota") == 1
    queues = {dict(lab)["queue"] for (n, lab) in a if n == "corral_queue_messages"}
    assert queues == {q for qs in dispatch.role_queues(registered_clouds()).values() for q in qs}
    lags = {dict(lab)["entry"]: v for (n, lab), v in a.items() if n == "corral_beat_lag_seconds"}
    assert {"reconcile", "pool-rebalance", "autoscale-tick"} <= set(lags)
    assert max(lags.values()) < 30

    # A pool process killed outright: nothing it counted is lost from the sum.
    main_pid = system.procs["provision-0"].pid
    victim = children_of(main_pid)[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in children_of(main_pid), 10, "the killed child to go")
    _, after_kill = scrape(worker_url)
    assert total(after_kill, "corral_attempts_total") >= total(w, "corral_attempts_total")
    # The worker's folder, named after it (as Corral finds the folders of dead workers).
    [folder] = Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}provision-{main_pid}-*")
    assert not list(folder.glob(f"gauge_live*_{victim}.db"))  # marked dead at the scrape
    assert list(folder.glob(f"counter_{victim}.db"))  # its counts kept

    _check_dashboard(a_names | w_names)
    _check_json_logs(system.home / "logs", ids)


def _check_dashboard(served: set[str]) -> None:
    missing = dashboard_metric_names(DASHBOARD) - served
    assert not missing, f"the dashboard names metrics nothing serves: {sorted(missing)}"


def _check_json_logs(logs: Path, request_ids: list[str]) -> None:
    seen: set[str] = set()
    for name in ("api.log", "provision-0.log", "schedule-0.log", "beat.log"):
        for line in (logs / name).read_text().splitlines():
            if not line.strip() or line.startswith("api listening on"):
                continue  # the API's address line on stdout is not a log line
            entry = json.loads(line)  # every log line is one JSON object
            assert {"ts", "level", "logger", "message"} <= set(entry)
            rid = entry.get("request_id")
            if entry.get("task") in (dispatch.ADMIT, dispatch.ATTEMPT):
                assert rid in request_ids, entry
            if rid is not None:
                seen.add(rid)
            for other in request_ids:  # a line that names a request carries its id
                if other in entry["message"] and "request_id" in entry:
                    assert rid == other, entry
    assert set(request_ids) <= seen


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
