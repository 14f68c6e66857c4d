"""Packing a task's local ``workdir`` and ``file_mounts`` for its nodes (``corral launch``).

Paths are read as SkyPilot reads them: relative to where the command runs, ``~`` expanded. The
archive is a gzip'd tar, the same bytes for the same files (sorted, times and owners zeroed), so
its sha256 names it and an unchanged folder is uploaded once. ``.git`` folders and symbolic
links are left out. ``s3://`` sources are not packed: the node copies them itself. A source
Corral cannot copy yet (``gs://``, a storage mapping) is refused with its field named.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.shared.bundles import (
    WORKDIR_MEMBER,
    Bundle,
    BundleMount,
    remote_source_problem,
)

if TYPE_CHECKING:  # loaded by pack() only: most launches have nothing to pack
    import tarfile

SKIPPED_DIRS = frozenset({".git", "__pycache__"})
MAX_FILES = 100_000


class BundleError(ValueError):
    """A workdir or file mount that cannot be packed; ``field`` names it in the task."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def needs_bundle(task: dict[str, Any]) -> bool:
    """A local workdir, or a file mount that is not a remote store's (the node copies those)."""
    mounts = task.get("file_mounts") or {}
    local = [s for s in mounts.values() if not (isinstance(s, str) and "://" in s)]
    return isinstance(task.get("workdir"), str) or bool(local)


def pack(task: dict[str, Any], base: Path, max_bytes: int) -> tuple[bytes, Bundle]:
    """The archive of the task's local workdir and file mounts, and its :class:`Bundle`."""
    import gzip
    import hashlib
    import io
    import tarfile

    raw = io.BytesIO()
    files = 0
    mounts: list[BundleMount] = []
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        workdir = task.get("workdir")
        if isinstance(workdir, str):
            source = _local(base, workdir)
            if not source.is_dir():
                raise BundleError("workdir", f"{source} is not a folder")
            files += _add(tar, source, WORKDIR_MEMBER, "workdir")
        for i, (target, source) in enumerate(sorted((task.get("file_mounts") or {}).items())):
            field = f"file_mounts.{target}"
            problem = remote_source_problem(source)
            if problem:
                raise BundleError(field, problem)
            if "://" in source:
                continue  # s3://: the node copies it itself (shared/bundles.py)
            path = _local(base, source)
            if not path.exists():
                raise BundleError(field, f"{path} does not exist")
            member = f"mounts/{i}"
            files += _add(tar, path, member, field)
            mounts.append(BundleMount(target=target, member=member, is_dir=path.is_dir()))
            if files > MAX_FILES:
                raise BundleError(field, f"more than {MAX_FILES} files")
    data = gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)
    if len(data) > max_bytes:
        raise BundleError(
            "workdir" if isinstance(task.get("workdir"), str) else "file_mounts",
            f"the files come to {len(data):,} bytes compressed, over the limit of "
            f"{max_bytes:,} (CORRAL_BUNDLE_MAX_BYTES); leave large data out and read it on "
            "the node",
        )
    digest = hashlib.sha256(data).hexdigest()
    return data, Bundle(
        sha256=digest,
        size_bytes=len(data),
        workdir=isinstance(workdir, str),
        mounts=mounts,
    )


def _local(base: Path, text: str) -> Path:
    path = Path(os.path.expanduser(text))
    return (path if path.is_absolute() else base / path).resolve()


def _add(tar: tarfile.TarFile, source: Path, member: str, field: str) -> int:
    """Add ``source`` (a file, or a folder's tree) as ``member``; the number of files."""
    if source.is_file():
        _file(tar, source, member)
        return 1
    import tarfile

    count = 0
    for root, dirs, names in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        rel = Path(root).relative_to(source)
        inside = member if rel == Path(".") else f"{member}/{rel.as_posix()}"
        info = tarfile.TarInfo(inside)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(_zeroed(info))
        for name in sorted(names):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            _file(tar, path, f"{inside}/{name}")
            count += 1
            if count > MAX_FILES:
                raise BundleError(field, f"more than {MAX_FILES} files")
    return count


def _file(tar: tarfile.TarFile, path: Path, member: str) -> None:
    import tarfile

    info = tarfile.TarInfo(member)
    info.size = path.stat().st_size
    info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
    with path.open("rb") as fh:
        tar.addfile(_zeroed(info), fh)


def _zeroed(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info
