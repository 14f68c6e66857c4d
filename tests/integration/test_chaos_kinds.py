"""Chaos over every kind of machine Corral holds, at once, on `corral up`: direct launches,
workloads of a machine pool (a higher-priority one preempting the newest low one, which
requeues), tasks of a Determined master's resource pools (the priority scheduler's preemption,
a zero-slot task on the aux pool) and the nodes of a Ray cluster file (scaled up by a demand,
then down to its min_workers), while the chaos monkey of test_chaos.py SIGKILLs or pauses every
control-plane process (each worker role and its pool processes, beat, the API) and
redis-server. Each round also SIGKILLs a machine of each kind (every process of it): a direct
launch's, a pool machine, a Determined agent, a cluster worker; its work is placed again.
A watch looks at the cloud twice a second all along for two live machines on one slot.

Once the monkey is done and everything settled, the audit reads Redis (requests and their
instances, the pool and Determined ledgers, the cluster record) and the local cloud's own view
(its instance records, its agents' heartbeats and assignments, the agent processes alive on
this machine), and counts per kind: lost (work that never reached the state it must end in),
launched twice (two live machines for one slot, or one workload's work running twice), leaked
(a live machine, or an agent process, no record holds) and stray assignments (work on a machine
its ledger does not hold, or does not place that work on). All must be 0. Then everything is
taken down and no agent process may be left.

The default run is short: one round (CORRAL_CHAOS_KINDS_ROUNDS) of CORRAL_CHAOS_KINDS_DIRECT=4
direct launches, a preemption in each pool, a pool machine killed and the cluster scaled to
CORRAL_CHAOS_KINDS_WORKERS=3 workers and back, beside a pool partition of
CORRAL_CHAOS_KINDS_POOL=3 low workloads, under CORRAL_CHAOS_KINDS_STRIKES=8 faults; ``make
chaos`` runs three larger rounds under 30 faults."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import redis
import yaml
from chaos_audit import (
    CLUSTER,
    DET,
    ENDED,
    KINDS,
    POOL,
    Audit,
    DoubleWatch,
    Records,
    Work,
    audit_once,
    audit_until_clean,
)

from corral.services.cli.pools_api_cmd import pool_body

from faults import Monkey, submit_patiently, wait_ready
from harness import REPO, Up, processes_of, wait_for
from local_processes import is_agent
from local_processes import processes_of as instance_processes

pytestmark = pytest.mark.integration

DIRECT = int(os.environ.get("CORRAL_CHAOS_KINDS_DIRECT", "4"))
POOL_SIZE = int(os.environ.get("CORRAL_CHAOS_KINDS_POOL", "3"))  # low workloads fill it
PEAK = int(os.environ.get("CORRAL_CHAOS_KINDS_WORKERS", "3"))  # Ray workers at the demand's peak
STRIKES = int(os.environ.get("CORRAL_CHAOS_KINDS_STRIKES", "8"))
ROUNDS = int(os.environ.get("CORRAL_CHAOS_KINDS_ROUNDS", "1"))  # of preemption, kill, scaling
SEED = int(os.environ.get("CORRAL_CHAOS_SEED", "13"))

FIXTURES = REPO / "tests" / "fixtures"
CLOUD = FIXTURES / "localcloud" / "chaos-kinds.yaml"
MASTER = FIXTURES / "pools" / "master-local.yaml"  # aux, compute (priority, 2 agents), spill
# Pools and clusters on the defaults would move in minutes: a workload runs 1 s before it may
# be preempted, beat's rebalancing pass every second, a pool machine's launch not heard of for
# 10 s is sent again; a killed worker's unacknowledged messages come back after 15 s. A machine
# that dies blocks its zone (the cloud said it is gone) and a cluster node type that could not
# launch cools down: 5 s each, not 3 min, or the machines this test kills in every zone close
# them all (a round of three found no zone for 2 min: a direct launch stuck WAITING, the
# cluster's worker type cooled down with not even its min_workers up).
TIMERS = {
    "BLOCKED_TTL_S": "5",
    "AUTOSCALE_COOLDOWN_S": "5",
    "MIN_RUNTIME_S": "1",
    # CORRAL_CHAOS_KINDS_REBALANCE_S=30 (as shipped): the pools' queues move without beat's
    # rebalancing, on what their passes and reconcile's wakes notice (docs/operations.md).
    "POOL_REBALANCE_INTERVAL_S": os.environ.get("CORRAL_CHAOS_KINDS_REBALANCE_S", "1"),
    "POOL_MACHINE_LAUNCH_RETRY_S": "10",
    "VISIBILITY_TIMEOUT_S": "15",
    "UNACKED_RESTORE_INTERVAL_S": "1",
}
T = TypeVar("T")


def pool_file(tmp: Path) -> Path:
    """One machine type of cpu-2 machines, a partition of POOL_SIZE."""
    doc = {
        "kind": "ANYSCALE_MANAGED",
        "machine_types": [
            {
                "machine_type": "cpu",
                "launch_templates": [{"instance_type": "cpu-2"}],
                "partitions": [{"name": "shared", "size": POOL_SIZE}],
            }
        ],
    }
    path = tmp / "chaos-pool.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


FROM_POOL = {"cloud_deployment": {"machine_pool": POOL}}
COMPUTE = {"worker_nodes": [{"instance_type": "cpu", "flags": FROM_POOL}]}

CLUSTER_FILE = {
    "cluster_name": CLUSTER,
    "max_workers": 12,
    "idle_timeout_minutes": 0.05,  # idle workers go after 3 s
    "provider": {"type": "aws", "region": "us-west-2"},
    "available_node_types": {
        "head": {"node_config": {"InstanceType": "m5.large"}, "max_workers": 0},
        "worker": {
            "node_config": {"InstanceType": "m5.large"},
            "resources": {"Custom1": 1},
            "min_workers": 1,
            "max_workers": 12,
        },
    },
    "head_node_type": "head",
}


def patiently(call: Callable[[], T], what: str, timeout_s: float = 120) -> T:
    """``call()`` until it returns without an HTTP or Redis error (the API or Redis may be
    down or restarting): its result."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return call()
        except (httpx.HTTPError, redis.RedisError, Retry) as exc:
            last = exc
            time.sleep(0.5)
    pytest.fail(f"gave up on {what} after {timeout_s} s: {last!r}")


