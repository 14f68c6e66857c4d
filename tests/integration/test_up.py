"""`corral up` as a user runs it: everything starts, Flower sees the three roles, a dead
process is restarted, SIGTERM leaves no process, and a restart on the same home recovers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import FAST_TIMERS, Up, processes_of, wait_for
from other_user import needs_other_user, run_as_other

pytestmark = pytest.mark.integration


# `corral up` looks at its processes 5 times a second and restarts a dead one after 0.2 s (1 s
# each by default): the restart is said sooner, and the stop sent right after it is not held up
# by the backoff's sleep. (The stop's grace stays FAST_TIMERS' 2 s: the API, Flower and beat
# mostly exit within it by themselves, beat releasing its lock for the next start's beat; a
# shorter grace would SIGKILL them too.)
UP_TIMERS = {**FAST_TIMERS, "SUPERVISE_INTERVAL_S": "0.2", "RESTART_BACKOFF_S": "0.2"}


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _request(home: Path, request_id: str) -> dict[str, Any] | None:
    """The request as the API at the address and with the token `corral up` left in ``home``
    shows it (None while it does not answer): asked ten times a second while the installation
    starts, a `corral status` process per look took a core from it."""
    url = (home / "api-url").read_text().strip()
    token = (home / "api-token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        resp = httpx.get(f"{url}/v1/requests/{request_id}", headers=headers, timeout=10)
    except httpx.HTTPError:
        return None
    return resp.json() if resp.status_code == 200 else None


def test_up_runs_supervises_stops_and_recovers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = Up(home, timers=UP_TIMERS)
    try:
        up.wait_line(r"\[up\] api\s+http://127\.0\.0\.1:\d+")
        up.wait_line(r"\[up\] console\s+http://127\.0\.0\.1:\d+/console")
        flower_port = int(up.wait_line(r"\[up\] flower\s+http://127\.0\.0\.1:(\d+)").group(1))
        up.wait_line(r"API token in")
        token_file = home / "api-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert token_file.read_text().strip() not in up.output()
        password = (home / "flower-password").read_text().strip()
        assert password not in up.output()

        # A service through the CLI, on the address and token `corral up` left in CORRAL_HOME.
        task = tmp_path / "svc.yaml"
        task.write_text("name: svc\nresources: {cloud: local, instance_type: cpu-2}\n")
        launched = up.cli("launch", str(task), "--wait", "--timeout", "60", "--json")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        rid = re.search(r'"id": "([^"]+)"', launched.stdout).group(1)  # type: ignore[union-attr]

        # Flower: credentials required; all three roles and readable task names visible.
        flower = f"http://127.0.0.1:{flower_port}"
        assert httpx.get(f"{flower}/api/workers", timeout=10).status_code == 401
        auth = ("corral", password)

        def roles_seen() -> bool:
            resp = httpx.get(f"{flower}/api/workers?refresh=1", auth=auth, timeout=10)
            names = " ".join(resp.json()) if resp.status_code == 200 else ""
            return all(role in names for role in ("schedule", "provision", "autoscale"))

        wait_for(roles_seen, 60, "Flower to list the three worker roles")
        tasks = httpx.get(f"{flower}/api/tasks", auth=auth, timeout=10).json()
        names = {t["name"] for t in tasks.values()}
        # The service's first attempt runs inside its admit task (no hop when it comes up).
        assert "corral.schedule.admit" in names

        # A dead process is restarted, and the restart is said.
        [scheduler] = [
            p
            for p in processes_of(home)
            if b"\0--queues\0schedule\0" in Path(f"/proc/{p}/cmdline").read_bytes()
            and _ppid(p) == up.proc.pid
        ]
        os.kill(scheduler, signal.SIGKILL)
        up.wait_line(r"worker-schedule exited .*restarting", 30)

        # SIGTERM: everything stops, local instances included.
        shown = _request(home, rid)
        assert shown is not None
        [machine] = [i["id"] for i in shown["instances"] if i["state"] == "RUNNING"]
        assert up.stop() == 0
        assert "[up] stopped" in up.output()
        wait_for(lambda: processes_of(home) == [], 20, "every process of this home to exit")
        # Stopped, the installation leaves no address behind: a command says there is no API
        # and how to start one (not "connection refused" from a dead port).
        after = up.cli("status")
        assert after.returncode != 0
        assert "no Corral API address" in after.stderr and "corral up" in after.stderr
        assert not (home / "api-url").exists() and not (home / "redis-url").exists()

        # The same home again: the service that was running is found lost and relaunched.
        up = Up(home, timers=UP_TIMERS)
        up.wait_line(r"\[up\] api\s+http://")

        def recovered() -> bool:  # the machine of before the stop lost, another running
            shown = _request(home, rid)
            if shown is None or shown["state"] != "RUNNING":
                return False
            states = {i["id"]: i["state"] for i in shown["instances"]}
            others = [state for i, state in states.items() if i != machine]
            return states.get(machine) == "LOST" and "RUNNING" in others

        wait_for(recovered, 90, f"{rid} to be relaunched after the restart")
        # The CLI finds the new start's address in the home too.
        shown_by_cli = up.cli("status", rid, "--json")
        assert shown_by_cli.returncode == 0, shown_by_cli.stderr
        assert json.loads(shown_by_cli.stdout)["state"] == "RUNNING"
    finally:
        if up.proc.poll() is None:
            up.stop()
    wait_for(lambda: processes_of(home) == [], 20, "every process of this home to exit")


PROBE = r"""
import json, os, socket, sys
home, port = sys.argv[1], int(sys.argv[2])
seen = {}
for name in ("list_home", "read_token", "read_aof"):
    try:
        if name == "list_home":
            os.listdir(home)
        elif name == "read_token":
            open(os.path.join(home, "api-token")).read()
        else:
            os.listdir(os.path.join(home, "redis"))
        seen[name] = "allowed"
    except PermissionError:
        seen[name] = "denied"
