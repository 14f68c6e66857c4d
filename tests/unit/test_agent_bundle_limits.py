"""What a node refuses to unpack (issue #47 item 5): sparse members, which a few bytes of
archive turn into gigabytes on disk (the red team's 153-byte bundle that unpacks to 1 GiB),
and files that come to more than the control plane's cap; links and devices as before."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from corral.services.agent.bundle import BundleError, unpack

GIB = 1024**3


def sparse_bundle(tmp_path: Path, fmt: str = "gnu", size: str = "1G") -> bytes:
    """A gzip'd tar whose workdir holds one sparse file of ``size``, made by GNU tar."""
    if shutil.which("tar") is None:
        pytest.skip("GNU tar makes the sparse archive")
    src = tmp_path / "src"
    (src / "workdir").mkdir(parents=True)
    subprocess.run(["truncate", "-s", size, str(src / "workdir" / "big")], check=True)
    out = tmp_path / "sparse.tgz"
    subprocess.run(
        ["tar", "--sparse", f"--format={fmt}", "-czf", str(out), "-C", str(src), "workdir"],
        check=True,
    )
    return out.read_bytes()


def plain_bundle(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


def _unpack(data: bytes, tmp_path: Path, **kw: int) -> Path:
    spec = {"sha256": hashlib.sha256(data).hexdigest(), "workdir": True}
    workdir = tmp_path / "node" / "sky_workdir"
    unpack(data, spec, workdir, tmp_path / "node", jail=True, **kw)
    return workdir


@pytest.mark.parametrize("fmt", ["gnu", "posix"])
def test_a_sparse_member_is_refused_before_a_byte_is_written(tmp_path: Path, fmt: str) -> None:
    data = sparse_bundle(tmp_path, fmt)
    assert len(data) < 1024  # the attack: under a kilobyte of archive
    with pytest.raises(BundleError, match="sparse"):
        _unpack(data, tmp_path, max_bytes=4 * GIB)  # under the cap: refused for being sparse
    assert not (tmp_path / "node" / "sky_workdir" / "big").exists()


def test_files_past_the_unpacked_cap_are_refused(tmp_path: Path) -> None:
    data = plain_bundle({"workdir/a": b"\0" * 600_000, "workdir/b": b"\0" * 600_000})
    assert len(data) < 10_000  # zeros compress: the archive says nothing of the unpacked size
    with pytest.raises(BundleError, match="more than 1,000,000 bytes"):
        _unpack(data, tmp_path, max_bytes=1_000_000)
    assert not (tmp_path / "node" / "sky_workdir").exists()
    workdir = _unpack(data, tmp_path, max_bytes=1_200_000)
    assert (workdir / "b").stat().st_size == 600_000


def test_links_and_devices_are_still_refused(tmp_path: Path) -> None:
    for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            info = tarfile.TarInfo("workdir/x")
            info.type, info.linkname = kind, "/etc/passwd"
            tar.addfile(info)
        with pytest.raises(BundleError, match="not a plain file"):
            _unpack(gzip.compress(raw.getvalue()), tmp_path)


def test_a_body_that_is_not_a_tar_is_said_plainly(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="gzip'd tar"):
        _unpack(gzip.compress(b"not a tar at all" * 100), tmp_path)
