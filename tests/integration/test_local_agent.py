"""The node agent on its own: a real process reading a hand-written record from real Redis."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral.services.providers.local.state import CloudState, InstanceRecord

pytestmark = pytest.mark.integration

PREFIX = "agent-test"


class Node:
    """One agent process started by the test, with its record and log."""

    def __init__(self, state: CloudState, rec: InstanceRecord, proc: subprocess.Popen[bytes]):
        self.state = state
        self.rec = rec
        self.proc = proc

    @property
    def log(self) -> str:
        return Path(self.rec.log_path).read_text()

    def record(self) -> InstanceRecord:
        rec = self.state.record(self.rec.id)
        assert rec is not None
        return rec

    def heartbeat(self) -> dict[str, Any] | None:
        raw = self.state.r.get(self.state.keys.heartbeat(self.rec.id))
        return json.loads(raw) if raw else None

    def wait(self, timeout_s: float = 15.0) -> int:
        return self.proc.wait(timeout_s)


def wait_for(predicate: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def start_agent(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Write a record, start the agent on it; afterwards kill whatever is left of every node."""
    state = CloudState(redis.Redis.from_url(redis_url, decode_responses=True), PREFIX)
    nodes: list[Node] = []

    def start(*, heartbeat_s: float = 0.1, kill_grace_s: float = 1.0, **fields: Any) -> Node:
        iid = "li-" + uuid.uuid4().hex[:12]
        rec = InstanceRecord(
            id=iid,
            request_id="req",
            attempt_id="att",
            region="r",
            zone="z",
            instance_type="gpu-l4-1",
            market="on_demand",
            pool=state.keys.pool("z", "gpu-l4-1"),
            log_path=str(tmp_path / f"{iid}.log"),
            created_at=time.time(),
            vcpus=4,
            memory_gib=16,
            accelerators={"L4": 1},
            **{"envs": {"CORRAL_INSTANCE_ID": iid}, **fields},
        )
        state.r.hset(state.keys.record(iid), mapping=rec.to_hash())
        state.r.sadd(rec.pool, iid)
        argv = [
            sys.executable, "-m", "corral.services.providers.local.agent",
            "--instance-id", iid, "--redis-url", redis_url, "--prefix", PREFIX,
            "--heartbeat-s", str(heartbeat_s), "--heartbeat-ttl-s", "2",
            "--kill-grace-s", str(kill_grace_s),
        ]  # fmt: skip
        with open(rec.log_path, "ab") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        node = Node(state, rec, proc)
        nodes.append(node)
        return node

    yield start
    for node in nodes:
        for pgid in (
            node.proc.pid,
            node.state.r.hget(node.state.keys.record(node.rec.id), "child_pid"),
        ):
            if pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pgid), signal.SIGKILL)
        node.proc.wait(5)


def test_an_idle_node_heartbeats_its_resources_until_sigterm(
    start_agent: Callable[..., Node],
) -> None:
    node = start_agent()
    first = wait_for(node.heartbeat, what="a heartbeat")
    assert first["activity"] == "idle"
    assert (first["vcpus"], first["memory_gib"], first["accelerators"]) == (4, 16, {"L4": 1})
    assert first["pid"] == node.proc.pid
    ttl_ms = node.state.r.pttl(node.state.keys.heartbeat(node.rec.id))
    assert 0 < ttl_ms <= 2000
    wait_for(lambda: (b := node.heartbeat()) and b["ts"] > first["ts"], what="a newer beat")
    # The first beat's time (this read may have missed that beat), kept by the later ones.
    first_at = node.record().first_heartbeat_at
    assert first_at is not None and first_at <= first["ts"]
    assert node.proc.poll() is None  # a service stays up

    started = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    assert node.wait(5) == 0
    assert time.monotonic() - started < 2  # prompt, not a heartbeat or a grace period later
    final = node.record()
    assert (final.state, final.exit_code, final.end_reason) == ("terminated", None, "terminated")
    assert node.heartbeat()["activity"] == "exited"
    assert node.state.r.scard(node.rec.pool) == 0  # the capacity slot is free