with socket.create_connection(("127.0.0.1", port), 5) as conn:
    # What the escalation did: read the node secret, push a task message onto a queue.
    conn.sendall(b"*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n*3\r\n$5\r\nLPUSH\r\n$8\r\nschedule\r\n$1\r\nx\r\n")
    answer = b""
    while answer.count(b"\r\n") < 2:
        chunk = conn.recv(4096)
        if not chunk:
            break
        answer += chunk
seen["redis"] = answer.decode(errors="replace")
print(json.dumps(seen))
"""


@needs_other_user
def test_up_keeps_home_and_redis_from_other_users(tmp_path: Path) -> None:
    """Issue 27's local escalation replayed as uid 65534: CORRAL_HOME, its secrets, logs and
    Redis's append-only files are unreadable, and Redis refuses every command without its
    password (so nothing can be pushed onto a queue for the local cloud to run as us)."""
    # A parent any user can traverse, so only the home's own modes stand in the way.
    parent = Path(tempfile.mkdtemp(prefix="corral-home-", dir="/tmp"))
    parent.chmod(0o755)
    home = parent / "home"
    up = Up(home, timers=UP_TIMERS)
    try:
        up.wait_line(r"\[up\] api\s+http://127\.0\.0\.1:\d+")
        redis_line = up.wait_line(r"\[up\] redis\s+(\S+)").group(1)
        assert ":***@" in redis_line, redis_line  # a password, and it is not printed
        password = (home / "redis-password").read_text().strip()
        assert password not in up.output()
        task = tmp_path / "job.yaml"
        task.write_text("name: job\nresources: {cloud: local, instance_type: cpu-2}\nrun: echo 1\n")
        launched = up.cli("launch", str(task), "--wait", "--timeout", "60", "--json")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        wait_for(lambda: any((home / "redis").glob("**/*.aof*")), 20, "Redis's append-only file")

        # Every folder under the home is 0700 and every file 0600 or tighter.
        opened = [
            f"{p} {stat.S_IMODE(p.stat().st_mode):o}"
            for p in [home, *home.rglob("*")]
            if not p.is_symlink() and stat.S_IMODE(p.stat().st_mode) & 0o077
        ]
        assert opened == [], opened
        port = int(re.search(r":(\d+)/", redis_line).group(1))  # type: ignore[union-attr]
        seen = run_as_other(PROBE, str(home), str(port))
        assert seen["list_home"] == "denied"
        assert seen["read_token"] == "denied"
        assert seen["read_aof"] == "denied"
        assert seen["redis"].startswith("-NOAUTH"), seen["redis"]
        assert "-NOAUTH" in seen["redis"].split("\r\n", 1)[1], seen["redis"]
    finally:
        if up.proc.poll() is None:
            up.stop()
        wait_for(lambda: processes_of(home) == [], 20, "every process of this home to exit")
        shutil.rmtree(parent, ignore_errors=True)


def test_a_second_up_in_the_same_home_exits_2_and_the_firsts_machines_live_on(
    tmp_path: Path,
) -> None:
    """Issue 47 item 7, as a new user tried it: a second `corral up` in the same home started
    its own Redis on the first's append-only files, overwrote api-url and redis-url, and on its
    exit stopped the first's machines (a service went LOST). Now it exits 2 at once, naming
    the first's pid, and touches nothing; a lock left by a dead `up` is taken over."""
    import subprocess

    from harness import CORRAL

    home = tmp_path / "home"
    up = Up(home, timers=UP_TIMERS)
    try:
        up.wait_line(r"\[up\] api\s+http://127\.0\.0\.1:\d+")
        task = tmp_path / "svc.yaml"
        task.write_text("name: svc\nresources: {cloud: local, instance_type: cpu-2}\n")
        launched = up.cli("launch", str(task), "--wait", "--timeout", "60", "--json")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        rid = re.search(r'"id": "([^"]+)"', launched.stdout).group(1)  # type: ignore[union-attr]
        files = {name: (home / name).read_bytes() for name in ("api-url", "redis-url")}
        stamps = {name: (home / name).stat().st_mtime_ns for name in files}
        before = set(processes_of(home))

        second = subprocess.run(
            [CORRAL, "up"], env=up.env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {up.proc.pid}" in second.stderr, second.stderr
        assert str(home) in second.stderr and "[up]" not in second.stdout
        assert {name: (home / name).read_bytes() for name in files} == files
        assert {name: (home / name).stat().st_mtime_ns for name in files} == stamps
        assert set(processes_of(home)) <= before  # no Redis, API or worker of its own
        time.sleep(3)  # the first's monitor would see a stopped machine by now
        shown = _request(home, rid)
        assert shown is not None and shown["state"] == "RUNNING", shown
        assert [i["state"] for i in shown["instances"]] == ["RUNNING"], shown["instances"]
        assert up.proc.poll() is None
        assert up.stop() == 0
        wait_for(lambda: processes_of(home) == [], 20, "every process of this home to exit")

        # A lock whose holder died (here: a pid that has exited) is taken over.
        dead = subprocess.Popen(["true"])
        dead.wait()
        (home / "up.lock").write_text(f"{dead.pid}\n")
        up = Up(home, timers=UP_TIMERS)
        up.wait_line(r"\[up\] api\s+http://")
        assert (home / "up.lock").read_text().strip() == str(up.proc.pid)
    finally:
        if up.proc.poll() is None:
            up.stop()
    wait_for(lambda: processes_of(home) == [], 20, "every process of this home to exit")