class Retry(Exception):
    """An answer to ask again for (the API said 5xx, or not yet)."""


@dataclass
class Api:
    url: str
    headers: dict[str, str]

    def send(self, method: str, path: str, body: Any = None) -> Any:
        resp = httpx.request(
            method, f"{self.url}{path}", json=body, headers=self.headers, timeout=60
        )
        if resp.status_code >= 500:
            raise Retry(f"{method} {path}: HTTP {resp.status_code}")
        assert resp.status_code < 400, (method, path, resp.status_code, resp.text[:300])
        return resp.json()

    def patient(self, method: str, path: str, body: Any = None) -> Any:
        return patiently(lambda: self.send(method, path, body), f"{method} {path}")

    def submit(self, name: str, task: dict[str, Any]) -> str:
        rid = submit_patiently(self.url, self.headers, name, {**task, "name": name})
        assert rid, f"the API never took {name}"
        return rid


def test_chaos_over_every_kind_of_machine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = {"CORRAL_CLOUDS": '["local"]'}
    up = Up(home, CLOUD, timers=TIMERS, settings=settings)
    rng = random.Random(SEED)
    work = Work()
    started = time.monotonic()
    try:
        url, headers = wait_ready(up)
        api = Api(url, headers)
        records = Records((home / "redis-url").read_text().strip())
        _register(api, tmp_path)
        # The cluster's head and its min_workers up before the chaos starts.
        _wait_cluster(api, workers=1, timeout_s=90)
        ready_s = time.monotonic() - started
        with DoubleWatch(records.url) as doubles:
            with Monkey(up, rng, STRIKES) as monkey:
                killed = _under_chaos(api, records, work)
            faults = dict(monkey.faults)
            _wait_settled(api, records, work)
        audit = audit_until_clean(records, home, work, timeout_s=30)
        audit.replaced = {k: not set(killed[k]) & audit.recorded[k] for k in KINDS}
        for line in audit.lines():
            print(line, flush=True)
        print(
            f"launched twice at any moment ({doubles.looks} looks at the cloud): "
            f"{ {k: doubles.count(k) for k in KINDS} } {doubles.seen}",
            flush=True,
        )
        print(
            f"chaos over every kind: {sum(faults.values())} faults {faults}; ready in "
            f"{ready_s:.0f} s, settled at {time.monotonic() - started:.0f} s",
            flush=True,
        )
        assert audit.clean(), "\n".join(audit.lines() + audit.details)
        assert doubles.looks > 10 and not doubles.seen, doubles.seen
        assert audit.preempted["pool"] and audit.preempted["determined"], audit.preempted
        assert all(audit.replaced.values()), (audit.replaced, killed)
        # The audit saw every machine its records hold (the Determined agents: one per low
        # task; the aux agent may have been reaped), and it sees work put where no ledger
        # placed it.
        machines = {k: audit.machines[k] for k in ("direct", "pool", "cluster")}
        want = {"direct": DIRECT * ROUNDS, "pool": POOL_SIZE, "cluster": 2}
        assert machines == want, audit.machines
        assert 2 <= audit.machines["determined"] <= 3, audit.machines
        _probe_stray_assignment(records, home, work, audit)
        left = _take_all_down(api, records, home)
        print(f"after everything was taken down: {len(left)} agent processes left", flush=True)
        assert not left, left
    finally:
        assert up.stop() == 0, up.output()[-3000:]


