"""docker-compose.yml validates offline, holds every process Corral runs, gives each secret
only to the containers that use it, and its Redis refuses a client without the password (the
compose file's own Redis command and health check, run here against a real redis-server)."""

from __future__ import annotations

import shutil
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import free_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

SERVICES = {"redis", "api", "scheduler", "provisioner", "autoscaler", "beat", "flower"}
PASSWORD = "0123456789abcdef0123456789abcdef"
SECRETS = {
    "CORRAL_REDIS_PASSWORD": PASSWORD,
    "CORRAL_API_TOKEN": "token-for-the-api-only",
    "CORRAL_FLOWER_BASIC_AUTH": "u:flower-only",
}
ENV = {**SECRETS, "PATH": "/usr/bin:/bin"}


def compose(*args: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose") or pytest.fail("docker-compose is not installed")
    return subprocess.run([exe, *args], cwd=REPO, env=env, capture_output=True, text=True)


@cache
def resolved() -> dict[str, Any]:
    """The compose file as docker-compose reads it: anchors merged, variables filled in
    (callers must not change it)."""
    done = compose("config")
    assert done.returncode == 0, done.stderr
    spec: dict[str, Any] = yaml.safe_load(done.stdout)
    return spec


def test_compose_file_validates_offline() -> None:
    done = compose("config", "-q")
    assert done.returncode == 0, done.stderr
    assert set(compose("config", "--services").stdout.split()) == SERVICES


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_refuses_to_run_without_each_secret(missing: str) -> None:
    done = compose("config", "-q", env={k: v for k, v in ENV.items() if k != missing})
    assert done.returncode != 0
    assert missing in done.stderr


def test_each_secret_reaches_only_the_containers_that_use_it() -> None:
    services = resolved()["services"]
    holders = {
        secret: {
            name
            for name, svc in services.items()
            if any(value in str(v) for v in (svc.get("environment") or {}).values())
        }
        for secret, value in SECRETS.items()
    }
    assert holders["CORRAL_API_TOKEN"] == {"api"}
    assert holders["CORRAL_FLOWER_BASIC_AUTH"] == {"flower"}
    # Every Corral process talks to Redis, so each has its password, in its URL.
    assert holders["CORRAL_REDIS_PASSWORD"] == SERVICES
    for name in SERVICES - {"redis"}:
        url = services[name]["environment"]["CORRAL_REDIS_URL"]
        assert url == f"redis://:{PASSWORD}@redis:6379/0", name
    # The password is nowhere on a command line (the host's `ps` shows those to everyone).
    for name, svc in services.items():
        assert PASSWORD not in " ".join(svc.get("command") or []), name


def test_workers_take_their_roles() -> None:
    services = resolved()["services"]
    roles = {
        name: services[name]["command"][-1] for name in ("scheduler", "provisioner", "autoscaler")
    }
    assert roles == {"scheduler": "schedule", "provisioner": "provision", "autoscaler": "autoscale"}
    assert (REPO / "ops" / "Dockerfile").exists()


@pytest.fixture
def compose_redis(tmp_path: Path) -> Any:
    """The compose file's Redis command, run by sh as the container would run it, on a free
    port in a folder of this test's own (the only two changes)."""
    exe = shutil.which("redis-server") or pytest.fail("redis-server is not installed")
    redis = resolved()["services"]["redis"]
    sh, dash_c, script = redis["command"]
    assert (sh, dash_c) == ("sh", "-c")
    script = script.replace("$$", "$")  # compose's escape for a literal $
    assert "/tmp/redis-auth.conf" in script and "--appendonly yes" in script
    port = free_port()
    script = script.replace("/tmp/redis-auth.conf", str(tmp_path / "auth.conf"))
    script = script.replace("redis-server", exe, 1) + f" --port {port} --dir {tmp_path}"
    env = {"PATH": "/usr/bin:/bin", **redis["environment"]}
    proc = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not ping(port, PASSWORD).startswith("PONG"):
            assert proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not answer"
            time.sleep(0.1)
        yield port, redis, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def ping(port: int, password: str | None) -> str:
    env = {"PATH": "/usr/bin:/bin"} | ({"REDISCLI_AUTH": password} if password else {})
    done = subprocess.run(
        ["redis-cli", "-p", str(port), "ping"], env=env, capture_output=True, text=True
    )
    return done.stdout + done.stderr


def test_compose_redis_wants_the_password_and_its_health_check_knows_it(
    compose_redis: tuple[int, dict[str, Any], Path],
) -> None:
    port, redis, folder = compose_redis
    assert "NOAUTH" in ping(port, None)
    assert "WRONGPASS" in ping(port, "not-the-password")
    assert ping(port, PASSWORD).startswith("PONG")
    # The config file holding the password is its owner's only.
    assert (folder / "auth.conf").stat().st_mode & 0o077 == 0
    kind, check = redis["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    check = check.replace("redis-cli", f"redis-cli -p {port}")

    def healthy(env: dict[str, str]) -> bool:
        return subprocess.run(["sh", "-c", check], env=env, capture_output=True).returncode == 0

    assert healthy({"PATH": "/usr/bin:/bin", **redis["environment"]})
    assert not healthy({"PATH": "/usr/bin:/bin", "REDISCLI_AUTH": "wrong"})
    assert not healthy({"PATH": "/usr/bin:/bin"})
