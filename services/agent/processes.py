"""The node's processes: exit codes as a shell reads them, process groups, the processes a
service left behind (by the instance id in their environment), and the Python that runs Ray.
Standard library only, as the whole agent."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def shell_exit_code(returncode: int) -> int:
    """A shell's convention: killed by signal N reads as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


Child = subprocess.Popen[bytes]


def run_beating(
    argv: list[str],
    env: dict[str, str] | None,
    wait: Callable[[Child], bool],
    stop: Callable[[Child], int],
) -> tuple[int, str]:
    """Run ``argv`` to its end (its own session, stdout discarded), calling ``wait(child)``
    while it runs: the agent heartbeats there, so a long copy or clone is not a silent node.
    ``wait`` returning False (the agent is stopping) ends it with ``stop``. Its exit code as a
    shell reads it, and the tail of its stderr (kept in a file: no pipe fills and stalls it)."""
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
            start_new_session=True,
        )  # fmt: skip
        while child.poll() is None and wait(child):
            pass
        code = stop(child) if child.poll() is None else shell_exit_code(child.returncode)
        errors.seek(max(0, errors.seek(0, os.SEEK_END) - STDERR_TAIL_BYTES))
        return code, errors.read().decode(errors="replace").strip()


STDERR_TAIL_BYTES = 4096


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_members(pgid: int, proc: Path) -> bool:
    """Whether a process of group ``pgid`` is still alive (not a zombie), by /proc."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def kill_group_now(pgid: int, wait_s: float = 1.0) -> bool:
    """SIGKILL group ``pgid`` and wait up to ``wait_s`` for its processes to exit (a killed
    process takes a moment to go), so what reports them gone is true. True if they went."""
    kill_group(pgid, signal.SIGKILL)
    return await_group_gone(pgid, wait_s)


def await_group_gone(pgid: int, timeout_s: float, poll_s: float = 0.005) -> bool:
    """Wait up to ``timeout_s`` until no live process is left in group ``pgid`` (zombies
    count as gone). True if it went."""
    proc = Path("/proc")
    deadline = time.monotonic() + timeout_s
    while True:
        if not group_alive(pgid) or (proc.is_dir() and not _live_members(pgid, proc)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def ray_python(envs: dict[str, str]) -> str | None:
    """The Python that runs Ray on this machine: ``CORRAL_RAY_PYTHON`` if set, else the
    interpreter named by the ``ray`` command's first line (on the node's PATH)."""
    if envs.get("CORRAL_RAY_PYTHON"):
        return envs["CORRAL_RAY_PYTHON"]
    ray = shutil.which("ray", path=envs.get("PATH") or os.environ.get("PATH"))
    if ray is None:
        return None
    try:
        with open(ray, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and Path(words[0]).name == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0] if words else None


def kill_marked(instance_id: str, name: str = "CORRAL_INSTANCE_ID") -> int:
    """SIGKILL every process (but this one) whose environment names this instance (or, with
    ``name``, carries that variable set to ``instance_id``: an assignment's mark): what a
    service left behind outside its process groups. Linux (/proc); elsewhere nothing."""
    marker = f"{name}={instance_id}".encode()
    killed = 0
    proc = Path("/proc")
    if not proc.is_dir():
        return 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed
