"""The test harness's zygote (tests/zygote.py): a command forked from it behaves as the same
command exec'd, and what it starts is a process of its own that the harness can stop. (That
it loads nothing that reads the environment at import, the zygote checks each time it starts:
it refuses to serve otherwise.)"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from harness import CORRAL, LOCAL_ONLY, free_port, wait_for
from zygote import Zygote

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def zygote() -> Zygote:
    made = Zygote()
    yield made  # type: ignore[misc]
    made.close()


def _exec(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "{bad}"],  # a wrong file: exit 2, the file, line and field named
        ["validate", "{good}"],
        ["status", "--json"],  # no API to reach: its own exit code and message
        ["no-such-command"],
        ["--version"],
    ],
)
def test_a_forked_command_prints_and_exits_as_the_same_command_execd(
    zygote: Zygote, tmp_path: Path, args: list[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnum_nodes: -3\n")
    good = tmp_path / "good.yaml"
    good.write_text("name: x\nresources: {cloud: local}\nrun: echo hi\n")
    args = [a.format(bad=bad, good=good) for a in args]
    env = {
        **os.environ,
        "CORRAL_HOME": str(tmp_path / "home"),
        "CORRAL_API_URL": f"http://127.0.0.1:{free_port()}",
        "CORRAL_API_TOKEN": "t",
    }
    forked = zygote.run([CORRAL, *args], env, 60)
    execd = _exec(args, env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        execd.returncode,
        execd.stdout,
        execd.stderr,
    )


def test_a_forked_process_is_a_session_of_its_own_and_its_exit_code_is_reported(
    zygote: Zygote, tmp_path: Path, redis_url: str
) -> None:
    log = tmp_path / "api.log"
    env = {**os.environ, "CORRAL_HOME": str(tmp_path), "CORRAL_REDIS_URL": redis_url, **LOCAL_ONLY}
    proc = zygote.spawn([CORRAL, "run", "api", "--port", str(free_port())], env, log)
    assert os.getpgid(proc.pid) == proc.pid and os.getsid(proc.pid) == proc.pid
    wait_for(lambda: "startup complete" in log.read_text(), 30, "the forked API to start")
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)
    # uvicorn's clean stop, then the signal raised again (as `corral run api` exec'd ends)
    assert proc.wait(30) == -signal.SIGTERM
    assert "Finished server process" in log.read_text()
    crashed = zygote.spawn([CORRAL, "run", "api", "--port", str(free_port())], env, log)
    wait_for(lambda: log.read_text().count("api listening on") == 2, 30, "the second API")
    os.killpg(crashed.pid, signal.SIGKILL)
    assert crashed.wait(30) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([CORRAL, "run", "api", "--port", str(free_port())], env, 0.5)
