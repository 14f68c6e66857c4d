"""The local cloud's view of its machines' processes, from /proc: whether a pid is still an
instance's agent or task, and a process group killed."""

from __future__ import annotations

import os
import subprocess
import time

from corral.services.providers.local import launcher
from corral.services.providers.local.state import InstanceRecord


def pid_belongs_to(pid: int, instance_id: str) -> bool:
    """Whether ``pid`` is a live agent or task of this instance: an agent the launcher forked
    carries the instance id as its name, one started directly carries it as a word of its
    command line. False for a foreign or reused pid, a zombie, or a process that is gone.
    (Plain ``open``, not ``Path``: a boot watch asks this of every booting machine on every
    look, and three paths built per call were half its cost.)"""
    if pid <= 0:
        return False
    if not HAS_PROC:
        return instance_id.encode() in ps_command(pid).split(b"\0")  # no /proc (macOS)
    # One read of /proc/<pid>/stat tells a zombie or a gone process, and an agent the launcher
    # forked by its name. A process that has just exec'd shows an empty command line for a
    # moment (the kernel sets its argv pages after waking the parent): that case is waited out.
    name = launcher.comm_name(instance_id)
    for _ in range(50):
        comm, state = comm_and_state(pid)
        if state in ("Z", "X", ""):
            return False
        if comm == name:
            return True
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            return False
        if raw:
            return instance_id.encode() in raw.split(b"\0")
        time.sleep(0.002)
    return False


HAS_PROC = os.path.exists("/proc/self")


def task_belongs_to(pid: int, instance_id: str) -> bool:
    """Whether ``pid`` runs this instance's task: its environment names the instance (bash
    may exec the script's command, so the command line need not mention it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read()
    except OSError:
        return False
    return f"CORRAL_INSTANCE_ID={instance_id}".encode() in environ.split(b"\0")


def task_groups(rec: InstanceRecord) -> list[int]:
    """The process groups of the instance's task and assignments still alive (by leader)."""
    leaders = {rec.child_pid, *rec.child_pids} - {None}
    return sorted(pid for pid in leaders if pid is not None and task_belongs_to(pid, rec.id))


def comm_and_state(pid: int) -> tuple[str, str]:
    """The process name and one-letter state from /proc/<pid>/stat; empty if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return "", ""
    # The name in parentheses may hold spaces and parentheses: the state follows the last ")".
    head, _, tail = stat.rpartition(")")
    fields = tail.split()
    return head.partition("(")[2], fields[0] if fields else ""


def ps_command(pid: int) -> bytes:
    """The command line of ``pid`` as NUL-separated words, from ps (empty if gone)."""
    proc = subprocess.run(
        ["ps", "-p", str(pid), "-o", "command="], capture_output=True, check=False
    )
    return b"\0".join(proc.stdout.split())
