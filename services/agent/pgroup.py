"""A process group signalled, stopped or killed: the one place Corral calls ``os.killpg``.

The node agent (its run, assignments, execs and sessions), the local cloud's provider (a task
the agent could not stop) and ``corral up``'s supervisor (the control plane's own processes)
all start their children in a session of their own and end them here: SIGTERM, a grace period,
then SIGKILL to the whole group, so what a child left in the background goes with it.
Standard library only (the agent runs on bare machines); any layer of services/ may import it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is gone (or no longer ours to
    signal) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` still has a process (one we may not signal counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(child: subprocess.Popen[bytes], grace_s: float, *, term: bool = True) -> int:
    """Stop ``child`` and its process group: SIGTERM (unless ``term`` is False: the caller
    sent it already), up to ``grace_s`` for the child to exit, then SIGKILL to the group if it
    has not; the child reaped. Its return code (negative: the signal that ended it)."""
    if term:
        kill_group(child.pid, signal.SIGTERM)
    try:
        child.wait(grace_s)
    except subprocess.TimeoutExpired:
        kill_group(child.pid, signal.SIGKILL)
        child.wait()
    return child.returncode


def stop_groups(pgids: Iterable[int], grace_s: float, poll_s: float) -> None:
    """Stop process groups that have no child of ours to wait on (a service's daemons):
    SIGTERM each, look every ``poll_s`` until all are gone or ``grace_s`` is over, then
    SIGKILL what is left."""
    groups = list(pgids)
    for pgid in groups:
        kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(g) for g in groups):
        time.sleep(poll_s)
    for pgid in groups:
        kill_group(pgid, signal.SIGKILL)


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
