"""A cluster file's ``file_mounts`` and ``cluster_synced_files``, packed where ``cluster up``
runs, for every node of the cluster.

Ray's launcher copies each ``file_mounts`` entry (``remote path: local path``, a file or a
folder) from the machine running ``ray up`` to every node, and ``cluster_synced_files`` (paths)
from the head to the workers at the same path. Corral packs both here, once: a gzip'd tar whose
member ``m<i>`` goes to ``targets[i]``, with its sha256, capped at
:data:`corral.shared.autoscaler.launcher.MAX_MOUNTS_BYTES`. The archive travels in the cluster
record and each node's launcher script, which checks the sha256 before unpacking. It never
holds anything but the named paths (no cloud key, no token). Local paths are read relative to
the current folder, ``~`` being the user's home, as ``ray up`` reads them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

from corral.shared.autoscaler.launcher import MAX_MOUNTS_BYTES
from corral.shared.config.cluster import Cluster
from corral.shared.configio import ConfigError


def _entries(cluster: Cluster) -> list[tuple[str, str, tuple[str, ...]]]:
    """(target on the node, local path, the field naming it)."""
    out: list[tuple[str, str, tuple[str, ...]]] = [
        (remote, local, ("file_mounts", remote))
        for remote, local in (cluster.file_mounts or {}).items()
    ]
    out += [(p, p, ("cluster_synced_files",)) for p in cluster.cluster_synced_files or []]
    return out


def pack(cluster: Cluster, file_name: str, cwd: Path | None = None) -> dict[str, Any] | None:
    """The packed mounts (a launcher ``Mounts`` as JSON), None when the file has none;
    ConfigError naming the field when a path is missing or the archive is too large."""
    entries = _entries(cluster)
    if not entries:
        return None
    base = cwd or Path.cwd()
    buf = io.BytesIO()
    targets: list[str] = []
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i, (target, local, field) in enumerate(entries):
            path = Path(local).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.exists():
                raise ConfigError.single(
                    file_name,
                    f"{local}: no such file or folder here (read from {base})",
                    ".".join(field),
                )
            tar.add(str(path), arcname=f"m{i}")
            targets.append(target)
    raw = buf.getvalue()
    if len(raw) > MAX_MOUNTS_BYTES:
        raise ConfigError.single(
            file_name,
            f"the file mounts pack to {len(raw)} bytes; expected at most {MAX_MOUNTS_BYTES} "
            "(sync large data from storage in setup_commands instead)",
            "file_mounts",
        )
    return {
        "archive_b64": base64.b64encode(raw).decode("ascii"),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "targets": targets,
        "size_bytes": len(raw),
    }
