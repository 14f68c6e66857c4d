"""What the fault tests share: a `corral up` ready for load, launches through its API, the
processes it supervises (found by parent pid, never by name), and the account of a round of
launches (lost, failed, launched twice, leaked, settle time)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from harness import Up, wait_for

ROLES = ("schedule", "provision", "autoscale")
SERVICE = {"resources": {"cloud": "local", "instance_type": "cpu-2"}}
# A request FAILED for one of these reasons failed because of the control plane, not the cloud.
CONTROL_PLANE_REASONS = ("InstanceLost", "InstanceSilent", "timeout", "unreachable", "lost")
# What a chaos monkey strikes: a worker of each role (its whole process group), one process of
# a worker's pool, beat, the API, redis-server (SIGKILL), or Redis paused (SIGSTOP, SIGCONT).
VICTIMS = ("schedule", "provision", "autoscale", "pool-process", "beat", "api", "redis", "pause")


def children_of(pid: int) -> dict[int, str]:
    """The direct children of ``pid``: pid -> command line (words joined by spaces)."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(proc.name)] = cmd
    return out


def supervised(up: Up, what: str, timeout_s: float = 30) -> int:
    """The pid of the process `corral up` runs for ``what`` (a word of its command line:
    ``redis-server``, ``schedule``, ``beat``, ``api``...), waiting for it to be there."""
    found: list[int] = []

    def there() -> bool:
        found[:] = [
            pid
            for pid, cmd in children_of(up.proc.pid).items()
            if any(w in (what, f"{what}@%h") or w.endswith(f"/{what}") for w in cmd.split())
            or f" {what}-" in f" {cmd}"  # a worker's node name: -n provision-<pid>@%h
        ]
        return bool(found)

    wait_for(there, timeout_s, f"`corral up` to run {what}")
    return found[0]


class Monkey:
    """Kills or pauses one of `corral up`'s processes every 1-2.5 s, each kind in turn (in a
    random order), ``strikes`` times in all (test_chaos.py, test_chaos_kinds.py). On exit it
    waits for the last strikes to land, even after the work under test settled."""

    def __init__(self, up: Up, rng: random.Random, strikes: int) -> None:
        self.up, self.rng, self.strikes = up, rng, strikes
        self.done = threading.Event()
        self.faults: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monkey:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.thread.join(self.strikes * 4)
        self.done.set()
        self.thread.join(30)

    def _run(self) -> None:
        order: list[str] = []
        while sum(self.faults.values()) < self.strikes and not self.done.wait(
            self.rng.uniform(1, 2.5)
        ):
            if not order:  # every kind of fault once, in a random order, then again
                order = self.rng.sample(VICTIMS, len(VICTIMS))
            victim = order.pop()
            with contextlib.suppress(ProcessLookupError, AssertionError, pytest.fail.Exception):
                self._strike(victim)
                self.faults[victim] += 1

    def _find(self, what: str) -> int:
        return supervised(self.up, what, timeout_s=5)  # restarting: strike something else

    def _strike(self, victim: str) -> None:
        if victim == "pause":
            pid = self._find("redis-server")
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(self.rng.uniform(1.0, 3.0))
            finally:
                os.kill(pid, signal.SIGCONT)
        elif victim == "pool-process":
            worker = self._find(self.rng.choice(("schedule", "provision")))
            pool = list(children_of(worker))
            if not pool:
                raise ProcessLookupError
            os.kill(self.rng.choice(pool), signal.SIGKILL)
        elif victim == "redis":
            os.kill(self._find("redis-server"), signal.SIGKILL)
        else:
            os.killpg(self._find(victim), signal.SIGKILL)


def wait_ready(up: Up, timeout_s: float = 120) -> tuple[str, dict[str, str]]:
    """Wait until every process of `corral up` is serving: the API answers, the three workers
    said ready, beat holds its lock. Returns (API URL, auth headers)."""
    url = up.wait_line(r"\[up\] api\s+(http://127\.0\.0\.1:\d+)", timeout_s).group(1)
    up.wait_line(r"API token in", timeout_s)
    logs = up.home / "logs"

    def ready() -> bool:
        texts = {
            name: (logs / f"{name}.log").read_text(errors="replace")
            if (logs / f"{name}.log").exists()
            else ""
            for name in [*(f"worker-{r}" for r in ROLES), "beat"]
        }
        workers = all(" ready." in texts[f"worker-{r}"] for r in ("schedule", "provision"))
        return (
            workers and " ready." in texts["worker-autoscale"] and "Acquired lock" in texts["beat"]
        )

    wait_for(ready, timeout_s, "the workers and beat to be ready", logs)
    token = (up.home / "api-token").read_text().strip()
    return url, {"Authorization": f"Bearer {token}"}