def _register(api: Api, tmp: Path) -> None:
    """`corral pools apply` the machine pool and the master config, `corral cluster up` the
    cluster file (`--cloud local`), before the chaos."""
    api.patient("POST", "/v1/pools", pool_body(pool_file(tmp), POOL, None))
    api.patient("POST", "/v1/pools", pool_body(MASTER, DET, None))
    body = {
        "cluster_yaml": yaml.safe_dump(CLUSTER_FILE),
        "file_name": "chaos-ray.yaml",
        "cloud": "local",
        "name": None,
        "mounts": None,
    }
    api.patient("POST", "/v1/clusters", body)


def _demand(api: Api, workers: int) -> None:
    text = f"bundles: [{{resources: {{Custom1: 1}}, count: {workers}}}]\n" if workers else ""
    body = {"demand_yaml": text, "file_name": "demand.yaml"}
    api.patient("PUT", f"/v1/clusters/{CLUSTER}/demand", body)


def _wait_cluster(api: Api, workers: int, timeout_s: float) -> None:
    """Wait until the head and exactly ``workers`` workers run, none pending or leaving."""
    seen: list[Any] = []

    def reached() -> bool:
        with contextlib.suppress(httpx.HTTPError, Retry):
            view = api.send("GET", f"/v1/clusters/{CLUSTER}")
            seen[:] = [view["nodes"], view.get("cooldowns"), view.get("decisions", [])[-4:]]
            kinds = Counter(n["node_type"] for n in view["nodes"] if n["state"] == "RUNNING")
            states = {n["state"] for n in view["nodes"]}
            return kinds == Counter({"head": 1, "worker": workers}) and states == {"RUNNING"}
        return False

    with contextlib.suppress(pytest.fail.Exception):
        wait_for(reached, timeout_s, f"the cluster at {workers} workers")
        return
    pytest.fail(f"the cluster never ran 1 head and {workers} workers: {seen}")


def _wait_states(records: Records, want: dict[str, str], timeout_s: float) -> None:
    """Wait until every request is in the state given (read from Redis)."""
    seen: dict[str, str | None] = {}
    since = time.monotonic()
    reached_at: dict[str, float] = {}

    def reached() -> bool:
        with contextlib.suppress(redis.RedisError):
            seen.update(records.states(list(want)))
            for rid, state in want.items():
                if seen.get(rid) == state:
                    reached_at.setdefault(rid, time.monotonic() - since)
            return all(seen.get(rid) == state for rid, state in want.items())
        return False

    with contextlib.suppress(pytest.fail.Exception):
        wait_for(reached, timeout_s, "the requests' states")
        slow = sorted(reached_at, key=reached_at.__getitem__)[-3:]
        named = [(records.store.get_request(rid), reached_at[rid]) for rid in slow]
        times = ", ".join(f"{r.task.get('name')} {at:.0f} s" for r, at in named if r)
        print(f"  {len(want)} requests in their states; the slowest: {times}")
        for req, at in named:
            if req is not None and at > 30:  # what kept it (the report's figures come with it)
                for event in records.store.events(req.id)[-12:]:
                    print(f"    {req.task.get('name')} {event.at % 1000:7.1f} {event.text[:160]}")
        return
    off = {rid: (seen.get(rid), state) for rid, state in want.items() if seen.get(rid) != state}
    pytest.fail(f"requests not in their state after {timeout_s} s (seen, wanted): {off}")


