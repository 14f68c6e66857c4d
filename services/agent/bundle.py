"""The agent's side of a task's files: a bundle unpacked into place, or a git workdir cloned.

Standard library only. The bundle's bytes come from the agent's link (a cloud machine asks the
API with its node token; the local cloud reads the file its provider left in the machine's
folder); their sha256 must be the one the task names before anything is unpacked. Members are
checked before extraction: no absolute paths, no ``..``, no links or devices, so a bundle can
write nowhere but where its task said.
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


def unpack(data: bytes, spec: dict[str, Any], workdir: Path, home: Path, *, jail: bool) -> None:
    """Check ``data`` against ``spec["sha256"]`` and unpack its workdir and mounts. ``jail``:
    absolute targets go under ``home`` too (the local cloud)."""
    import tarfile  # here: only a task with files needs it (the launcher forks lighter)

    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.get("sha256"):
        raise BundleError(f"bundle checksum {digest} is not the task's {spec.get('sha256')}")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                raise BundleError(f"bundle member {m.name!r} is not a plain file or folder")
        if spec.get("workdir"):
            _extract(tar, members, WORKDIR_MEMBER, workdir)
        for mount in spec.get("mounts") or []:
            dest = mount_path(home, str(mount["target"]), jail=jail)
            _extract(tar, members, str(mount["member"]), dest)


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
            shutil.copyfileobj(source, fh)
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