def submit(url: str, headers: dict[str, str], task: dict[str, Any]) -> tuple[str | None, str]:
    """Submit once (an idempotency key makes a retry safe); (request id or None, what the API
    said when it refused)."""
    key = {"Idempotency-Key": uuid.uuid4().hex}
    try:
        resp = httpx.post(
            f"{url}/v1/requests", json={"task": task}, headers={**headers, **key}, timeout=90
        )
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if resp.status_code != 201:
        return None, f"HTTP {resp.status_code}: {resp.text[:200]}"
    return str(resp.json()["id"]), ""


def submit_patiently(
    url: str, headers: dict[str, str], name: str, task: dict[str, Any] | None = None
) -> str | None:
    """Submit with one idempotency key until the API takes it (it may be down or restarting);
    None if it never did within two minutes. A resend the API answers 200 found the request
    an earlier try created (that try's answer was lost: the API killed after the write, or a
    503 from a step after it), which is the key doing its job: taken once. The task is a
    service of the local cloud named ``name`` unless ``task`` is given."""
    key = {"Idempotency-Key": uuid.uuid4().hex}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            resp = httpx.post(
                f"{url}/v1/requests",
                json={"task": task or {**SERVICE, "name": name}},
                headers={**headers, **key},
                timeout=60,
            )
            if resp.status_code in (200, 201):
                return str(resp.json()["id"])
        time.sleep(0.5)
    return None


def submit_many(
    url: str, headers: dict[str, str], names: list[str], threads: int = 8
) -> tuple[list[str], list[str]]:
    """Submit one service per name, ``threads`` at a time: (ids, refusals)."""
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda n: submit(url, headers, {**SERVICE, "name": n}), names))
    return [r for r, _ in results if r], [why for r, why in results if not r]


@dataclass
class Account:
    """How a batch of requests ended up."""

    requests: int = 0
    running: int = 0
    failed: list[str] = field(default_factory=list)  # "id: error"
    control_plane_failures: int = 0
    not_settled: list[str] = field(default_factory=list)
    launched_twice: list[str] = field(default_factory=list)  # requests on != 1 live instance
    shared: int = 0  # instances two requests claim
    leaked: list[str] = field(default_factory=list)  # live local instances nobody owns
    settled_at: float = 0.0  # wall clock of the last request's RUNNING (or FAILED)

    def clean(self) -> bool:
        return not (
            self.failed or self.not_settled or self.launched_twice or self.shared or self.leaked
        )

    def line(self) -> str:
        return (
            f"requests {self.requests}: running {self.running}, failed {len(self.failed)} "
            f"(control plane {self.control_plane_failures}), lost {len(self.not_settled)}, "
            f"launched twice {len(self.launched_twice) + self.shared}, leaked {len(self.leaked)}"
        )


def views(url: str, headers: dict[str, str], ids: list[str]) -> list[dict[str, Any]]:
    """The API's views of these requests, from one listing (the view a GET of each returns; a
    GET per request made a look take about a second at 20 requests, CPU the API under test
    was short of); one the listing leaves out is asked for alone."""
    if not ids:
        return []
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        # Newest first, as many as asked for: these requests are the newest in every test
        # here, and a listing of all of them would grow with the run (300 in `make chaos`).
        listing = client.get("/v1/requests", params={"limit": min(len(ids), 1000)})
        listing.raise_for_status()
        listed = {r["id"]: r for r in listing.json()["requests"]}
        return [listed.get(rid) or client.get(f"/v1/requests/{rid}").json() for rid in ids]


