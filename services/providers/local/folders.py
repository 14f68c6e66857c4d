"""A local machine's folders, logs and users: where its work runs on this host.

Every local machine is a process on the control plane's host, so its work gets a folder of its
own (its HOME, and where it starts without a workdir) outside Corral's home, which no task's
environment names; and, when Corral runs as root, a user of its own: the machines' work runs
as the installation's task uid, each pool assignment as another uid after it (docs/security.md).
The logs stay in Corral's log folder, written through a descriptor the agent opens: one per
machine and one per assignment (``sandbox.assignment_log``), never a file another reads.
"""

from __future__ import annotations

import logging
import os
import shutil
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEMAND_FILE = ".corral-demand.json"  # in the machine's folder: what its workload queued
UIDS_PER_CLOUD = 100_000  # task_uid's block: the machines' uid and the assignments' after it
UID_BASE = 2_000_000_000  # far above any system's or person's uid (and below 2**32 - 2)
LOG_READ_MAX_BYTES = 1024 * 1024  # one follower's read of a log


def task_uid_base(prefix: str) -> int:
    """The first uid of the block this installation's local tasks run as (by its key prefix,
    so two installations on one host rarely share uids)."""
    return UID_BASE + (zlib.crc32(prefix.encode()) % 20_000) * UIDS_PER_CLOUD


def assignment_uid(task_uid: int, drawn: int) -> int:
    """An assignment's own uid, from a number the cloud never drew before: within the block,
    never the machines' own."""
    return task_uid + 1 + drawn % (UIDS_PER_CLOUD - 1)


def remove_folders(machines_dir: Path, instance_ids: Collection[str]) -> None:
    """Gone machines' folders and their assignments', and the bundles copied beside them
    (their launch's, their jobs'): their disk goes with them. One pass over the folder for
    them all (a boot watch lets a burst's quick jobs go together: a pass per machine made
    ending N machines cost N passes over N folders)."""
    if not instance_ids:
        return
    gone = set(instance_ids)
    try:
        with os.scandir(machines_dir) as entries:
            # A machine's folder is named by its id; what lies beside it, "<id>.<more>".
            found = [e.path for e in entries if e.name.split(".", 1)[0] in gone]
    except FileNotFoundError:
        return
    for name in found:
        folder = Path(name)
        if folder.is_file() and not folder.is_symlink():
            folder.unlink(missing_ok=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def tail(path: Path, tail_bytes: int) -> bytes:
    """The last ``tail_bytes`` of a log file (empty when there is none yet)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - tail_bytes))
            return fh.read()
    except FileNotFoundError:
        return b""


def since(path: Path, offset: int) -> tuple[int, bytes]:
    """A log file from byte ``offset`` on (a file only grows): where the bytes start, them."""
    try:
        with path.open("rb") as fh:
            start = min(offset, path.stat().st_size)
            fh.seek(start)
            return start, fh.read(LOG_READ_MAX_BYTES)
    except FileNotFoundError:
        return offset, b""


def machine_files(
    files: dict[str, Any],
    home: Path,
    *,
    logs: Path,
    uid: int | None,
    bundle_store: str,
    bundle_store_endpoint: str | None,
) -> dict[str, Any]:
    """What a local machine's agent puts in place: the task's files, and its folder ``home``
    (its HOME and where its work starts without a workdir; this host is every local
    machine's, so ``~`` and absolute targets land inside it), outside Corral's home; the
    folder its assignments' logs go to; the user its work runs as (``uid``, when there is
    one). Its bundle is copied beside that folder from the blob store, under the request's
    project: the agent reads the file and needs no store credentials (a task's environment
    has none)."""
    out = {**files, "home": str(home), "jail": True, "logs": str(logs)}
    if uid is not None:
        out["uid"] = uid
    if "bundle" in files:
        path = home.parent / f"{home.name}.bundle"
        copy_bundle(bundle_store, bundle_store_endpoint, files, path)
        out["bundle_file"] = str(path)
    return out


def job_bundle_path(home: Path, sha256: str) -> Path:
    """Where a queued job's workdir bundle (``corral exec ID task.yaml``) is copied for the
    machine whose folder is ``home``: beside it, as its launch's, named by its sha256."""
    return home.parent / f"{home.name}.job-{sha256}.bundle"


def hand_job_bundle(
    files: dict[str, Any], store: str, endpoint: str | None, scope: str, sha256: str
) -> None:
    """A job queued on a machine (its ``files``) names a workdir bundle of its own (``corral
    exec ID task.yaml``): the control plane copies it from the blob store beside the machine's
    folder (0600) as the job is queued, as the provisioning worker copies its launch's, so the
    agent reads a file and needs no store credentials."""
    home = files.get("home")
    if home:
        path = job_bundle_path(Path(str(home)), sha256)
        if not path.exists():
            copy_bundle(
                store, endpoint, {"bundle_scope": scope, "bundle": {"sha256": sha256}}, path
            )


def copy_bundle(store: str, endpoint: str | None, files: dict[str, Any], path: Path) -> None:
    """The request's bundle written to ``path`` (0600); nothing when the store has it not
    (the agent then fails the machine, saying so)."""
    from corral.services.state.blobs import BlobStoreError, open_blobs

    key = f"{files.get('bundle_scope')}/{files['bundle']['sha256']}"
    try:
        data = open_blobs(store, endpoint_url=endpoint).get(key)
    except (BlobStoreError, ValueError, OSError) as exc:
        log.warning("bundle %s could not be read from %s: %s", key, store, exc)
        return
    if data is not None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