def _under_chaos(api: Api, records: Records, work: Work) -> list[str]:
    """Everything the kinds do while the monkey strikes: the low work submitted, then ROUNDS
    rounds of direct launches, preemption, a pool machine killed and the cluster scaled up and
    down. The provider ids of the pool machines killed."""
    job = "sleep 600"
    low = {"compute_config": COMPUTE, "priority": 0, "run": job}
    submits: list[tuple[str, str, dict[str, Any], str]] = []
    submits += [("pool", f"pool-low-{i}", low, "RUNNING") for i in range(POOL_SIZE)]
    det_low = {"resources": {"slots": 2, "priority": 50}, "run": job}
    submits += [("determined", f"det-low-{i}", det_low, "RUNNING") for i in range(2)]
    aux = {"resources": {"slots": 0}, "run": "echo board"}
    submits += [("determined", "det-aux", aux, "SUCCEEDED")]
    ids = _submit_all(api, work, submits)
    lows = [rid for (_, name, _, _), rid in zip(submits, ids, strict=True) if "low" in name]
    pool_lows = [rid for rid in lows if rid in work.expect["pool"]]
    det_lows = [rid for rid in lows if rid in work.expect["determined"]]
    killed: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for rnd in range(ROUNDS):
        with concurrent.futures.ThreadPoolExecutor(2) as threads:
            scaled = threads.submit(_demand, api, PEAK)
            direct = _round(api, records, work, rnd, lows)
            scaled.result()
        # A machine of each kind dies (every process of it, SIGKILL): a direct launch's, a
        # pool machine, a Determined agent, a cluster worker. Each one's work is placed again.
        killed["pool"].append(_kill(_pool_machine_of(records, pool_lows[rnd % len(pool_lows)])))
        killed["determined"].append(_kill(_agent_of(records, det_lows[rnd % len(det_lows)])))
        killed["direct"].append(_kill(_machine_of(records, direct[0])))
        _wait_cluster(api, workers=PEAK, timeout_s=150)
        workers = [n["id"] for n in _cluster_nodes(api) if n["node_type"] == "worker"]
        killed["cluster"].append(_kill(_machine_of(records, workers[-1])))
        _demand(api, 0)  # scaled down: idle workers go, min_workers (1) stays
        if rnd + 1 < ROUNDS:
            _wait_cluster(api, workers=1, timeout_s=90)
    return killed


def _round(api: Api, records: Records, work: Work, rnd: int, lows: list[str]) -> list[str]:
    """Direct launches, and once the low work runs, higher-priority work: a pool workload
    that preempts when the partition is full, and a Determined task (lower number wins
    there); each ends after a few seconds, and the work it preempted runs again."""
    service = {"resources": {"cloud": "local", "instance_type": "cpu-2"}}
    direct = [("direct", f"direct-{rnd}-{i}", service, "RUNNING") for i in range(DIRECT)]
    direct_ids = _submit_all(api, work, direct)
    _wait_states(records, dict.fromkeys(lows, "RUNNING"), timeout_s=150)
    time.sleep(1.2)  # past min_runtime_s: the low work may be preempted
    high = {
        "compute_config": COMPUTE,
        "priority": 10,
        "run": "sleep 4",
        "scheduling": {"on_full": "preempt"},
    }
    det_high = {"resources": {"slots": 2, "priority": 10}, "run": "sleep 4"}
    highs = [
        ("pool", f"pool-high-{rnd}", high, "SUCCEEDED"),
        ("determined", f"det-high-{rnd}", det_high, "SUCCEEDED"),
    ]
    _submit_all(api, work, highs)
    return direct_ids


def _submit_all(
    api: Api, work: Work, submits: list[tuple[str, str, dict[str, Any], str]]
) -> list[str]:
    """Submit (kind, name, task, state it must end in) six at a time; their ids."""
    with concurrent.futures.ThreadPoolExecutor(6) as threads:
        ids = list(threads.map(lambda s: api.submit(s[1], s[2]), submits))
    for (kind, _, _, state), rid in zip(submits, ids, strict=True):
        work.add(kind, rid, state)
    return ids