def wait_settled(
    url: str, headers: dict[str, str], ids: list[str], timeout_s: float
) -> list[dict[str, Any]]:
    """Wait until every request is RUNNING or FAILED (or the time is up); their views."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            rows = views(url, headers, ids)
        except httpx.HTTPError:
            time.sleep(0.5)
            continue
        if all(r.get("state") in ("RUNNING", "FAILED") for r in rows):
            break
        time.sleep(0.5)
    return rows


def account(
    url: str, headers: dict[str, str], rows: list[dict[str, Any]], redis_url: str
) -> Account:
    """The account of ``rows`` (request views) against the local cloud's own records."""
    acc = Account(requests=len(rows))
    live: dict[str, str] = {}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for req in rows:
            rid, state = req["id"], req.get("state")
            if state == "FAILED":
                error = str(req.get("error"))
                acc.failed.append(f"{rid}: {error}")
                if any(word in error for word in CONTROL_PLANE_REASONS):
                    acc.control_plane_failures += 1
            elif state != "RUNNING":
                acc.not_settled.append(f"{rid}: {state}")
                continue
            else:
                acc.running += 1
                running = [i for i in req["instances"] if i["state"] == "RUNNING"]
                if len(running) != 1:
                    acc.launched_twice.append(rid)
                for inst in running:
                    if inst["provider_id"] in live:
                        acc.shared += 1
                    live[inst["provider_id"]] = rid
            events = client.get(f"/v1/requests/{rid}/events").json()["events"]
            ends = [e["at"] for e in events if e["text"].startswith(("state: RUNNING", "state: F"))]
            acc.settled_at = max([acc.settled_at, *ends])
    acc.leaked = leaked_instances(redis_url, live, {r["id"] for r in rows})
    return acc


