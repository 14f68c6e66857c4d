"""Task bundles kept per project (issue #47 items 5 and 8): the bytes in a blob store (a
folder here: 0700 folders, 0600 files), the metadata in a real redis-server, a quota per
project, and one project's sha256 unknown to another."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import uuid
from pathlib import Path

import pytest
import redis

from corral.services.state.blobs import FolderBlobs, blob_store_problem, open_blobs
from corral.services.state.bundles import (
    BUNDLE_TTL_S,
    MIN_CHARGE_BYTES,
    BundleStore,
    QuotaExceeded,
    scope_of,
)


def _store(redis_url: str, root: Path, quota: int = 1024 * 1024) -> BundleStore:
    client = redis.Redis.from_url(redis_url)
    return BundleStore(client, f"t-{uuid.uuid4().hex[:8]}", FolderBlobs(root), quota)


def _bundle(size: int = 100) -> tuple[str, bytes]:
    data = gzip.compress(os.urandom(size), mtime=0)
    return hashlib.sha256(data).hexdigest(), data


def test_a_bundle_is_kept_as_a_private_file_and_only_metadata_in_redis(
    redis_url: str, tmp_path: Path
) -> None:
    store = _store(redis_url, tmp_path / "bundles")
    sha, data = _bundle(200_000)
    assert store.put("team-a", sha, data) is True
    assert store.put("team-a", sha, data) is False  # kept already: counted once
    path = tmp_path / "bundles" / "team-a" / sha
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in (tmp_path / "bundles", tmp_path / "bundles" / "team-a"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert store.get("team-a", sha) == data
    assert store.held_bytes("team-a") == len(data)
    for key in store.r.scan_iter(f"{store.prefix}:*"):
        assert store.r.memory_usage(key) < 10_000, key  # no bytes of the bundle in Redis


def test_another_projects_sha256_is_unknown(redis_url: str, tmp_path: Path) -> None:
    store = _store(redis_url, tmp_path)
    sha, data = _bundle()
    store.put("team-a", sha, data)
    assert store.has("team-a", sha)
    assert not store.has("team-b", sha)
    assert store.get("team-b", sha) is None
    assert store.get(scope_of(None), sha) is None  # nor the admin's project-less scope


def test_an_upload_past_the_projects_quota_is_refused_naming_it(
    redis_url: str, tmp_path: Path
) -> None:
    store = _store(redis_url, tmp_path, quota=1024 * 1024)
    first_sha, first = _bundle(700_000)
    store.put("team-a", first_sha, first)
    sha, data = _bundle(400_000)
    with pytest.raises(QuotaExceeded) as refused:
        store.put("team-a", sha, data)
    said = str(refused.value)
    assert "team-a" in said and "1,048,576" in said and "CORRAL_BUNDLE_QUOTA_BYTES" in said
    assert not (tmp_path / "team-a" / sha).exists() and not store.has("team-a", sha)
    store.put("team-b", sha, data)  # another project's quota is its own


def test_small_bundles_count_at_least_the_minimum_so_their_number_is_bounded(
    redis_url: str, tmp_path: Path
) -> None:
    store = _store(redis_url, tmp_path, quota=1024 * 1024)
    kept = 0
    with pytest.raises(QuotaExceeded):
        for _ in range(1024 * 1024 // MIN_CHARGE_BYTES + 1):
            sha, data = _bundle(10)
            store.put("team-a", sha, data)
            kept += 1
    assert kept == 1024 * 1024 // MIN_CHARGE_BYTES


def test_a_wrong_checksum_is_refused(redis_url: str, tmp_path: Path) -> None:
    store = _store(redis_url, tmp_path)
    _sha, data = _bundle()
    with pytest.raises(ValueError, match="sha256"):
        store.put("team-a", "0" * 64, data)
    assert store.held_bytes("team-a") == 0


def test_unused_bundles_are_let_go_at_the_projects_next_upload(
    redis_url: str, tmp_path: Path
) -> None:
    store = _store(redis_url, tmp_path)
    old_sha, old = _bundle()
    store.put("team-a", old_sha, old, now=1000.0)
    sha, data = _bundle()
    store.put("team-a", sha, data, now=1000.0 + BUNDLE_TTL_S + 1)
    assert not store.has("team-a", old_sha) and not (tmp_path / "team-a" / old_sha).exists()
    assert store.held_bytes("team-a") == MIN_CHARGE_BYTES  # the new one only


def test_store_urls() -> None:
    assert blob_store_problem("file:///var/corral/bundles") is None
    assert blob_store_problem("s3://bucket/prefix") is None
    assert "not supported yet" in str(blob_store_problem("gs://bucket"))
    assert "ABSOLUTE" in str(blob_store_problem("file://relative/x"))
    with pytest.raises(ValueError):
        open_blobs("ftp://x")


def test_a_key_cannot_climb_out_of_the_folder(tmp_path: Path) -> None:
    blobs = FolderBlobs(tmp_path)
    for key in ("../x/" + "0" * 64, "a/../../" + "0" * 64, "/etc/passwd", "a/b"):
        with pytest.raises(ValueError):
            blobs.put(key, b"x")