def _pool_machine_of(records: Records, rid: str) -> str:
    """The provider id of the pool machine the workload runs on, once it runs on one."""

    def machine() -> str:
        ledger = records.pools.get(POOL)
        mine = [m for m in ledger.machines_of(rid) if m.status != "launching"] if ledger else []
        rows = records.machines.get_many(m.machine_id for m in mine)  # where each one is
        found = [row.provider_id for row in rows.values() if row.provider_id]
        if not found:
            raise Retry(f"{rid} has no machine up")
        return found[0]

    return patiently(machine, f"the machine of {rid}")


def _agent_of(records: Records, rid: str) -> str:
    """The provider id of the Determined agent the task runs on, once it runs on one."""

    def agent() -> str:
        ledger = records.dets.get(DET)
        task = ledger.tasks.get(rid) if ledger is not None else None
        for alloc in task.allocations if task is not None else ():
            found = ledger.agents.get(alloc.agent_id) if ledger is not None else None
            row = records.machines.get(alloc.agent_id)  # its row of the machine table
            if found is not None and found.status != "launching" and row and row.provider_id:
                return row.provider_id
        raise Retry(f"{rid} runs on no agent")

    return patiently(agent, f"the agent of {rid}")


def _machine_of(records: Records, rid: str) -> str:
    """The provider id of the machine a direct request (or a cluster node) runs on."""

    def machine() -> str:
        for inst in records.store.list_instances(request_id=rid):
            if str(inst.state) == "RUNNING" and inst.provider_id:
                return inst.provider_id
        raise Retry(f"{rid} runs on no machine")

    return patiently(machine, f"the machine of {rid}")


def _kill(provider_id: str) -> str:
    """SIGKILL every process of a local machine (its agent and its work): it died."""
    for pid in instance_processes(provider_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return provider_id


def _cluster_nodes(api: Api) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = api.patient("GET", f"/v1/clusters/{CLUSTER}")["nodes"]
    return nodes


def _wait_settled(api: Api, records: Records, work: Work) -> None:
    """After the chaos: every request in the state it must end in, the cluster back at its
    min_workers."""
    want = {rid: state for kind in KINDS for rid, state in work.expect[kind].items()}
    _wait_states(records, want, timeout_s=180)
    _wait_cluster(api, workers=1, timeout_s=90)
    for node in _cluster_nodes(api):
        work.add("cluster", node["id"], "RUNNING")


def _probe_stray_assignment(records: Records, home: Path, work: Work, clean: Audit) -> None:
    """An assignment no ledger made, put by hand on a direct launch's machine (not on a pool
    machine: the pool's next sync withdraws work its ledger did not place, which raced the
    probe): the audit counts it, then it is withdrawn."""
    iid = next(iid for iid, kind in clean.held.items() if kind == "direct")
    records.cloud.put_assignment(iid, {"id": "chaos-probe", "run": "true"})
    try:
        audit = audit_once(records, home, work)
    finally:
        records.cloud.drop_assignment(iid, "chaos-probe")
    assert audit.stray["direct"] == 1, audit.details


def _take_all_down(api: Api, records: Records, home: Path) -> list[int]:
    """Every request ended, the cluster down, both pools deleted; the agent processes left
    once the local cloud had time to stop them all."""
    with contextlib.suppress(Retry, AssertionError):
        api.patient("DELETE", f"/v1/clusters/{CLUSTER}")
    for req in api.patient("GET", "/v1/requests?limit=1000")["requests"]:
        if req["state"] not in ENDED:
            with contextlib.suppress(AssertionError):
                api.send("POST", f"/v1/requests/{req['id']}/terminate")

    def pools_gone() -> bool:
        for name in (POOL, DET):
            with contextlib.suppress(AssertionError, httpx.HTTPError, Retry):
                api.send("DELETE", f"/v1/pools/{name}")
        return not api.send("GET", "/v1/pools")["pools"]

    wait_for(pools_gone, 60, "the pools to be deleted")

    def agents() -> list[int]:
        return [p for p in processes_of(home) if is_agent(Path(f"/proc/{p}"))]

    with contextlib.suppress(pytest.fail.Exception):
        wait_for(lambda: not agents(), 60, "every machine to be gone")
    return agents()
