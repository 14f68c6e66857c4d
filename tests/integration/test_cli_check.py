"""`corral check`, as SkyPilot's `sky check`: each cloud's credentials, who they are and what
fails, asked of the real SDKs against moto's EC2 and STS and the Compute API fake (the console
script in a process of its own, its settings from the environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.aws_faults import FaultyMoto
from fakes.gcp_compute import FakeCompute

pytestmark = pytest.mark.integration

CORRAL = str(Path(sys.executable).parent / "corral")


@pytest.fixture(scope="module")
def moto() -> Iterator[FaultyMoto]:
    with FaultyMoto() as server:
        yield server


def _check(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "AWS_", "GOOGLE_"))}
    base.update({"HOME": str(home), "CORRAL_HOME": str(home / ".corral"), "KUBECONFIG": ""})
    base.update(env)
    return subprocess.run(
        [CORRAL, "check", *args], capture_output=True, text=True, env=base, timeout=120
    )


def test_check_names_each_clouds_identity_and_what_fails(moto: FaultyMoto, tmp_path: Path) -> None:
    with FakeCompute(project="check-project") as gcp:
        done = _check(
            tmp_path,
            "--json",
            CORRAL_CLOUDS='["local", "aws", "gcp"]',
            CORRAL_AWS_ENDPOINT_URL=moto.url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="not-a-real-secret-value",
            AWS_DEFAULT_REGION="us-east-1",
            CORRAL_GCP_API_ENDPOINT=gcp.url,
            CORRAL_GCP_PROJECT="check-project",
            CORRAL_GCP_ANONYMOUS="true",
        )
    assert done.returncode == 0, done.stderr
    rows = {r["cloud"]: r for r in json.loads(done.stdout)["clouds"]}
    assert set(rows) == {"local", "aws", "gcp", "kubernetes"}
    aws = rows["aws"]
    assert aws["ready"] and aws["enabled"] and aws["identity"].startswith("arn:aws:")
    assert "EC2 answered in" in aws["detail"]
    assert rows["gcp"]["ready"] and rows["gcp"]["identity"] == "project check-project"
    assert rows["local"]["ready"] and "types in" in rows["local"]["detail"]
    kube = rows["kubernetes"]
    assert not kube["enabled"] and not kube["ready"] and "no kubeconfig context" in kube["detail"]
    assert "not-a-real-secret-value" not in done.stdout + done.stderr


def test_without_credentials_each_cloud_says_where_it_looked(tmp_path: Path) -> None:
    done = _check(tmp_path, "aws", "gcp", CORRAL_CLOUDS='["aws", "gcp"]')
    assert done.returncode == 1, done.stdout + done.stderr  # no enabled cloud is ready
    assert "no credentials found (boto3 looks in" in done.stdout
    assert "GOOGLE_APPLICATION_CREDENTIALS" in done.stdout
    assert "Launches here may use: no cloud" in done.stdout
    assert "Traceback" not in done.stderr


def test_an_unknown_cloud_is_exit_2(tmp_path: Path) -> None:
    done = _check(tmp_path, "azure")
    assert done.returncode == 2 and "no cloud azure (clouds: local, aws, gcp" in done.stderr