def test_setup_then_run_with_envs_and_workdir(
    start_agent: Callable[..., Node], tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    node = start_agent(
        setup="echo setup-in-$(pwd); echo built > artifact",
        run='echo "run sees $GREETING and $(cat artifact)"; exit 3',
        envs={"CORRAL_INSTANCE_ID": "x", "GREETING": "hello world"},
        workdir=str(workdir),
    )
    assert node.wait() == 3
    log = node.log
    assert f"setup-in-{workdir}\n" in log
    assert "run sees hello world and built\n" in log
    assert log.index("setup-in-") < log.index("run sees")
    final = node.record()
    assert (final.state, final.exit_code, final.end_reason) == ("terminated", 3, "completed")


def test_a_failed_setup_skips_run(start_agent: Callable[..., Node]) -> None:
    node = start_agent(setup="echo trying; exit 4", run="echo SHOULD-NOT-RUN")
    assert node.wait() == 4
    assert "trying" in node.log and "SHOULD-NOT-RUN" not in node.log
    final = node.record()
    assert (final.exit_code, final.end_reason) == (4, "setup_failed")


def test_a_missing_workdir_is_said_and_the_run_goes_on(
    start_agent: Callable[..., Node], tmp_path: Path
) -> None:
    node = start_agent(run="echo ran", workdir=str(tmp_path / "absent"))
    assert node.wait() == 0
    assert "does not exist" in node.log and "ran\n" in node.log
    assert node.record().exit_code == 0


def test_sigterm_stops_the_run_and_its_whole_process_group(
    start_agent: Callable[..., Node],
) -> None:
    node = start_agent(run="trap 'echo got-term; exit 9' TERM; sleep 60 & wait")
    wait_for(lambda: node.record().child_pid, what="the run to start")
    wait_for(lambda: (b := node.heartbeat()) and b["activity"] == "running", what="running")
    child = node.record().child_pid
    node.proc.send_signal(signal.SIGTERM)
    assert node.wait(5) == 9
    assert "got-term" in node.log
    final = node.record()
    assert (final.exit_code, final.end_reason) == (9, "terminated")
    wait_for(lambda: not group_exists(child), timeout_s=3, what="the background sleep to go")


def test_a_run_that_ignores_sigterm_is_killed_after_the_grace(
    start_agent: Callable[..., Node],
) -> None:
    node = start_agent(run="trap '' TERM; sleep 60", kill_grace_s=0.5)
    wait_for(lambda: (b := node.heartbeat()) and b["activity"] == "running", what="running")
    started = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    node.wait(5)
    assert 0.4 < time.monotonic() - started < 3
    assert node.record().exit_code == 128 + signal.SIGKILL


def test_no_record_means_nothing_to_run(redis_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "corral.services.providers.local.agent",
         "--instance-id", "li-missing", "--redis-url", redis_url, "--prefix", PREFIX],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no record for li-missing" in proc.stderr


def test_the_agent_loads_neither_celery_nor_pydantic() -> None:
    code = (
        "import sys, corral.services.providers.local.agent as a; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'celery', 'pydantic', 'kombu'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_services_setup_background_lives_on_and_is_stopped_with_the_machine(
    start_agent: Callable[..., Node], tmp_path: Path
) -> None:
    # A Ray node: `ray start` leaves daemons in setup's process group, and Ray's workers start
    # sessions of their own (setsid). Both live while the machine runs; at its end the agent
    # stops the group and every process carrying the machine's instance id.
    pids = tmp_path / "pids"
    setup = f"sleep 300 & echo $! >> {pids}; setsid sleep 301 & echo $! >> {pids}; echo setup-done"
    node = start_agent(setup=setup, kill_grace_s=0.5)
    wait_for(lambda: (b := node.heartbeat()) and b["activity"] == "idle", what="idle")
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, what="the pids")
    in_group, own_session = (int(p) for p in pids.read_text().split())
    time.sleep(0.3)
    assert _alive(in_group) and _alive(own_session)  # kept after setup
    node.proc.send_signal(signal.SIGTERM)
    assert node.wait(10) == 0
    wait_for(lambda: not _alive(in_group) and not _alive(own_session), 5, "both to be gone")
    assert "stopping the node's services" in node.log
