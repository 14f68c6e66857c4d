"""A process that has imported what Corral's API, workers and beat import, and forks a copy of
itself for each one a test starts.

Each of the suite's roughly fifty installations starts an API, two or three workers and beat:
about 4 s of CPU, most of it imports (the CLI's, then, for a worker or beat, a second Python
from `corral run worker`'s exec: Celery, kombu, redis, pydantic's models), and on this 2-core
machine about 2 s of wall before a test's first submit is answered. A copy forked from here
starts with those modules loaded; what runs in it is unchanged: the `corral` command line
with the test's arguments and environment, in a session of its own, writing to the test's log.

What differs from a process started by exec, and why it does not matter here:

- `corral run worker|beat|flower` ends by exec'ing a fresh Python on a module; in a copy, that
  module runs in the same process instead (``runpy``), with the settings read again.
- Only modules that read nothing from the environment when imported are loaded here (the
  environment is the test's own, with CORRAL_* and PATH changed per installation; the settings
  are read when a command runs). prometheus_client picks its multiprocess mode at import, from
  an environment variable `corral run worker` sets: it is never loaded here (checked below).
- ``/proc/PID/environ`` of a copy shows this process's environment, not the test's: the suite
  finds machines' processes by their environment, never the API's or a worker's.

Tests that start `corral up`, or a process with a changed command line, start it with exec as
before. CORRAL_TEST_EXEC=1 makes the harness start everything with exec (tests/harness.py).

The same goes for a test's `corral` commands (``System.cli``): each was a Python start-up and
the CLI's imports, about 0.3 s of CPU, a hundred-odd times in the suite.

Protocol (the harness's side is ``Zygote`` below): one JSON line per request on fd 0, ``{"argv",
"env", "out", "err", "exit"}``; the answer is one line, the child's pid. When a child ends, its
exit code (negative: the signal) is written to the file named ``exit``.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# What the API, a worker and beat import before they do anything, that reads no environment.
PRELOAD = (
    "typer",
    "rich.console",
    "pydantic",
    "pydantic_settings",
    "yaml",
    "httpx",
    "redis",
    "kombu",
    "kombu.transport.redis",
    "celery",
    "celery.app.base",
    "celery.apps.worker",
    "celery.apps.beat",
    "celery.beat",
    "celery.worker.consumer",
    "celery.concurrency.prefork",
    "celery.utils.nodenames",
    "billiard.pool",
    "redbeat.schedulers",
    "fastapi",
    "starlette.routing",
    "uvicorn",
    "uvicorn.server",
    "anyio",
    "corral.services.cli.main",
    "corral.services.cli.requests_cmd",
    "corral.services.cli.launch_cmd",
    "corral.services.cli.cost_cmd",
    "corral.services.cli.check_cmd",
    "corral.services.cli.up_cmd",
    "corral.services.settings",
    "corral.services.queues.dispatch",
    "corral.services.queues.redis_conn",
    "corral.shared.records",
    "corral.shared.planner",
    "corral.shared.routing",
    "corral.shared.config.task",
    "corral.services.runtime.deps",
    "corral.services.runtime.planning",
    "corral.services.providers.registry",
    "corral.services.providers.local.provider",
    "corral.workers.resilience",
    # The clouds' SDKs, for the tests that name AWS or GCP: google-cloud-compute alone is about
    # 1.5 s of CPU to import, in the API and in each worker's pool process (their warm-up).
    "boto3",
    "botocore.session",
    "google.cloud.compute_v1",
    "corral.services.providers.aws.provider",
    "corral.services.providers.gcp.provider",
    "corral.services.providers.kubernetes.provider",
)
# Modules whose import reads the environment in a way a copy must not inherit.
NEVER_PRELOADED = ("prometheus_client", "corral.workers.app")


def _serve() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from corral.services.cli import main as cli_main

    cli_main.whole_app()  # `corral run ...` builds every command: built once here
    # What is loaded now is never collected: out of the collector's sight, so no copy's
    # collections walk (and so copy, page by page) the memory it shares with this process.
    gc.collect()
    gc.freeze()
    leaked = [m for m in NEVER_PRELOADED if m in sys.modules]
    if leaked or threading.active_count() != 1:
        raise SystemExit(f"zygote: cannot fork safely (loaded {leaked}, threads running)")

    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    exits: dict[int, str] = {}

    def reap(*_: Any) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            path = exits.pop(pid, None)
            if path is not None:
                tmp = f"{path}.tmp"
                Path(tmp).write_text(str(os.waitstatus_to_exitcode(status)))
                os.replace(tmp, path)

    signal.signal(signal.SIGCHLD, reap)
    for line in requests:
        req = json.loads(line)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        ready, told = os.pipe()
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            os.close(ready)
            _child(req, told)  # never returns: the command's SystemExit ends the process
        os.close(told)
        os.read(ready, 1)  # its session made: a killpg of the pid we answer reaches it
        os.close(ready)
        exits[pid] = req["exit"]
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        answers.write(f"{pid}\n")
        answers.flush()


def _child(req: dict[str, Any], told: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    os.setsid()
    os.write(told, b".")
    os.close(told)
    for fd, path in ((1, req["out"]), (2, req["err"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(req["env"])
    from corral.services.cli import main as cli_main
    from corral.services.cli import up_cmd

    up_cmd._exec = _run_module  # type: ignore[attr-defined]
    sys.argv = list(req["argv"])
    cli_main.run()
    raise SystemExit(0)


def _run_module(argv: list[str]) -> None:
    """What `corral run worker|beat|flower` would exec (``python -m MODULE ARGS``), run here:
    the settings read again, as a new process would."""
    import runpy

    from corral.services.settings import get_settings

    assert argv[1] == "-m", argv
    get_settings.cache_clear()
    sys.argv = [argv[2], *argv[3:]]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


class Forked:
    """A process the zygote forked, with the parts of ``subprocess.Popen`` the harness uses."""

    def __init__(self, pid: int, exit_file: Path, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._exit_file = exit_file

    def poll(self) -> int | None:
        if self.returncode is None and self._exit_file.exists():
            self.returncode = int(self._exit_file.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The harness's side: starts the zygote when first asked for a process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._stderr = Path(os.devnull)
        self._lock = threading.Lock()
        self._count = 0

    def spawn(self, argv: list[str], env: dict[str, str], log: Path) -> Forked:
        """Start ``argv`` (a `corral` command) in a session of its own, both its outputs
        appended to ``log`` (made now, for the test to read at once)."""
        log.touch()
        return self._fork(argv, env, log, log, log.parent / f".{log.stem}")

    def run(
        self, argv: list[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)``
        for a `corral` command."""
        with tempfile.TemporaryDirectory(prefix="corral-cli-") as tmp:
            out, err = Path(tmp) / "out", Path(tmp) / "err"
            proc = self._fork(argv, env, out, err, Path(tmp) / "run")
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
                raise
            stdout, stderr = (
                p.read_text(errors="replace") if p.exists() else "" for p in (out, err)
            )
            return subprocess.CompletedProcess(argv, code, stdout, stderr)

    def _fork(
        self, argv: list[str], env: dict[str, str], out: Path, err: Path, stem: Path
    ) -> Forked:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                # Its own stderr a file, not the test run's (a terminal, perhaps): the CLI's
                # consoles, made as it imports them, look at what they write to then.
                self._stderr = Path(tempfile.mkstemp(prefix="corral-zygote-", suffix=".log")[1])
                with self._stderr.open("w") as stderr:
                    self._proc = subprocess.Popen(
                        [sys.executable, __file__],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                        start_new_session=True,
                    )
            self._count += 1
            exit_file = stem.with_name(f"{stem.name}.{self._count}.exit")
            req = {
                "argv": argv,
                "env": env,
                "out": str(out),
                "err": str(err),
                "exit": str(exit_file),
            }
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
            if not answer:
                said = self._stderr.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the zygote ended; its output ({self._stderr}):\n{said}")
            return Forked(int(answer), exit_file, argv)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


if __name__ == "__main__":
    _serve()
