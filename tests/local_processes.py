"""What the local cloud's tests share: finding an instance's processes, and a provider that
leaves none behind."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from corral.services.providers.local.provider import LocalProvider
from corral.shared.config.localcloud import LocalCloud


def processes_of(instance_id: str) -> list[int]:
    """Every live (not zombie) process that belongs to the instance: agent or task."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not cmdline or cmdline == [b""]:
            continue  # a zombie or kernel thread
        if f"CORRAL_INSTANCE_ID={instance_id}".encode() in environ or (
            instance_id.encode() in cmdline
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
        assert not any(leftovers.values()), f"processes left behind: {leftovers}"
