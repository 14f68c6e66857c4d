"""Copy one ``s3://`` file_mounts source to its place on the node (run by the agent in the
task's environment, before setup):

    python3 s3copy.py s3://BUCKET[/KEY] DEST

An object's key names a file: it is written to DEST. Otherwise the key is a prefix and every
object under it is written below DEST as SkyPilot copies a bucket's folder. The credentials are
the node's own, as boto3 finds them (the machine's instance role, or the variables the task's
envs set); never Corral's. boto3 is imported here only: the agent itself needs nothing but
the standard library, and a node without boto3 fails with one clear line.
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath


def copy(source: str, dest: Path) -> int:
    """Copy ``source`` to ``dest``; the number of objects copied. Raises RuntimeError."""
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        raise RuntimeError(
            "boto3 is not installed on the node: s3:// file_mounts are copied with it "
            "(pip install boto3 in the node's image, or copy the data in setup)"
        ) from None
    bucket, _, key = source[len("s3://") :].partition("/")
    s3 = boto3.client("s3")
    try:
        if key and not key.endswith("/"):
            try:
                s3.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                    raise
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, key, str(dest))
                return 1
        prefix = key.rstrip("/") + "/" if key else ""
        copied = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = PurePosixPath(obj["Key"][len(prefix) :])
                if not rel.parts or rel.name == "" or ".." in rel.parts:
                    continue  # a folder marker, or a key that would climb out of DEST
                target = dest.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, obj["Key"], str(target))
                copied += 1
    except (BotoCoreError, ClientError) as exc:
        raise RuntimeError(f"{source}: {exc}") from None
    if copied == 0:
        raise RuntimeError(f"{source}: no such object, and no object under it")
    return copied


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[0].startswith("s3://"):
        sys.stderr.write("usage: python3 s3copy.py s3://BUCKET[/KEY] DEST\n")
        return 2
    try:
        n = copy(args[0], Path(args[1]))
    except (RuntimeError, OSError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stderr.write(f"{args[0]}: {n} object(s) copied\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