def leaked_instances(redis_url: str, live: dict[str, str], request_ids: set[str]) -> list[str]:
    """Local instances of these requests that are up but not the one their request runs on."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    out = []
    for iid in client.smembers("corral:local:instances"):
        rec = client.hgetall(f"corral:local:instance:{iid}")
        if rec.get("request_id") not in request_ids or iid in live:
            continue
        if rec.get("state") not in ("terminated", "lost"):
            out.append(iid)
    return out


def cancel_all(url: str, headers: dict[str, str], ids: list[str], threads: int = 8) -> None:
    """Cancel every request, ``threads`` at a time (one after another, 20 took a second)."""
    with (
        httpx.Client(base_url=url, headers=headers, timeout=90) as client,
        concurrent.futures.ThreadPoolExecutor(threads) as pool,
    ):
        list(pool.map(lambda rid: client.post(f"/v1/requests/{rid}/cancel"), ids))


class SentinelGroup:
    """A Redis master, one replica and three sentinels (quorum 2) on free loopback ports, as
    real processes (Debian's redis-sentinel, or redis-server --sentinel without it). Every
    process it starts, it stops (by pid)."""

    MASTER_NAME = "corral"

    def __init__(self, base: Path, down_after_ms: int = 1000) -> None:
        import shutil
        import subprocess

        from harness import free_port

        self.base = base
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        server = shutil.which("redis-server")
        assert server, "redis-server is not installed (make setup)"
        sentinel = shutil.which("redis-sentinel")
        self._sentinel_argv = [sentinel] if sentinel else [server]
        self._sentinel_flag = [] if sentinel else ["--sentinel"]
        master = free_port()
        # No wait for more replicas before the first sync (Redis waits 5 s by default).
        self._server("master", server, master, ["--repl-diskless-sync-delay", "0"])
        self._server("replica", server, free_port(), ["--replicaof", "127.0.0.1", str(master)])
        _wait_port(master, "master")
        # The sentinels start once the replica has synced, and the group is ready for a fault
        # only when every sentinel has the replica on record as healthy (wait_ready). CI once
        # saw every election end in -failover-abort-no-good-slave for 40 s; that was not
        # reproduced here (nor its cause found), so this rules out a fault that lands before
        # the sentinels have a good replica on record, and a failure prints what each holds.
        wait_for(self._replica_synced, 30, "the replica to sync with the master")
        for i in range(3):
            port = free_port()
            conf = base / f"sentinel-{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {base}\n"
                f"sentinel monitor {self.MASTER_NAME} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {self.MASTER_NAME} {down_after_ms}\n"
                f"sentinel failover-timeout {self.MASTER_NAME} 5000\n"
                f"sentinel parallel-syncs {self.MASTER_NAME} 1\n"
            )
            self._start(f"sentinel-{i}", [*self._sentinel_argv, str(conf), *self._sentinel_flag])
            self.ports[f"sentinel-{i}"] = port
        for name, port in self.ports.items():
            _wait_port(port, name)
        wait_for(lambda: self.master_port() == master, 30, "the sentinels to agree")

    def wait_ready(self) -> None:
        """Wait until the group can fail over (see :meth:`_sentinels_ready`); call it before the
        fault. Not part of the start: clients reach the master through the sentinels as soon
        as they agree on it, while the sentinels learn of each other from hello messages sent
        every 2 s, so the processes under test can start meanwhile."""
        wait_for(self._sentinels_ready, 30, "every sentinel to know the replica and its peers")

    @property
    def url(self) -> str:
        hosts = [f"sentinel://127.0.0.1:{self.ports[f'sentinel-{i}']}" for i in range(3)]
        return ";".join(hosts) + f"/0?master_name={self.MASTER_NAME}"

    def _server(self, name: str, exe: str, port: int, extra: list[str]) -> None:
        data = self.base / name
        data.mkdir(parents=True, exist_ok=True)
        argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
        argv += ["--appendonly", "yes", "--save", "", "--maxmemory-policy", "noeviction"]
        self._start(name, [*argv, *extra])
        self.ports[name] = port

    def _start(self, name: str, argv: list[str]) -> None:
        import subprocess

        log = (self.base / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def _replica_synced(self) -> bool:
        try:
            info = redis.Redis(port=self.ports["replica"]).info("replication")
        except redis.RedisError:
            return False
        return info.get("master_link_status") == "up"

    def _sentinel(self, i: int) -> redis.Redis:
        return redis.Redis(
            port=self.ports[f"sentinel-{i}"], socket_timeout=1, decode_responses=True
        )

    def _sentinels_ready(self) -> bool:
        """Every sentinel lists the replica as healthy (flags just "slave", its link to the
        master up) and knows the two other sentinels, so any of them can win an election
        and find a replica to promote."""
        for i in range(3):
            try:
                client = self._sentinel(i)
                replicas = client.execute_command("SENTINEL", "REPLICAS", self.MASTER_NAME)
                peers = client.execute_command("SENTINEL", "SENTINELS", self.MASTER_NAME)
            except redis.RedisError:
                return False
            fields = [_pairs(r) for r in replicas]
            good = [
                f
                for f in fields
                if f.get("flags") == "slave"
                and f.get("master-link-status") == "ok"
                and f.get("port") == str(self.ports["replica"])
            ]
            if not good or len(peers) < 2:
                return False
        return True

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers says."""
        for i in range(3):
            try:
                client = redis.Redis(port=self.ports[f"sentinel-{i}"], socket_timeout=1)
                host = client.execute_command(
                    "SENTINEL", "get-master-addr-by-name", self.MASTER_NAME
                )
            except redis.RedisError:
                continue
            if host:
                return int(host[1])
        return None

    def tails(self, lines: int = 15) -> str:
        """The end of every process's log and each sentinel's view of the replicas (for a
        failure's message: an election that found no good replica says why only there)."""
        out = []
        for i in range(3):
            try:
                view = self._sentinel(i).execute_command("SENTINEL", "REPLICAS", self.MASTER_NAME)
                out.append(f"--- sentinel-{i} replicas ---\n{[_pairs(r) for r in view]}")
            except redis.RedisError as exc:
                out.append(f"--- sentinel-{i} replicas ---\n{exc}")
        for name in self.procs:
            text = (self.base / f"{name}.log").read_text(errors="replace").splitlines()
            out.append(f"--- {name} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def kill_master(self) -> int:
        """SIGKILL the master (as a dead host); returns its port."""
        import os
        import signal

        proc = self.procs["master"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return self.ports["master"]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except Exception:
                proc.kill()
                proc.wait()


def _pairs(reply: object) -> dict[str, str]:
    """A sentinel's flat [key, value, ...] reply (or redis-py's parsed dict) as a dict."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = list(reply)  # type: ignore[call-overload]
    return {str(k): str(v) for k, v in zip(items[::2], items[1::2], strict=True)}


def _wait_port(port: int, what: str) -> None:
    import socket

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
        except OSError:
            return False
        return True

    wait_for(up, 15, f"{what} to listen on {port}")
