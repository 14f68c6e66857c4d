"""The agent's process groups: a SIGKILLed group is waited for until its members have exited,
so an assignment's result never reports processes gone that are still there."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from corral.services.agent.processes import (
    await_group_gone,
    group_alive,
    kill_group,
    kill_group_now,
)


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
