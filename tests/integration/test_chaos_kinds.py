"""Chaos over every kind of machine Corral holds, at once, on `corral up`: direct launches,
workloads of a machine pool (a higher-priority one preempting the newest low one, which
requeues, and a machine killed so its workload is placed on a new one), tasks of a Determined
master's resource pools (the priority scheduler's preemption, a zero-slot task on the aux pool)
and the nodes of a Ray cluster file (scaled up by a demand, then down to its min_workers),
while the chaos monkey of test_chaos.py SIGKILLs or pauses every control-plane process (each
worker role and its pool processes, beat, the API) and redis-server.

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
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import redis
import yaml

from corral.services.cli.pools_api_cmd import pool_body
from corral.services.providers.base import TAG_MACHINE, TAG_POOL
from corral.services.providers.local.state import CloudState, InstanceRecord
from corral.services.runtime.pooled.machine_pool import placement_id
from corral.services.state.clusters import ClusterStore
from corral.services.state.pool_store import det_ledgers, pool_ledgers
from corral.services.state.store import Store

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
POOL = "chaos-pool"
DET = "determined"
CLUSTER = "chaos-ray"
PREFIX = "corral"
# Pools and clusters on the defaults would move in minutes: a workload runs 1 s before it may
# be preempted, beat's rebalancing pass every second, a pool machine's launch not heard of for
# 10 s is sent again; a killed worker's unacknowledged messages come back after 15 s.
TIMERS = {
    "MIN_RUNTIME_S": "1",
    "POOL_REBALANCE_INTERVAL_S": "1",
    "POOL_MACHINE_LAUNCH_RETRY_S": "10",
    "VISIBILITY_TIMEOUT_S": "15",
    "UNACKED_RESTORE_INTERVAL_S": "1",
}
KINDS = ("direct", "pool", "determined", "cluster")
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"})
LIVE_INSTANCE = frozenset({"REQUESTED", "RUNNING"})

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


@dataclass
class Work:
    """What the test asked for, by kind, with the state each must end in."""

    expect: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})

    def add(self, kind: str, rid: str, state: str) -> str:
        self.expect[kind][rid] = state
        return rid


class Records:
    """The system's records and the local cloud's, read straight from its Redis."""

    def __init__(self, redis_url: str) -> None:
        self.url = redis_url
        self.r = redis.Redis.from_url(redis_url, decode_responses=False)
        self.store = Store(self.r, prefix=PREFIX)
        self.pools = pool_ledgers(self.r, PREFIX)
        self.dets = det_ledgers(self.r, PREFIX)
        self.clusters = ClusterStore(self.r, PREFIX)
        self.cloud = CloudState(redis.Redis.from_url(redis_url, decode_responses=True), PREFIX)

    def state(self, rid: str) -> str | None:
        req = self.store.get_request(rid)
        return None if req is None else str(req.state)

    def states(self, rids: list[str]) -> dict[str, str | None]:
        return {rid: self.state(rid) for rid in rids}


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
        audit = _audit_until_clean(records, home, work, timeout_s=30)
        audit.replaced = {k: not set(killed[k]) & set(audit.held_by(k)) for k in KINDS}
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
        _probe_stray_assignment(records, home, work)
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
            seen[:] = view["nodes"]
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
        mine = ledger.machines_of(rid) if ledger is not None else []
        found = [m.provider_id for m in mine if m.provider_id]
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
            if found is not None and found.provider_id:
                return found.provider_id
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


class DoubleWatch:
    """Looks at the local cloud's records twice a second all through the chaos and keeps
    every moment two live machines held one slot (a pool's machine id, a Determined agent's,
    a request's, for requests of one node): launched twice, if only for a while. Live: not
    ended, not being terminated, and its agent process alive (or not started yet)."""

    def __init__(self, redis_url: str) -> None:
        self.r = redis.Redis.from_url(redis_url, decode_responses=True)
        self.seen: dict[str, set[str]] = {}  # slot -> the machines seen on it at once
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DoubleWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(redis.RedisError):
                self._look()

    def _look(self) -> None:
        ids = sorted(self.r.smembers(f"{PREFIX}:local:instances"))
        pipe = self.r.pipeline(transaction=False)
        for iid in ids:
            pipe.hgetall(f"{PREFIX}:local:instance:{iid}")
        slots: dict[str, set[str]] = {}
        for iid, raw in zip(ids, pipe.execute(), strict=True):
            if not raw or raw.get("ended_at") or raw.get("state") == "terminating":
                continue
            if raw.get("pid") and not _alive(int(raw["pid"])):
                continue
            tags = json.loads(raw.get("tags") or "{}")
            slot = (
                f"{tags[TAG_POOL]}/{tags.get(TAG_MACHINE)}"
                if TAG_POOL in tags
                else f"request {raw.get('request_id')}"
            )
            slots.setdefault(slot, set()).add(iid)
        for slot, machines in slots.items():
            if len(machines) > 1:
                self.seen.setdefault(slot, set()).update(machines)
        self.looks += 1

    def count(self, kind: str) -> int:
        """Slots of this kind seen with two live machines at once."""
        prefix = {"pool": f"{POOL}/", "determined": f"{DET}/"}.get(kind, "request ")
        return sum(1 for slot in self.seen if slot.startswith(prefix))


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


# ----------------------------------------------------------------------------------------------
# The audit


@dataclass
class Audit:
    """The counts per kind, and what each count is made of."""

    requests: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    twice: Counter[str] = field(default_factory=Counter)
    leaked: Counter[str] = field(default_factory=Counter)
    stray: Counter[str] = field(default_factory=Counter)  # assignments on machines not held
    machines: Counter[str] = field(default_factory=Counter)  # live machines, by holder's kind
    preempted: Counter[str] = field(default_factory=Counter)
    held: dict[str, str] = field(default_factory=dict)  # live provider id -> its holder's kind
    replaced: dict[str, bool] = field(default_factory=dict)  # kind -> its killed machines gone
    details: list[str] = field(default_factory=list)

    def note(self, count: Counter[str], kind: str, text: str) -> None:
        count[kind] += 1
        self.details.append(f"{kind}: {text}")

    def held_by(self, kind: str) -> list[str]:
        return [iid for iid, k in self.held.items() if k == kind]

    def clean(self) -> bool:
        return not (+self.lost or +self.twice or +self.leaked or +self.stray)

    def lines(self) -> list[str]:
        return [
            f"{kind}: {self.requests[kind]} requests, {self.machines[kind]} machines live, "
            f"lost {self.lost[kind]}, launched twice {self.twice[kind]}, leaked "
            f"{self.leaked[kind]}, assignments on machines not held {self.stray[kind]}"
            f" (preempted {self.preempted[kind]})"
            for kind in (*KINDS, "unknown")
            if kind != "unknown" or self.leaked[kind] or self.stray[kind]
        ]


def _audit_until_clean(records: Records, home: Path, work: Work, timeout_s: float) -> Audit:
    """The audit, taken again (a second apart) until it is clean or ``timeout_s`` passed:
    what runs settles a heartbeat or a pass after the requests' states do."""
    deadline = time.monotonic() + timeout_s
    while True:
        audit = patiently(lambda: audit_once(records, home, work), "the audit")
        if audit.clean() or time.monotonic() > deadline:
            return audit
        time.sleep(1)


def audit_once(records: Records, home: Path, work: Work) -> Audit:
    audit = Audit()
    live = _live_machines(records, home, audit)
    held = audit.held  # provider id -> the kind whose record holds it
    _audit_requests(records, work, live, held, audit)
    _audit_pools(records, work, live, held, audit)
    for iid, rec in live.items():
        kind = held.get(iid)
        if kind is None:
            kind = "pool" if rec.tags.get(TAG_POOL) == POOL else "unknown"
            kind = "determined" if rec.tags.get(TAG_POOL) == DET else kind
            audit.note(audit.leaked, kind, f"machine {iid} ({rec.request_id}) held by no record")
        else:
            audit.machines[kind] += 1
    return audit


def _live_machines(records: Records, home: Path, audit: Audit) -> dict[str, InstanceRecord]:
    """The local cloud's live machines: its records not ended. An agent process alive whose
    record ended, or that no record names, is a leak of its own."""
    cloud = records.cloud
    recs = {iid: cloud.record(iid) for iid in cloud.instance_ids()}
    agents = {pid for pid in processes_of(home) if is_agent(Path(f"/proc/{pid}"))}
    by_pid = {rec.pid: rec for rec in recs.values() if rec is not None and rec.pid}
    for pid in agents:
        rec = by_pid.get(pid)
        if rec is None:
            audit.note(audit.leaked, "unknown", f"agent process {pid} no record names")
        elif rec.ended:
            audit.note(audit.leaked, "unknown", f"agent process {pid} of ended {rec.id}")
    return {iid: rec for iid, rec in recs.items() if rec is not None and not rec.ended}


def _audit_requests(
    records: Records,
    work: Work,
    live: dict[str, InstanceRecord],
    held: dict[str, str],
    audit: Audit,
) -> None:
    """Direct launches and cluster nodes: each request in its state on exactly one live
    machine of its own; pooled work: in its state (its machines are the ledgers')."""
    by_request: dict[str, list[str]] = {}
    for iid, rec in live.items():
        if TAG_POOL not in rec.tags:
            by_request.setdefault(rec.request_id, []).append(iid)
    cluster = records.clusters.get(CLUSTER)
    nodes = {n.request_id: n for n in cluster.live_nodes()} if cluster is not None else {}
    for kind in KINDS:
        for rid, state in work.expect[kind].items():
            audit.requests[kind] += 1
            req = records.store.get_request(rid)
            if req is None or str(req.state) != state:
                audit.note(audit.lost, kind, f"{rid} is {req and req.state}, not {state}")
                continue
            if any("preempted by" in (m.reason or "") for m in req.history):
                audit.preempted[kind] += 1
            if kind in ("pool", "determined"):
                continue
            mine = by_request.get(rid, [])
            instances = records.store.list_instances(request_id=rid)
            up = [i for i in instances if str(i.state) in LIVE_INSTANCE]
            if len(mine) > 1 or len(up) > 1:
                audit.note(audit.twice, kind, f"{rid}: machines {mine}, records {len(up)} live")
            elif not mine or not up or up[0].provider_id != mine[0]:
                audit.note(audit.lost, kind, f"{rid} runs on no machine ({mine}, {up})")
            if kind == "cluster" and rid not in nodes:
                audit.note(audit.leaked, kind, f"node {rid} runs, its cluster holds it not")
            for inst in up:
                if inst.provider_id in live:
                    held[inst.provider_id] = kind
    for iid, rec in live.items():  # another request's live machine (an earlier, cancelled one)
        if TAG_POOL in rec.tags or iid in held:
            continue
        req = records.store.get_request(rec.request_id)
        if req is not None and str(req.state) not in ENDED:
            ups = records.store.list_instances(request_id=rec.request_id)
            if any(i.provider_id == iid and str(i.state) in LIVE_INSTANCE for i in ups):
                held[iid] = "cluster" if rec.request_id in nodes else "direct"


def _audit_pools(
    records: Records,
    work: Work,
    live: dict[str, InstanceRecord],
    held: dict[str, str],
    audit: Audit,
) -> None:
    """The machine pool's and the master's ledgers against the cloud: every ledger machine on
    at most one live machine (none twice), every running workload on as many machines as it
    has nodes, and every assignment a machine runs is the work its ledger places there."""
    pool = records.pools.get(POOL)
    det = records.dets.get(DET)
    owners: dict[str, tuple[str, str, set[str]]] = {}  # provider id -> (kind, key, aids)
    by_key: dict[tuple[str, str], list[str]] = {}
    for iid, rec in live.items():
        if rec.tags.get(TAG_POOL) in (POOL, DET):
            by_key.setdefault((rec.tags[TAG_POOL], rec.tags.get(TAG_MACHINE, "")), []).append(iid)
    if pool is not None:
        for m in pool.machines.values():
            aids: set[str] = set()
            w = pool.workloads.get(m.workload_id or "")
            if w is not None and w.started_at is not None and m.status != "reaping":
                aids.add(f"{placement_id(w.workload_id, w.started_at)}.{m.machine_id}")
            _ledger_machine(live, by_key, owners, held, audit, "pool", POOL, m, aids)
        for rid, state in work.expect["pool"].items():
            w = pool.workloads.get(rid)
            if state == "RUNNING" and (w is None or len(pool.machines_of(rid)) != w.num_nodes):
                got = len(pool.machines_of(rid))
                audit.note(audit.lost, "pool", f"{rid} runs on {got} machines")
    if det is not None:
        for a in det.agents.values():
            aids = {
                f"{t.task_id}.{int((t.started_at or 0) * 1000)}.{a.agent_id}"
                for t in det.tasks.values()
                if any(al.agent_id == a.agent_id for al in t.allocations)
            }
            _ledger_machine(live, by_key, owners, held, audit, "determined", DET, a, aids)
    for iid, rec in live.items():
        beat = records.cloud.last_beat(iid) or {}
        assigned, _ = records.cloud.assignments(iid)
        running = set(beat.get("assignments") or {}) | set(assigned)
        if not running:
            continue
        owner = owners.get(iid)
        if owner is None:
            kind = {POOL: "pool", DET: "determined"}.get(rec.tags.get(TAG_POOL, ""), "unknown")
            audit.note(audit.stray, kind, f"{iid} runs {sorted(running)}, held by no ledger")
            continue
        kind, key, expected = owner
        if running - expected:
            audit.note(audit.stray, kind, f"{iid} ({key}) runs {sorted(running - expected)}")
        if kind == "pool" and len(running) > 1:
            audit.note(audit.twice, kind, f"{iid} ({key}) runs {sorted(running)} at once")


def _ledger_machine(
    live: dict[str, InstanceRecord],
    by_key: dict[tuple[str, str], list[str]],
    owners: dict[str, tuple[str, str, set[str]]],
    held: dict[str, str],
    audit: Audit,
    kind: str,
    ledger: str,
    machine: Any,
    aids: set[str],
) -> None:
    key = machine.key
    mine = by_key.get((ledger, key), [])
    if len(mine) > 1:
        audit.note(audit.twice, kind, f"ledger machine {key} on {mine}")
    pid = machine.provider_id
    if pid and pid in owners:
        audit.note(audit.twice, kind, f"{pid} held by {owners[pid][1]} and {key}")
    for iid in mine:
        if pid in (None, iid):
            owners[iid] = (kind, key, aids)
            held[iid] = kind


def _probe_stray_assignment(records: Records, home: Path, work: Work) -> None:
    """An assignment no ledger made, put on a pool machine by hand: the audit counts it (a
    stray, and a second piece of work on the machine), then it is withdrawn."""
    ledger = records.pools.get(POOL)
    assert ledger is not None
    iid = next(m.provider_id for m in ledger.machines.values() if m.provider_id)
    assert iid is not None
    records.cloud.put_assignment(iid, {"id": "chaos-probe", "run": "true"})
    try:
        audit = audit_once(records, home, work)
    finally:
        records.cloud.drop_assignment(iid, "chaos-probe")
    assert audit.stray["pool"] == 1 and audit.twice["pool"] == 1, audit.details


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
