"""Launch-cost benchmark (issue #23): `corral up` as shipped (its own Redis, the API, three
workers, beat, Flower; shipped timers), N short jobs submitted over HTTP, against the same
stack idle for as long, in one run.

- control-plane CPU per launch: user + system time of the API, the workers (their pool
  children included), beat and redis-server while the jobs ran, minus what the same
  processes take idle over as long; Flower, the `corral up` supervisor and the local
  machines (their agents and launchers) are left out;
- Redis commands per launch: the sum of INFO commandstats calls over the same windows (every
  client counted: the local agents, Celery's task events, Flower; the commands a Lua script
  runs count too), idle subtracted;
- Celery task messages per launch: the LPUSH calls among them (kombu's Redis transport
  publishes each task message, a retry's and a countdown's included, with one LPUSH; nothing
  of Corral's pushes on a list from the left), idle subtracted.

The idle rate is measured before the jobs, over ``IDLE_S``, and scaled to the jobs' window.
``CORRAL_BENCH_SCALE=small``: 20 jobs, 3 s idle, 1 s to settle. Full: 100 jobs, 40 s idle, 10 s
to settle. The issue's
targets (<= 10 ms, <= 60 commands) are printed with the figures; the assertion is a stall
guard, as for the other benchmarks on a shared machine.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import time
import timeit
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis

from harness import Up, one_zone_cloud, processes_of, wait_for

pytestmark = [pytest.mark.bench, pytest.mark.integration]

TICKS = os.sysconf("SC_CLK_TCK")
SMALL = os.environ.get("CORRAL_BENCH_SCALE") == "small"
JOBS = 20 if SMALL else 100
IDLE_S = 3.0 if SMALL else 40.0
# Before the pids are taken: the workers' pool children, beat and Flower are up (then _settle
# waits for their warm-up to end). At the small size the figures are a stall guard only.
SETTLE_S = 1.0 if SMALL else 10.0
ROLES = ("api", "worker", "beat", "redis")


def _role(pid: int) -> str | None:
    """Which part of the control plane ``pid`` is (None: not one this benchmark counts)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv]
    if words and "redis-server" in words[0]:  # its title: "redis-server 127.0.0.1:<port>"
        return "redis"
    if "run" in words and words.index("run") + 1 < len(words):
        what = words[words.index("run") + 1]
        if what in ("api", "worker", "beat"):
            return what
    # `corral run` execs corral.workers.start (or Celery's command line, run by hand)
    if any("celery" in w or w == "corral.workers.start" for w in words) and "flower" not in words:
        if "beat" in words:
            return "beat"
        if "worker" in words:
            return "worker"  # a prefork pool child keeps its parent's argv
    return None


def _children(parent: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and _ppid(int(entry.name)) == parent:
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _cpu(pids: dict[int, str]) -> dict[str, float]:
    """CPU seconds by role (user + system, reaped children included)."""
    out = dict.fromkeys(ROLES, 0.0)
    for pid, role in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[role] += sum(int(f) for f in fields[11:15]) / TICKS
    return out


def _commands(client: redis.Redis) -> Counter[str]:
    """Calls so far, by command (``total`` for all of them)."""
    stats = client.info("commandstats")
    calls = Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})
    calls["total"] = sum(calls.values())
    return calls


