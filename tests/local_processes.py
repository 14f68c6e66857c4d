"""What the local cloud's tests share: finding an instance's processes, and a provider that
leaves none behind."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from corral.services.providers.local.launcher import comm_name
from corral.services.providers.local.provider import LocalProvider
from corral.shared.config.localcloud import LocalCloud


def is_agent(proc: Path) -> bool:
    """Whether ``/proc/<pid>`` is a local-cloud agent (live or not): one started directly runs
    the agent module; one the launcher forked runs the launcher's command line but is named
    after its instance (the launcher itself keeps the interpreter's name)."""
    try:
        cmd = (proc / "cmdline").read_bytes()
        comm = (proc / "comm").read_text().strip()
    except OSError:
        return False
    return b"providers.local.agent" in cmd or (
        b"providers.local.launcher" in cmd and comm.startswith("li-")
    )


def is_launcher(proc: Path) -> bool:
    """Whether ``/proc/<pid>`` is a local cloud's launcher (not one of the agents it forked)."""
    try:
        cmd = (proc / "cmdline").read_bytes()
        comm = (proc / "comm").read_text().strip()
    except OSError:
        return False
    return b"providers.local.launcher" in cmd and not comm.startswith("li-")


def processes_of(instance_id: str) -> list[int]:
    """Every live (not zombie) process that belongs to the instance: agent or task."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if not cmdline or cmdline == [b""]:
            continue  # a zombie or kernel thread
        if f"CORRAL_INSTANCE_ID={instance_id}".encode() in environ or (
            instance_id.encode() in cmdline or comm == comm_name(instance_id)
        ):
            found.append(int(entry.name))
    return found


@contextmanager
def local_provider(cloud: LocalCloud, redis_url: str, log_dir: Path) -> Iterator[LocalProvider]:
    """A provider with fast heartbeats on its own key prefix; afterwards every process it
    started is gone (the test fails naming any left behind)."""
    p = LocalProvider(
        cloud,
        redis_url,
        prefix=f"t{uuid.uuid4().hex[:6]}",
        log_dir=log_dir,
        heartbeat_s=0.1,
        heartbeat_timeout_s=3.0,
        terminate_grace_s=2.0,
    )
    try:
        yield p
    finally:
        ids = p.state.instance_ids()
        p.terminate(ids)
        leftovers = {iid: processes_of(iid) for iid in ids}
        for pids in leftovers.values():
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        p.stop_launcher()
        assert not any(leftovers.values()), f"processes left behind: {leftovers}"
