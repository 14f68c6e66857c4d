"""The local cloud's launcher: agents forked from one warm process, named after their instance,
outliving the launcher; a launcher that is gone is started again on the next launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from corral.services.providers.base import LaunchSpec
from corral.services.providers.local import launcher
from corral.services.providers.local.processes import pid_belongs_to
from corral.shared.config.localcloud import load_local_cloud

from harness import REPO, wait_for
from local_processes import is_launcher, local_provider, processes_of
from other_user import argv as other_user_argv
from other_user import needs_other_user

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux-only"),
]

CLOUD = load_local_cloud(REPO / "tests/fixtures/localcloud/runtime.yaml")


def _launchers() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and is_launcher(p)]


def _spec(run: str) -> LaunchSpec:
    return LaunchSpec(
        request_id="req-1",
        attempt_id=f"att-{uuid.uuid4().hex[:8]}",
        cloud="local",
        region="lab-east",
        zone="lab-east-a",
        instance_type="cpu-2",
        run=run,
    )


def _listening(name: str) -> bool:
    try:
        return launcher.ask(name, {"ping": True}, timeout_s=1.0) == {"pong": True}
    except launcher.GONE:  # a launcher that is exiting may break our request off
        return False


def test_agents_are_forked_named_and_outlive_their_launcher(redis_url: str, tmp_path: Path) -> None:
    with local_provider(CLOUD, redis_url, tmp_path / "logs") as provider:
        assert provider._launcher is not None
        before = set(_launchers())
        [inst] = provider.launch(_spec("sleep 30"))
        assert inst.pid is not None
        name = Path(f"/proc/{inst.pid}/comm").read_text().strip()
        assert name == launcher.comm_name(inst.provider_id)
        assert pid_belongs_to(inst.pid, inst.provider_id)
        assert not pid_belongs_to(inst.pid, "li-000000000000")  # another instance's name
        [started] = set(_launchers()) - before
        # The launcher goes; the machine stays, and the next launch brings a launcher back.
        os.kill(started, signal.SIGKILL)
        wait_for(lambda: started not in _launchers(), 5, "the launcher to be gone")
        assert pid_belongs_to(inst.pid, inst.provider_id)
        wait_for(
            lambda: provider.state.record(inst.provider_id).first_heartbeat_at is not None,  # type: ignore[union-attr]
            10,
            "the agent's first heartbeat",
        )
        [second] = provider.launch(_spec("exit 3"))
        assert second.pid is not None and second.pid != inst.pid
        assert len(set(_launchers()) - before) == 1
        # An agent that ends is reaped by the launcher: no zombie stays behind.
        wait_for(lambda: processes_of(second.provider_id) == [], 10, "the job's agent to end")
        rec = provider.state.record(second.provider_id)
        assert rec is not None and rec.exit_code == 3
    # The provider's teardown stopped the launcher it used.
    wait_for(lambda: set(_launchers()) <= before, 5, "the launcher to stop")


def test_a_launcher_name_is_taken_once(redis_url: str, tmp_path: Path) -> None:
    """Two launchers of one name: the second exits at once and the first serves."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "agent.log"
    request = {
        "argv": ["--instance-id", "li-nosuchrecord"],
        "log": str(log),
        "env": {"CORRAL_REDIS_URL": redis_url},
    }
    pid = launcher.start_agent(name, sys.executable, {**request, "name": "li-nosuchrecord"})
    assert pid > 0
    assert launcher.main(["--name", name, "--idle-exit-s", "5"]) == 0  # returns at once
    wait_for(lambda: "no record for li-nosuchrecord" in log.read_text(), 10, "the agent's line")
    assert _listening(name)
    with pytest.raises(launcher.LauncherError, match="bad: \\['log'\\]"):
        launcher.ask(name, {"argv": [], "name": "li-x"})  # refused, nothing forked
    with pytest.raises(launcher.LauncherError, match=r"cannot open the log .*nosuchdir"):
        launcher.ask(name, {**request, "name": "li-x", "log": str(tmp_path / "nosuchdir" / "a")})
    launcher.stop(name)
    wait_for(lambda: not _listening(name), 5, "the launcher to stop")


SQUATTER = r"""
import json, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1].encode().replace(b"@", b"\0", 1))
listener.listen(1)
print("listening", flush=True)
listener.settimeout(20)
conn, _ = listener.accept()
conn.settimeout(2)
try:
    got = conn.recv(65536)
except OSError:
    got = b""
print(json.dumps({"received": got.decode(errors="replace")}), flush=True)
"""


@needs_other_user
def test_a_launcher_name_taken_by_another_user_is_refused() -> None:
    """Issue 27: once our launcher exits idle, another user may bind its abstract name. The
    client asks the kernel who serves the socket (SO_PEERCRED) and sends nothing to a stranger:
    no command, no environment, no Redis URL."""
    name = f"squat-{uuid.uuid4().hex[:8]}"
    squatter = subprocess.Popen(
        other_user_argv(SQUATTER, "@" + launcher.address(name)[1:]),
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "listening"
        with pytest.raises(launcher.LauncherError, match="served by uid 65534"):
            launcher.ask(name, {"argv": ["run"], "env": {"CORRAL_REDIS_URL": "redis://:pw@x"}})
        out, _ = squatter.communicate(timeout=30)
        assert json.loads(out) == {"received": ""}
    finally:
        if squatter.poll() is None:
            squatter.kill()
            squatter.wait()
