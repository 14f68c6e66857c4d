"""The node agent: what runs on a local cloud "machine". One OS process per instance.

    python -m corral.services.providers.local.agent --instance-id ID --redis-url URL \\
        --prefix P [--heartbeat-s 1.0] [--heartbeat-ttl-s 10] [--kill-grace-s 5]

It reads its task (setup, run, envs, workdir) from its instance record in Redis, written by the
provider before the process starts. It heartbeats every ``heartbeat-s``: a key with a TTL
holding the time, its resources and its activity (setup | running | idle | exited). It runs
``setup`` then ``run`` with bash, each in a process group of its own, their output going to the
agent's own stdout/stderr (the instance's log file). When ``run`` ends (a job) it records the
exit code and exits; without ``run`` (a service or workspace) it stays up idle. On SIGTERM it
stops its child's process group (SIGTERM, then SIGKILL after ``kill-grace-s``) and exits with a
final record. Every exit is also published on ``<prefix>:local:events`` (see state.py).

Dependency-light on purpose: the standard library, a small Redis client of its own (resp.py:
redis-py's import alone took most of a second) and state.py; never celery.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from corral.services.providers.local.resp import MiniRedis, RedisError
from corral.services.providers.local.state import (
    TERMINATED,
    CloudState,
    InstanceRecord,
)


def _say(message: str) -> None:
    """One line in the instance's log, marked so it reads apart from the task's output."""
    sys.stderr.write(f"[corral-agent] {message}\n")
    sys.stderr.flush()


class Agent:
    """Runs one instance's task and keeps its record current."""

    def __init__(
        self,
        state: CloudState,
        rec: InstanceRecord,
        *,
        heartbeat_s: float,
        heartbeat_ttl_s: float,
        kill_grace_s: float,
    ) -> None:
        self.state = state
        self.rec = rec
        self.instance_id = rec.id
        self.heartbeat_s = heartbeat_s
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self.kill_grace_s = kill_grace_s
        self.stopping = False
        self.activity = "setup"
        self._next_beat = 0.0
        self._redis_down = False
        # Self-pipe: signals (SIGTERM, and SIGCHLD when a child ends) wake the select() below.
        self._wake_r, wake_w = os.pipe()
        for fd in (self._wake_r, wake_w):
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)

    def _on_stop(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    # --- main ----------------------------------------------------------------------------
    def run(self) -> int:
        """The agent's life; returns its process exit code."""
        rec = self.rec
        if rec.setup and not self.stopping:
            code = self._run_phase("setup", rec.setup)
            if self.stopping:
                return self._end(code, "terminated")
            if code != 0:
                _say(f"setup exited {code}")
                return self._end(code, "setup_failed")
        if rec.run and not self.stopping:
            code = self._run_phase("running", rec.run)
            return self._end(code, "terminated" if self.stopping else "completed")
        self.activity = "idle"
        while not self.stopping:
            self._wait(None)
        return self._end(None, "terminated")

    def _run_phase(self, activity: str, script: str) -> int:
        """Run one bash script in its own process group until it ends or we are stopped."""
        self.activity = activity
        self._beat(force=True)
        workdir = self.rec.workdir
        cwd = workdir if workdir and Path(workdir).is_dir() else None
        if workdir and cwd is None:
            _say(f"workdir {workdir} does not exist; running in {os.getcwd()}")
        # The node's environment is the agent's, like a machine's, plus the task's envs; but
        # never Corral's settings and secrets, nor the cloud credentials the worker holds: a
        # task's output is readable through the API.
        inherited = {k: v for k, v in os.environ.items() if not _private(k)}
        env = {**inherited, **self.rec.envs}
        # Its environment carries CORRAL_INSTANCE_ID (set by the provider), which is how the
        # provider recognises the task's processes when it must kill them itself.
        child = subprocess.Popen(
            ["bash", "-c", script],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._set_child(child.pid)
        while child.poll() is None and not self.stopping:
            self._wait(child)
        code = self._stop_child(child) if child.poll() is None else _exit_code(child.returncode)
        _kill_group(child.pid, signal.SIGKILL)  # what the script left in the background
        return code

    def _stop_child(self, child: subprocess.Popen[bytes]) -> int:
        _kill_group(child.pid, signal.SIGTERM)
        try:
            child.wait(self.kill_grace_s)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid, signal.SIGKILL)
            child.wait()
        return _exit_code(child.returncode)

    def _wait(self, child: subprocess.Popen[bytes] | None) -> None:
        """Sleep until the next heartbeat is due or a signal arrives, then beat if due."""
        timeout = max(0.0, self._next_beat - time.monotonic())
        if child is None or child.poll() is None:
            ready, _, _ = select.select([self._wake_r], [], [], timeout)
            if ready:
                try:
                    while os.read(self._wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
        self._beat()

    # --- Redis -----------------------------------------------------------------------------
    def _beat(self, force: bool = False) -> None:
        if not force and time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + self.heartbeat_s
        try:
            self.state.heartbeat(
                self.rec, self.activity, time.time(), self.heartbeat_ttl_s, self._queued()
            )
            if self._redis_down:
                _say("Redis is reachable again")
            self._redis_down = False
        except RedisError as exc:
            if not self._redis_down:  # say it once, keep the task running
                _say(f"heartbeat failed: {exc}")
            self._redis_down = True

    def _queued(self) -> dict[str, Any] | None:
        """The demand the node's workload wrote to CORRAL_DEMAND_FILE (JSON), if any."""
        path = self.rec.envs.get("CORRAL_DEMAND_FILE")
        if not path:
            return None
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_DEMAND_BYTES + 1)
        except OSError:
            return None
        if len(raw) > MAX_DEMAND_BYTES:
            _say(f"{path} is over {MAX_DEMAND_BYTES} bytes; not reported")
            return None
        try:
            data = json.loads(raw or b"null")
        except ValueError:
            return None  # half written: the next beat reads it whole
        return data if isinstance(data, dict) else None

    def _set_child(self, pid: int) -> None:
        try:
            self.state.set_fields(self.instance_id, child_pid=pid)
        except RedisError as exc:
            _say(f"could not record the child pid: {exc}")

    def _end(self, exit_code: int | None, reason: str) -> int:
        """The final record: exit code, capacity freed, the exit event published."""
        self.activity = "exited"
        if exit_code is not None:
            _say(f"run exited {exit_code}" if reason == "completed" else f"{reason} ({exit_code})")
        deadline = time.monotonic() + 10
        while True:
            try:
                self._beat(force=True)
                self.state.finish(
                    self.rec, state=TERMINATED, exit_code=exit_code, reason=reason, now=time.time()
                )
                break
            except RedisError as exc:
                if time.monotonic() > deadline:
                    _say(f"could not write the final record: {exc}")
                    break
                time.sleep(0.2)
        return 0 if exit_code is None else exit_code & 0xFF


PRIVATE_PREFIXES = ("CORRAL_", "FLOWER_", "AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_", "GCE_")


def _private(name: str) -> bool:
    return name.startswith(PRIVATE_PREFIXES)


MAX_DEMAND_BYTES = 256 * 1024


def _exit_code(returncode: int) -> int:
    """A shell's convention: killed by signal N reads as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--instance-id", required=True)
    parser.add_argument(
        "--redis-url",
        default=None,
        help="Redis URL (default: CORRAL_REDIS_URL; the provider passes it there, off the "
        "command line, so a password never shows in ps)",
    )
    parser.add_argument("--prefix", default="corral")
    parser.add_argument("--heartbeat-s", type=float, default=1.0)
    parser.add_argument("--heartbeat-ttl-s", type=float, default=None)
    parser.add_argument("--kill-grace-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    url = args.redis_url or os.environ.get("CORRAL_REDIS_URL")
    if not url:
        _say("no Redis URL: pass --redis-url or set CORRAL_REDIS_URL")
        return 2
    state = CloudState(MiniRedis.from_url(url), args.prefix)  # type: ignore[arg-type]
    rec = state.record(args.instance_id)
    if rec is None:
        _say(f"no record for {args.instance_id}; nothing to run")
        return 2
    rec.pid = os.getpid()
    agent = Agent(
        state,
        rec,
        heartbeat_s=args.heartbeat_s,
        heartbeat_ttl_s=args.heartbeat_ttl_s or max(3 * args.heartbeat_s, 5.0),
        kill_grace_s=args.kill_grace_s,
    )
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
