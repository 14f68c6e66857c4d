"""docker-compose.yml validates offline and holds every process Corral runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

SERVICES = {"redis", "api", "scheduler", "provisioner", "autoscaler", "beat", "flower"}
ENV = {"CORRAL_API_TOKEN": "t", "CORRAL_FLOWER_BASIC_AUTH": "u:p", "PATH": "/usr/bin:/bin"}


def test_compose_file_validates_offline() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed; run ops/setup.sh")
    done = subprocess.run([exe, "config", "-q"], cwd=REPO, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    services = subprocess.run(
        [exe, "config", "--services"], cwd=REPO, env=ENV, capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(services) == SERVICES


def test_compose_refuses_to_run_without_secrets() -> None:
    exe = shutil.which("docker-compose") or pytest.fail("docker-compose is not installed")
    done = subprocess.run(
        [exe, "config", "-q"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "CORRAL_API_TOKEN" in done.stderr


def test_redis_keeps_an_append_only_file_and_workers_take_their_roles() -> None:
    spec = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "--appendonly" in spec["services"]["redis"]["command"]
    roles = {
        name: spec["services"][name]["command"][-1]
        for name in ("scheduler", "provisioner", "autoscaler")
    }
    assert roles == {"scheduler": "schedule", "provisioner": "provision", "autoscaler": "autoscale"}
    assert (REPO / "ops" / "Dockerfile").exists()
