"""Where task bundles' bytes live: a folder under CORRAL_HOME, or an S3 bucket. Not Redis.

Redis holds what is small and shared (which project keeps which sha256, its size, when it was
last used: :mod:`corral.services.state.bundles`); the bytes go to a blob store named by a URL:

- ``file:///abs/folder`` (the default, ``<home>/bundles``): folders made 0700 and files 0600,
  each written to a temporary name and renamed, so a reader never sees half a bundle;
- ``s3://bucket[/prefix]``: boto3's credential chain, ``CORRAL_AWS_ENDPOINT_URL`` honoured
  (tests point it at moto's server). Google Cloud Storage is not offered yet.

Keys are ``<scope>/<sha256>`` (:func:`blob_key`), a scope per project, so one project's copy
is never another's.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,80}/[0-9a-f]{64}$")


class BlobStoreError(RuntimeError):
    """The blob store could not be read or written (its URL and the cause named)."""


class Blobs(Protocol):
    """A blob store: bytes by key. Writes are whole; a missing key reads as None."""

    url: str

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...


def _checked(key: str) -> str:
    if not _KEY.match(key) or key.startswith("."):
        raise ValueError(f"not a blob key: {key!r}")
    return key


class FolderBlobs:
    """Blobs as files under ``root`` (0700 folders, 0600 files)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / _checked(key)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        for folder in (self.root, path.parent):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(folder, 0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


class S3Blobs:
    """Blobs as objects of an S3 bucket, under ``prefix``."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None, **client_kw: Any):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        if client is None:
            import boto3  # here: a folder store never loads it
            from botocore.config import Config

            kw = {k: v for k, v in client_kw.items() if v is not None}
            if kw.get("endpoint_url"):  # an S3-compatible server (tests: moto's) by its address
                kw["config"] = Config(s3={"addressing_style": "path"})
            client = boto3.client("s3", **kw)
        self.s3 = client

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{_checked(key)}" if self.prefix else _checked(key)

    def put(self, key: str, data: bytes) -> None:
        try:
            self.s3.put_object(Bucket=self.bucket, Key=self._name(key), Body=data)
        except Exception as exc:  # botocore's errors: the store is named, not the SDK
            raise BlobStoreError(f"{self.url}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        try:
            found = self.s3.get_object(Bucket=self.bucket, Key=self._name(key))
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                return None
            raise BlobStoreError(f"{self.url}: {exc}") from exc
        return bytes(found["Body"].read())

    def delete(self, key: str) -> None:
        try:
            self.s3.delete_object(Bucket=self.bucket, Key=self._name(key))
        except Exception as exc:
            raise BlobStoreError(f"{self.url}: {exc}") from exc


def blob_store_problem(url: str) -> str | None:
    """Why ``url`` names no blob store Corral can use, or None."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if not parsed.path.startswith("/") or parsed.netloc not in ("", "localhost"):
            return f"expected file:///ABSOLUTE/FOLDER, got {url!r}"
        return None
    if parsed.scheme == "s3":
        return None if parsed.netloc else f"expected s3://BUCKET[/PREFIX], got {url!r}"
    if parsed.scheme == "gs":
        return "gs:// bundle stores are not supported yet; use a folder (file://) or s3://"
    return f"expected file:///FOLDER or s3://BUCKET[/PREFIX], got {url!r}"


def open_blobs(url: str, *, endpoint_url: str | None = None) -> Blobs:
    """The blob store ``url`` names (ValueError when it names none)."""
    problem = blob_store_problem(url)
    if problem:
        raise ValueError(problem)
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return FolderBlobs(Path(parsed.path))
    return S3Blobs(parsed.netloc, parsed.path, endpoint_url=endpoint_url)
