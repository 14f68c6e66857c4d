"""The agent's processes: a SIGKILLed group is waited for until its members have exited, so an
assignment's result never reports processes gone that are still there; a copy or a clone runs
with the heartbeat going."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.services.agent.bundle import BundleError, clone
from corral.services.agent.pgroup import await_group_gone, group_alive, kill_group, kill_group_now
from corral.services.agent.processes import run_beating


def _group(script: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 5
    # Wait until the shell's own child exists (the group has two members).
    while time.monotonic() < deadline:
        members = [p for p in os.listdir("/proc") if p.isdigit() and _pgrp(int(p)) == child.pid]
        if len(members) >= 2:
            return child
        time.sleep(0.01)
    raise AssertionError("the group never had its second member")


def _pgrp(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def test_a_killed_group_is_gone_once_await_returns() -> None:
    child = _group("trap '' TERM; sleep 60 & wait")
    assert kill_group_now(child.pid, 2.0)  # the leader, a zombie until reaped, counts as gone
    child.wait()
    live = [
        p
        for p in os.listdir("/proc")
        if p.isdigit() and _pgrp(int(p)) == child.pid and _state(int(p)) not in ("Z", "")
    ]
    assert live == []


def test_a_group_that_lives_on_is_reported_after_the_timeout() -> None:
    child = _group("sleep 60 & wait")
    try:
        started = time.monotonic()
        assert not await_group_gone(child.pid, 0.2)
        assert 0.2 <= time.monotonic() - started < 2.0
        assert group_alive(child.pid)
    finally:
        kill_group(child.pid, signal.SIGKILL)
        child.wait()
        await_group_gone(child.pid, 2.0)


def test_a_group_that_never_was_is_gone_at_once() -> None:
    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait()
    started = time.monotonic()
    assert await_group_gone(child.pid, 5.0)
    assert time.monotonic() - started < 1.0


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def test_run_beating_calls_wait_while_the_child_runs_and_keeps_its_stderr() -> None:
    """A copy or a clone is run with the heartbeat going: ``wait`` is called until it ends
    (a big copy had the agent silent for its whole length, and the node was taken for lost)."""
    calls: list[float] = []

    def wait(child: subprocess.Popen[bytes]) -> bool:
        calls.append(time.monotonic())
        time.sleep(0.05)
        return True

    script = "sleep 0.6; echo first >&2; head -c 20000 /dev/zero | tr '\\0' x >&2; echo; exit 3"
    code, said = run_beating(["bash", "-c", script], None, wait, lambda c: -1)
    assert code == 3
    assert len(calls) >= 8, calls  # about 0.6 s of 0.05 s waits: called throughout
    assert len(said) <= 4096 and said.endswith("x" * 100)  # the tail, not a full pipe's stall


def test_run_beating_stops_the_child_when_the_agent_stops() -> None:
    stopped: list[int] = []

    def stop(child: subprocess.Popen[bytes]) -> int:
        kill_group(child.pid, signal.SIGKILL)
        child.wait()
        stopped.append(child.pid)
        return 137

    started = time.monotonic()
    code, _ = run_beating(["sleep", "30"], None, lambda c: False, stop)
    assert (code, len(stopped)) == (137, 1)
    assert time.monotonic() - started < 5


def test_clone_runs_git_through_the_runner_it_is_given(tmp_path: Path) -> None:
    ran: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str]:
        ran.append(argv)
        return (0, "") if argv[1] == "clone" else (128, "fatal: no such ref v9")

    with pytest.raises(BundleError, match=r"git -C .*fatal: no such ref v9"):
        clone("https://example.invalid/repo.git", "v9", tmp_path / "wd", run)
    assert [argv[1] for argv in ran] == ["clone", "-C"]


def test_git_and_docker_get_a_double_dash_before_what_the_task_named(tmp_path: Path) -> None:
    """Issue #47 item 7: the task's URL, ref and image reach git's and docker's command lines;
    `--` ends their options there, so none is read as one even if the task's check missed it."""
    from corral.services.agent.container import run_argv

    ran: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str]:
        ran.append(argv)
        return 0, ""

    clone("https://example.invalid/repo.git", "v9", tmp_path / "wd", run)
    wd = str(tmp_path / "wd")
    assert ran == [
        ["git", "clone", "--quiet", "--", "https://example.invalid/repo.git", wd],
        ["git", "-C", wd, "checkout", "--quiet", "v9", "--"],
    ]
    argv = run_argv("docker", "corral-i", "ubuntu:22.04", None, {"A": "1"})
    assert argv[-6:] == ["-e", "A", "--", "ubuntu:22.04", "sleep", "infinity"]
    assert argv[argv.index("--") + 1] == "ubuntu:22.04"
