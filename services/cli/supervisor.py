"""``corral up``: start Redis (when none is given), the API, one worker per role, beat and
Flower on 127.0.0.1; restart any that dies; stop everything on Ctrl-C or SIGTERM.

Secrets (the API token, Flower's password) live in files under CORRAL_HOME with mode 0600;
their paths are printed, never their contents.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote, urlsplit, urlunsplit

from corral.services.agent.pgroup import kill_group, stop_group
from corral.services.settings import Settings, child_env

log = logging.getLogger("corral.up")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def private_dir(path: Path) -> Path:
    """Create ``path`` (and its missing parents) readable by its owner only, and take away
    group and other access from it when it already exists and is ours: CORRAL_HOME holds the
    API token, Redis's password and append-only file, and every log."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
        path.chmod(stat.S_IMODE(st.st_mode) & 0o700)
    return path


UP_LOCK = "up.lock"


class HomeLocked(RuntimeError):
    """Another ``corral up`` holds the home's lock; ``pid`` is its process id (or None)."""

    def __init__(self, home: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "a process that has not written its pid yet"
        super().__init__(
            f"another `corral up` ({who}) is running with CORRAL_HOME={home}: stop it first "
            "(Ctrl-C in its terminal, or `kill -TERM` that pid), or give this one another "
            "CORRAL_HOME; nothing was started or changed"
        )
        self.pid = pid


def lock_home(home: Path) -> IO[str]:
    """Take ``<home>/up.lock`` for this process, writing its pid there; the open file holds
    the lock until the process ends, however it ends (an advisory ``flock``, so a lock left by
    a process that died is free again: taken over, not refused). HomeLocked, naming the
    holder's pid, when another live process holds it."""
    import fcntl

    private_dir(home)
    fd = os.open(home / UP_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fh = os.fdopen(fd, "r+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = fh.read().strip()
        fh.close()
        raise HomeLocked(home, int(text) if text.isdigit() else None) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def secret_file(path: Path) -> str:
    """Read the secret in ``path``, creating it (mode 0600) when missing; an existing file that
    others could read is made private first."""
    if path.exists():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        return path.read_text().strip()
    private_dir(path.parent)
    value = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600)."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def masked_url(url: str) -> str:
    """``redis://:secret@host:6379/0`` -> ``redis://:***@host:6379/0``: printable. A Sentinel
    URL's every part is masked (``sentinel://:pw@a:26379;sentinel://:pw@b:26379/0``)."""
    if ";" in url:
        return ";".join(masked_url(part) for part in url.split(";"))
    parts = urlsplit(url)
    if not parts.password:
        return url
    user = f"{parts.username}:" if parts.username else ":"
    host = parts.hostname or ""
    netloc = f"{user}***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def wait_port(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)
    _terminated: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM its process group, once per process (as the sequential stop sent it)."""
        if self.proc is None or self.proc.poll() is not None or self._terminated is self.proc:
            return
        self._terminated = self.proc
        kill_group(self.proc.pid, signal.SIGTERM)

    def stop(self, grace_s: float) -> None:
        """SIGTERM (unless :meth:`terminate` did), SIGKILL after ``grace_s``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.terminate()
            stop_group(self.proc, grace_s, term=False)
        # Whatever the process left in its group (e.g. prefork children) goes too.
        kill_group(self.proc.pid, signal.SIGKILL)
        if self._log:
            self._log.close()


class Supervisor:
    def __init__(
        self, settings: Settings, *, api_port: int, flower_port: int, say: Callable[[str], None]
    ) -> None:
        self.settings = settings
        self.api_port = api_port
        self.flower_port = flower_port
        self.say = say
        self.children: list[Child] = []
        self.redis: Child | None = None
        self.metrics_ports: dict[str, int] = {}  # worker role -> the port of its /metrics
        self.stopping = False

    # -- start ---------------------------------------------------------------------------------
    def start_redis(self) -> str:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError(
                "redis-server is not installed (run ops/setup.sh, or pass --redis-url)"
            )
        data = private_dir(self.settings.home / "redis")
        # Redis asks for a password, kept in a 0600 file: without one, any user of this machine
        # could read the node secret and task envs, or push work the local cloud runs as us.
        # It goes in a config file, never on the command line (/proc/PID/cmdline is public).
        password = secret_file(self.settings.file("redis-password"))
        conf = data / "redis.conf"
        write_private(conf, f"requirepass {password}\n")
        port = free_port()
        argv = [
            exe,
            str(conf),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            # A limit, and a policy that never evicts: requests, leases and queues are state,
            # not a cache. A full Redis refuses writes (OOM); the alert comes before that.
            "--maxmemory",
            str(self.settings.redis_maxmemory_bytes),
            "--maxmemory-policy",
            "noeviction",
            "--protected-mode",
            "yes",
        ]
        self.redis = Child("redis", argv, dict(os.environ), self.settings.logs / "redis.log")
        self.redis.start()
        if not wait_port(port, 15):
            raise RuntimeError(f"redis-server did not start; see {self.redis.log_path}")
        return f"redis://:{quote(password, safe='')}@127.0.0.1:{port}/0"

    def plan_children(self, api_token: str, flower_password: str) -> None:
        s = self.settings
        env = child_env(s)
        env.pop("CORRAL_API_TOKEN", None)  # only the API process gets the token
        corral = [sys.executable, "-m", "corral.services.cli.main"]
        logs = s.logs
        self.metrics_ports = {role: free_port() for role in ("schedule", "provision", "autoscale")}
        self.children = [
            Child(
                "api",
                [*corral, "run", "api", "--host", "127.0.0.1", "--port", str(self.api_port)],
                {**env, "CORRAL_API_TOKEN": api_token},
                logs / "api.log",
            ),
            *(
                Child(
                    f"worker-{role}",
                    [*corral, "run", "worker", "--role", role, "--metrics-port", str(port)],
                    env,
                    logs / f"worker-{role}.log",
                )
                for role, port in self.metrics_ports.items()
            ),
            Child("beat", [*corral, "run", "beat"], env, logs / "beat.log"),
            Child(
                "flower",
                [*corral, "run", "flower", "--port", str(self.flower_port)],
                {**env, "FLOWER_BASIC_AUTH": f"{s.flower_user}:{flower_password}"},
                logs / "flower.log",
            ),
        ]

    def start_all(self) -> None:
        for child in self.children:
            child.start()

    # -- supervise -----------------------------------------------------------------------------
    def supervise(self) -> None:
        timers = self.settings.timers
        while not self.stopping:
            time.sleep(timers.supervise_interval_s)
            if self.stopping:
                break
            for child in [*([self.redis] if self.redis else []), *self.children]:
                if child.alive() or self.stopping:
                    continue
                code = child.proc.returncode if child.proc else None
                child.restarts += 1
                self.say(
                    f"{child.name} exited (code {code}); restarting it "
                    f"(restart {child.restarts}, log {child.log_path})"
                )
                time.sleep(timers.restart_backoff_s)
                if not self.stopping:
                    child.start()

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, stop_instances: Callable[[], int]) -> None:
        self.stopping = True
        grace = self.settings.timers.terminate_grace_s
        # Every process is told at once and given the same grace: one after another, each
        # Celery worker's warm shutdown in turn, an idle installation took 5-6 s to stop.
        for child in reversed(self.children):
            child.terminate()
        deadline = time.monotonic() + grace
        for child in reversed(self.children):
            child.stop(max(0.0, deadline - time.monotonic()))
        try:
            n = stop_instances()
            if n:
                self.say(f"stopped {n} local instance(s)")
        except Exception as exc:  # keep stopping the rest whatever happens
            self.say(f"could not stop every local instance: {exc}")
        if self.redis is not None:
            self.redis.stop(grace)
