"""The agent's side of a task's files: a bundle unpacked into place, or a git workdir cloned.

Standard library only. The bundle's bytes come from the agent's link (a cloud machine asks the
API with its node token; the local cloud reads the file its provider left in the machine's
folder); their sha256 must be the one the task names before anything is unpacked. Members are
checked before extraction: no absolute paths, no ``..``, no links or devices, no sparse
members (GNU or PAX sparse maps: a few bytes that unpack to gigabytes of holes), and their
sizes together at most the control plane's cap (``unpacked_max_bytes``), so a bundle can write
nowhere but where its task said, and no more than it was allowed.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tarfile

WORKDIR_MEMBER = "workdir"
DEFAULT_UNPACKED_MAX_BYTES = 2 * 1024**3  # CORRAL_BUNDLE_UNPACKED_MAX_BYTES's default


class BundleError(Exception):
    """The files could not be put in place (the node fails, naming why)."""


def place(home: Path, target: str) -> Path:
    """Where a target lands: ``~/x`` under ``home``; an absolute path as written, or under
    ``home`` when ``root`` is a machine folder (the local cloud's machines share this host)."""
    if target == "~" or target.startswith("~/"):
        return home / target[2:]
    return Path(target)


def mount_path(home: Path, target: str, *, jail: bool) -> Path:
    """Where a mount's target lands on this node; ``jail``: absolute targets under ``home``
    too (the local cloud's machines share this host)."""
    if jail and not (target == "~" or target.startswith("~/")):
        return home / target.lstrip("/")
    return place(home, target)


def unpack(
    data: bytes,
    spec: dict[str, Any],
    workdir: Path,
    home: Path,
    *,
    jail: bool,
    max_bytes: int | None = None,
) -> None:
    """Check ``data`` against ``spec["sha256"]`` and its members (:func:`check_members`, at
    most ``max_bytes`` unpacked; None: the default cap), then unpack its workdir and mounts.
    ``jail``: absolute targets go under ``home`` too (the local cloud)."""
    import tarfile  # here: only a task with files needs it (the launcher forks lighter)

    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.get("sha256"):
        raise BundleError(f"bundle checksum {digest} is not the task's {spec.get('sha256')}")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            check_members(members, int(max_bytes or DEFAULT_UNPACKED_MAX_BYTES))
            if spec.get("workdir"):
                _extract(tar, members, WORKDIR_MEMBER, workdir)
            for mount in spec.get("mounts") or []:
                dest = mount_path(home, str(mount["target"]), jail=jail)
                _extract(tar, members, str(mount["member"]), dest)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BundleError(f"bundle cannot be read as a gzip'd tar: {exc}") from None


def check_members(members: list[tarfile.TarInfo], max_bytes: int) -> None:
    """Refuse the bundle (BundleError naming the member) for a member that is not a plain
    file or folder (links, devices, fifos), is sparse, or climbs out (absolute, ``..``), and
    for files that come to more than ``max_bytes`` unpacked (checked before a byte is
    written)."""
    total = 0
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
            raise BundleError(f"bundle member {m.name!r} is not a plain file or folder")
        # tarfile reads a GNU sparse member ('S') and PAX's GNU.sparse.* maps into .sparse;
        # their stated size is what they unpack to, far past the bytes the archive holds.
        if m.issparse() or any(k.startswith("GNU.sparse") for k in m.pax_headers):
            raise BundleError(f"bundle member {m.name!r} is a sparse file; Corral refuses those")
        total += max(m.size, 0) if m.isfile() else 0
        if total > max_bytes:
            raise BundleError(
                f"bundle unpacks to more than {max_bytes:,} bytes (at member {m.name!r}); "
                "the control plane's cap is CORRAL_BUNDLE_UNPACKED_MAX_BYTES"
            )


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], prefix: str, dest: Path) -> None:
    mine = [m for m in members if m.name == prefix or m.name.startswith(prefix + "/")]
    if not mine:
        raise BundleError(f"bundle has no member {prefix}")
    for m in mine:
        rel = m.name[len(prefix) :].lstrip("/")
        out = dest / rel if rel else dest
        if m.isdir():
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(m)
        assert source is not None
        with source, open(out, "wb") as fh:
            shutil.copyfileobj(source, fh)  # at most m.size bytes: tarfile reads no further
        os.chmod(out, 0o755 if m.mode & 0o100 else 0o644)


def _run(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stderr


def clone(
    url: str, ref: str | None, workdir: Path, run: Callable[[list[str]], tuple[int, str]] = _run
) -> None:
    """A git workdir: cloned into ``workdir`` and checked out at ``ref``; ``run`` runs each
    git command (the agent's heartbeats while it does), its exit code and stderr."""
    if workdir.exists() and any(workdir.iterdir()):
        return  # cloned on an earlier boot of this machine
    workdir.parent.mkdir(parents=True, exist_ok=True)
    # `--` ends git's options: a URL or ref the API let through is never read as one (the
    # task's own check refuses a leading '-' too). After the ref it says no paths follow.
    steps = [["git", "clone", "--quiet", "--", url, str(workdir)]]
    if ref:
        steps.append(["git", "-C", str(workdir), "checkout", "--quiet", ref, "--"])
    for argv in steps:
        code, said = run(argv)
        if code != 0:
            raise BundleError(f"{' '.join(argv[:2])} {url}: {said.strip()[-500:]}")