def test_control_plane_cost_per_launch(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = Up(home, one_zone_cloud(tmp_path / "cloud.yaml", JOBS + 10), timers={})
    try:
        api = up.wait_line(r"\[up\] api\s+(http://127\.0\.0\.1:\d+)", 120).group(1)
        up.wait_line(r"API token in", 60)
        token = (home / "api-token").read_text().strip()
        wait_for(lambda: _ok(api), 60, "the API")
        time.sleep(SETTLE_S)  # the workers, beat and Flower settle
        pids: dict[int, str] = {}

        def every_role() -> bool:
            # redis-server's title hides its environment: it is found as the supervisor's child.
            mine = set(processes_of(home)) | _children(up.proc.pid)
            pids.clear()
            pids.update({p: r for p in mine if (r := _role(p)) is not None})
            return set(pids.values()) == set(ROLES)

        wait_for(every_role, 60, f"every role of the control plane {ROLES}", home / "logs")
        port = next(
            int(m.group(1))
            for p, r in pids.items()
            if r == "redis"
            and (m := re.search(rb":(\d+)", Path(f"/proc/{p}/cmdline").read_bytes()))
        )
        # Its password (corral up's Redis asks for one) is in the full address, kept in the
        # home (mode 0600); the printed address hides it.
        client = redis.Redis.from_url((home / "redis-url").read_text().strip())
        assert client.connection_pool.connection_kwargs.get("port") == port
        # The workers' pool processes load the clouds' SDKs in the background as they start
        # (app._warm_up): seconds of CPU on a busy machine, which must not count as idle.
        _settle(pids)

        # The same stack idle.
        cpu0, cmd0 = _cpu(pids), _commands(client)
        t0 = time.monotonic()
        time.sleep(IDLE_S)
        cpu1, cmd1 = _cpu(pids), _commands(client)
        idle_s = time.monotonic() - t0

        # N short jobs over HTTP, until all have ended.
        start = time.monotonic()
        ids = _submit(api, token, JOBS)
        done = client  # the state index, read cheaply (listing through the API costs it CPU)

        def ended() -> bool:
            time.sleep(0.2)
            return int(done.zcard("corral:requests:state:SUCCEEDED")) >= JOBS

        wait_for(ended, 600, f"{JOBS} jobs to end", home / "logs")
        busy_s = time.monotonic() - start
        cpu2, cmd2 = _cpu(pids), _commands(client)
        assert len(ids) == JOBS
    finally:
        up.stop()

    scale = busy_s / idle_s
    per_role = {r: ((cpu2[r] - cpu1[r]) - (cpu1[r] - cpu0[r]) * scale) / JOBS * 1000 for r in ROLES}
    cpu_ms = sum(per_role.values())
    by_command = {
        c: ((cmd2[c] - cmd1[c]) - (cmd1[c] - cmd0[c]) * scale) / JOBS for c in cmd2 if c != "total"
    }
    top = sorted(by_command.items(), key=lambda kv: -kv[1])[:8]
    cmds = ((cmd2["total"] - cmd1["total"]) - (cmd1["total"] - cmd0["total"]) * scale) / JOBS
    idle_ms_s = sum(cpu1[r] - cpu0[r] for r in ROLES) / idle_s * 1000
    ref_us = _reference_loop_us()
    print(
        f"\nlaunch cost: {JOBS} short jobs over HTTP on `corral up` in {busy_s:.1f} s; "
        f"control-plane CPU {cpu_ms:.1f} ms per launch (target <= 10: "
        + ", ".join(f"{r} {v:.1f}" for r, v in per_role.items())
        + f"); Redis {cmds:.0f} commands per launch (target <= 60); Celery task messages "
        f"{by_command.get('lpush', 0.0):.1f} per launch (kombu's LPUSH: nothing else pushes); "
        "idle: "
        f"{idle_ms_s:.1f} ms CPU and {(cmd1['total'] - cmd0['total']) / idle_s:.0f} commands "
        "per second; most per launch: "
        + ", ".join(f"{c} {n:.0f}" for c, n in top)
        + f"; this machine's reference loop (timeit 'sum(range(10000))'): {ref_us:.0f} us"
    )
    assert cpu_ms < 500 and cmds < 5000  # a stall guard, not the target (a shared machine)


def _reference_loop_us() -> float:
    """How fast this machine is now: one pure-Python loop, best of five (what ``python3 -m
    timeit 'sum(range(10000))'`` prints), so figures from sessions on machines of other speeds
    can be read side by side."""
    timer = timeit.Timer("sum(range(10000))")
    loops, _ = timer.autorange()
    return min(timer.repeat(5, loops)) / loops * 1e6


def _settle(pids: dict[int, str], quiet_ms_s: float = 60.0, limit_s: float = 90.0) -> None:
    """Wait (at most ``limit_s``) until the control plane's CPU over 2 s is below
    ``quiet_ms_s`` per second: started, warmed up, idle."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = sum(_cpu(pids).values())
        time.sleep(2.0)
        if (sum(_cpu(pids).values()) - before) / 2.0 * 1000 < quiet_ms_s:
            return


def _ok(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _submit(api: str, token: str, count: int) -> list[str]:
    task = {"resources": {"cloud": "local", "instance_type": "cpu-2"}, "run": "true"}
    headers = {"Authorization": f"Bearer {token}"}

    def one(client: httpx.Client, i: int) -> str:
        resp = client.post("/v1/requests", json={"task": {**task, "name": f"j{i}"}})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    with (
        httpx.Client(base_url=api, headers=headers, timeout=60) as client,
        concurrent.futures.ThreadPoolExecutor(8) as pool,
    ):
        return list(pool.map(lambda i: one(client, i), range(count)))
