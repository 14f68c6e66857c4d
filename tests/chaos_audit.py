"""The audit of test_chaos_kinds.py: what the system's records (Redis) and the local cloud's own
records and processes say of every kind of machine Corral holds (direct launches, a machine
pool, a Determined master's pools, a Ray cluster), counted per kind: work lost, launched twice,
machines leaked, assignments on machines no ledger holds for that work."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from corral.services.providers.base import TAG_MACHINE, TAG_POOL
from corral.services.providers.local.state import CloudState, InstanceRecord
from corral.services.runtime.pooled.machine_pool import placement_id
from corral.services.state.clusters import ClusterStore
from corral.services.state.machines import MachineTable
from corral.services.state.pool_store import det_ledgers, pool_ledgers
from corral.services.state.store import Store

from harness import processes_of
from local_processes import is_agent

POOL = "chaos-pool"  # the machine pool's name
DET = "determined"  # the master config's
CLUSTER = "chaos-ray"
PREFIX = "corral"
KINDS = ("direct", "pool", "determined", "cluster")
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"})
LIVE_INSTANCE = frozenset({"REQUESTED", "RUNNING"})


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
        self.machines = MachineTable(self.r, PREFIX)  # where each pooled machine is held
        self.clusters = ClusterStore(self.r, PREFIX)
        self.cloud = CloudState(redis.Redis.from_url(redis_url, decode_responses=True), PREFIX)

    def state(self, rid: str) -> str | None:
        req = self.store.get_request(rid)
        return None if req is None else str(req.state)

    def states(self, rids: list[str]) -> dict[str, str | None]:
        return {rid: self.state(rid) for rid in rids}


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
    # kind -> the provider ids its records hold as up (live or not)
    recorded: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in KINDS})
    replaced: dict[str, bool] = field(default_factory=dict)  # kind -> its killed machines gone
    details: list[str] = field(default_factory=list)

    def note(self, count: Counter[str], kind: str, text: str) -> None:
        count[kind] += 1
        self.details.append(f"{kind}: {text}")

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


def audit_until_clean(records: Records, home: Path, work: Work, timeout_s: float) -> Audit:
    """The audit, taken again (a second apart) until it is clean or ``timeout_s`` passed:
    what runs settles a heartbeat or a pass after the requests' states do."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            audit = audit_once(records, home, work)
        except redis.RedisError:  # restarting after the last strike
            if time.monotonic() > deadline + 60:
                raise
            time.sleep(1)
            continue
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
                audit.recorded[kind].add(str(inst.provider_id))
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
    rows = records.machines.get_many(
        [*(pool.machines if pool else ()), *(det.agents if det else ())]
    )
    if pool is not None:
        for m in pool.machines.values():
            aids: set[str] = set()
            w = pool.workloads.get(m.workload_id or "")
            if w is not None and w.started_at is not None and m.status != "reaping":
                aids.add(f"{placement_id(w.workload_id, w.started_at)}.{m.machine_id}")
            _ledger_machine(live, by_key, owners, held, audit, "pool", POOL, m, rows, aids)
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
            _ledger_machine(live, by_key, owners, held, audit, "determined", DET, a, rows, aids)
    for iid, rec in live.items():
        beat = records.cloud.last_beat(iid) or {}
        assigned, _ = records.cloud.assignments(iid)
        running = set(beat.get("assignments") or {}) | set(assigned)
        if not running:
            continue
        owner = owners.get(iid)
        if owner is None:
            kind = {POOL: "pool", DET: "determined"}.get(rec.tags.get(TAG_POOL, ""), "unknown")
            kind = held.get(iid, kind)
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
    rows: dict[str, Any],
    aids: set[str],
) -> None:
    key = machine.key
    mine = by_key.get((ledger, key), [])
    if len(mine) > 1:
        audit.note(audit.twice, kind, f"ledger machine {key} on {mine}")
    row = rows.get(key) if machine.status != "launching" else None
    pid = None if row is None else row.provider_id  # its row of the machine table
    if pid and pid in owners:
        audit.note(audit.twice, kind, f"{pid} held by {owners[pid][1]} and {key}")
    if pid:
        audit.recorded[kind].add(pid)
        if pid not in live and machine.status not in ("reaping", "retiring"):
            gone = f"ledger machine {key} ({machine.status}) is {pid}, which the cloud ended"
            audit.note(audit.lost, kind, gone)
    for iid in mine:
        if pid in (None, iid):
            owners[iid] = (kind, key, aids)
            held[iid] = kind
