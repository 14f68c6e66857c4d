"""Where one piece of work runs on a node, apart from the others (issue #47 item 1).

A machine's own work (its setup and run) has a sandbox, and so has each assignment a pool
machine or a Determined agent takes: a folder of its own, which is its HOME and where it starts
when it names no workdir; for an assignment, a log of its own (its output never lands in the
machine's log, which another project's request could read); and, where the agent runs as root
and the provider gives one, a user of its own (the local cloud: a task there is a process on
the control plane's host, so it never runs as Corral's user). When an assignment ends its
folder is removed and, under a user of its own, every process of that user killed, before the
machine takes the next one.

Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.services.agent.processes import kill_where

MAX_DEMAND_BYTES = 256 * 1024


def assignment_key(aid: str) -> str:
    """A file name for an assignment id (ids hold dots and may be long): the agent names the
    assignment's log and folder by it, the provider reads the log by it."""
    return hashlib.sha256(aid.encode()).hexdigest()[:16]


def assignment_log(log_dir: Path, instance_id: str, aid: str) -> Path:
    """Where an assignment's output goes: beside its machine's log on the local cloud, in
    the agent's folder on a cloud machine (whose name, ``cloud/attempt/rank``, has slashes)."""
    return log_dir / f"{instance_id.replace('/', '_')}.{assignment_key(aid)}.log"


@dataclass(frozen=True)
class Sandbox:
    """A folder (None: the agent's own HOME and working directory, a cloud machine's own work),
    a user (None: the agent's) and a log (None: the agent's output, the machine's log)."""

    folder: Path | None = None
    uid: int | None = None
    log: Path | None = None

    def make(self) -> None:
        """The folder (mode 0700, its user's) and the log (0600), before anything runs."""
        if self.folder is not None:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.folder, 0o700)
            if self.uid is not None:
                os.chown(self.folder, self.uid, self.uid)
        if self.log is not None:
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.close(fd)

    def hand_over(self) -> None:
        """What the agent put in the folder as root (a bundle, a clone, a copy) becomes the
        sandbox user's."""
        if self.folder is None or self.uid is None:
            return
        for root, dirs, files in os.walk(self.folder):
            for name in [*dirs, *files]:
                with contextlib.suppress(OSError):
                    os.lchown(os.path.join(root, name), self.uid, self.uid)
        os.chown(self.folder, self.uid, self.uid)

    def env(self) -> dict[str, str]:
        """What the sandbox sets in its work's environment: HOME."""
        if self.folder is None:
            return {}
        return {"HOME": str(self.folder)}

    def cwd(self, workdir: str | None) -> str | None:
        """Where a process starts: the workdir when it exists, else the folder."""
        if workdir and Path(workdir).is_dir():
            return workdir
        return str(self.folder) if self.folder is not None else None

    def open_log(self) -> int | None:
        """A descriptor appending to the sandbox's log (the caller closes it), None without."""
        if self.log is None:
            return None
        return os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)

    def clear(self) -> None:
        """Remove what the work left: every process of its user (a user of its own only) and
        the folder. The log stays (its request reads it)."""
        if self.uid is not None:
            kill_user(self.uid)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def run_as(uid: int | None) -> dict[str, Any]:
    """subprocess.Popen's arguments that run a process as ``uid`` (None: the agent's user)."""
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def kill_user(uid: int) -> int:
    """SIGKILL every process whose real uid is ``uid`` (never root's, never this one)."""
    return 0 if uid == 0 else kill_where(lambda entry: entry.stat().st_uid == uid)


def read_demand(path: str, say: Any) -> dict[str, Any] | None:
    """The JSON the node's workload wrote to its demand file, if any. The file is in the
    task's own folder, so a link there is not followed (the agent may be root)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None  # a fifo or a device would block or never end
            raw = fh.read(MAX_DEMAND_BYTES + 1)
        except OSError:
            return None
    if len(raw) > MAX_DEMAND_BYTES:
        say(f"{path} is over {MAX_DEMAND_BYTES} bytes; not reported")
        return None
    try:
        data = json.loads(raw or b"null")
    except ValueError:
        return None  # half written: the next beat reads it whole
    return data if isinstance(data, dict) else None


# --- port-forward: only to the work's own listening sockets ----------------------------------


def _listening_inodes(port: int) -> set[str]:
    """The inodes of the TCP sockets listening on ``port`` (any address), from /proc/net."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A: LISTEN
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                found.add(parts[9])
    return found


def _marked(pid_dir: Path, marker: bytes) -> bool:
    try:
        return marker in (pid_dir / "environ").read_bytes().split(b"\0")
    except OSError:
        return False


def forward_refusal(port: int, marker: str) -> str | None:
    """Why a port-forward to 127.0.0.1:``port`` is refused (None: allowed): it must reach a
    socket that a process of this work holds (a process whose environment carries ``marker``,
    as every process the work started does), never the control plane's Redis or API, nor
    another assignment's service on the same machine. Linux (/proc); elsewhere allowed."""
    if not Path("/proc/net/tcp").exists():
        return None
    inodes = _listening_inodes(port)
    if not inodes:
        return f"nothing answers at 127.0.0.1:{port} on the node"
    wanted = {f"socket:[{inode}]" for inode in inodes}
    mark = marker.encode()
    for entry in Path("/proc").iterdir():
        # The work's own processes first (their environment, one read each), then only their
        # descriptors: a few processes' fds, not every process's on the host.
        if not entry.name.isdigit() or not _marked(entry, mark):
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    return None
            except OSError:
                continue
    return f"127.0.0.1:{port} on the node is not this task's own port: forward refused"
