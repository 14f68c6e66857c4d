"""Bundles kept in an S3 bucket (CORRAL_BUNDLE_STORE=s3://...), against moto's server as
tests/integration/test_aws_provider.py runs it: the store alone, then a real installation whose
API writes the bucket and whose local machine's agent reads its bundle from it."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import redis

from corral.services.state.blobs import S3Blobs, open_blobs
from corral.services.state.bundles import BundleStore, QuotaExceeded

from fakes.aws_faults import FaultyMoto
from harness import LOCAL_ONLY, System, kill_agents, wait_for

pytestmark = pytest.mark.integration

LOCAL_CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def moto() -> Iterator[FaultyMoto]:
    with FaultyMoto() as server:
        yield server


@pytest.fixture
def bucket(moto: FaultyMoto, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    name = f"bundles-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def workdir_bundle(text: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("workdir/hello.txt")
        info.size = len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    return gzip.compress(raw.getvalue(), mtime=0)


def test_the_store_keeps_objects_per_project_under_its_prefix(
    moto: FaultyMoto, bucket: str, redis_url: str
) -> None:
    blobs = open_blobs(f"s3://{bucket}/corral/b", endpoint_url=moto.url)
    assert isinstance(blobs, S3Blobs)
    store = BundleStore(redis.Redis.from_url(redis_url), f"s3t-{bucket}", blobs, 1024 * 1024)
    data = workdir_bundle("in-the-bucket")
    sha = hashlib.sha256(data).hexdigest()
    assert store.put("team-a", sha, data) is True
    s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1")
    got = s3.get_object(Bucket=bucket, Key=f"corral/b/team-a/{sha}")["Body"].read()
    assert got == data
    assert store.get("team-a", sha) == data and store.get("team-b", sha) is None
    big = gzip.compress(os.urandom(1024 * 1024), mtime=0)
    with pytest.raises(QuotaExceeded):
        store.put("team-a", hashlib.sha256(big).hexdigest(), big)
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert [o["Key"] for o in listed] == [f"corral/b/team-a/{sha}"]  # the refused one is not
    assert blobs.get(f"team-a/{'0' * 64}") is None


def test_an_installation_keeps_bundles_in_the_bucket_and_its_machine_reads_them(
    moto: FaultyMoto, bucket: str, redis_server: Any, tmp_path: Path
) -> None:
    env = {
        **LOCAL_ONLY,
        **CREDENTIALS,
        "AWS_DEFAULT_REGION": "us-east-1",
        "CORRAL_BUNDLE_STORE": f"s3://{bucket}/b",
        "CORRAL_AWS_ENDPOINT_URL": moto.url,
    }
    system = System(tmp_path, redis_server.url, LOCAL_CLOUD, env)
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_beat()
        data = workdir_bundle("read-from-s3")
        flag = tmp_path / "go.flag"
        sha = hashlib.sha256(data).hexdigest()
        headers = {"Authorization": f"Bearer {system.token}"}
        with httpx.Client(base_url=system.api_url, headers=headers, timeout=60) as c:
            put = c.put(f"/v1/bundles/{sha}", content=data)
            assert put.status_code == 201, put.text
            task = {
                "name": "s3-files",
                "resources": {"cloud": "local", "instance_type": "cpu-2"},
                "bundle": {"sha256": sha, "size_bytes": len(data), "workdir": True},
                "run": f"while [ ! -f {flag} ]; do sleep 0.1; done; cat hello.txt",
            }
            rid = c.post("/v1/requests", json={"task": task}).json()["id"]
            system.wait_state(rid, {"RUNNING"}, 90)
            # A job exec'd with a workdir of its own (corral exec ID task.yaml): the local
            # machine's agent reads its bundle from the same bucket as it starts.
            job_data = workdir_bundle("job-read-from-s3")
            job_sha = hashlib.sha256(job_data).hexdigest()
            assert c.put(f"/v1/bundles/{job_sha}", content=job_data).status_code == 201
            bundle = {"sha256": job_sha, "size_bytes": len(job_data), "workdir": True}
            queued = c.post(
                f"/v1/requests/{rid}/jobs", json={"run": "cat hello.txt", "bundle": bundle}
            )
            assert queued.status_code == 201, queued.text
            flag.touch()

            def ended() -> bool:
                state = c.get(f"/v1/requests/{rid}").json()["state"]
                return state in {"SUCCEEDED", "FAILED"}

            wait_for(ended, 90, "the job to end")
            logs = c.get(f"/v1/requests/{rid}/logs").text
            assert c.get(f"/v1/requests/{rid}").json()["state"] == "SUCCEEDED", logs
            job = c.get(f"/v1/requests/{rid}/jobs").json()["jobs"][1]
            said = c.get(f"/v1/execs/{job['execs'][0]}").json()["output"]
        assert "read-from-s3" in logs
        assert (job["state"], said) == ("SUCCEEDED", "job-read-from-s3"), job
        s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1")
        assert s3.get_object(Bucket=bucket, Key=f"b/_none/{sha}")["Body"].read() == data
        assert not (tmp_path / "bundles").exists()  # nothing in the folder store
    finally:
        system.stop(grace_s=0)
        kill_agents(system)
