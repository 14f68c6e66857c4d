"""The node's processes: exit codes as a shell reads them, a copy or clone run with the beat
going, the processes a service left behind (by the instance id in their environment), and the
Python that runs Ray. Process groups are signalled in pgroup.py. Standard library only, as the
whole agent."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def shell_exit_code(returncode: int) -> int:
    """A shell's convention: killed by signal N reads as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


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
    return kill_where(lambda entry: marker in (entry / "environ").read_bytes().split(b"\0"))


def kill_where(test: Callable[[Path], bool]) -> int:
    """SIGKILL every process (but this one) whose ``/proc`` entry passes ``test`` (one that
    cannot be read, OSError, is passed over); how many. Linux (/proc); elsewhere nothing."""
    killed = 0
    proc = Path("/proc")
    if not proc.is_dir():
        return 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            hit = test(entry)
        except OSError:
            continue
        if hit:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed
