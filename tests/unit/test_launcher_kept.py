"""The local launcher's kept starts (services/providers/local/launcher.Kept): forked ahead of
their boot's end in order, counted as kept until that end, a waiting agent killed by a cancel
only while it still waits. The agents here are real `sleep` processes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from corral.services.providers.local.launcher import LEAD_S, Kept, lead_s


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


def _request(name: str) -> dict[str, object]:
    return {"name": name, "argv": [], "log": "-"}


def test_the_lead_is_at_most_half_the_boot() -> None:
    assert lead_s(60.0) == LEAD_S == 5.0
    assert lead_s(1.0) == 0.5


def test_starts_are_forked_by_their_fork_time_and_kept_until_their_boots_end(
    sleeper: subprocess.Popen[bytes],
) -> None:
    kept = Kept()
    kept.add(110.0, _request("late"), lead=5.0)  # forked at 105
    kept.add(103.0, _request("soon"), lead=1.5)  # forked at 101.5
    kept.add(108.0, _request("mid"), lead=5.0)  # forked at 103
    assert kept.wait_s(100.0) == pytest.approx(1.5)
    assert [r["name"] for _, r in kept.to_fork(104.0)] == ["soon", "mid"]
    kept.forked("mid", 108.0, sleeper.pid)
    assert kept.names() == ["late", "mid"] and len(kept) == 2
    assert kept.wait_s(104.0) == pytest.approx(1.0)  # the next fork, not a boot's end
    kept.settle(107.9)
    assert kept.names() == ["late", "mid"]
    kept.settle(108.0)  # its boot ended: on its own now
    assert kept.names() == ["late"]
    assert kept.cancel(["mid"]) == 0 and sleeper.poll() is None


def test_a_cancel_kills_an_agent_that_waits_and_drops_one_not_forked(
    sleeper: subprocess.Popen[bytes],
) -> None:
    kept = Kept()
    kept.add(1e12, _request("waits"), lead=5.0)  # a boot's end far ahead (monotonic time)
    kept.add(1e12, _request("kept"), lead=0.0)
    [(due, request)] = list(kept.to_fork(1e12 - 5.0))
    kept.forked(str(request["name"]), due, sleeper.pid)
    assert kept.cancel(["waits", "kept", "unknown"]) == 2
    assert sleeper.wait(5) == -9  # SIGKILL: it had run nothing
    assert kept.names() == [] and len(kept) == 0 and kept.wait_s(0.0) is None


def test_drop_all_kills_every_agent_that_waits(sleeper: subprocess.Popen[bytes]) -> None:
    kept = Kept()
    kept.add(1e12, _request("a"), lead=5.0)
    kept.add(1e12 + 1, _request("b"), lead=5.0)
    [(due, request)] = list(kept.to_fork(1e12 - 5.0))
    kept.forked(str(request["name"]), due, sleeper.pid)
    kept.drop_all()
    assert sleeper.wait(5) == -9 and len(kept) == 0


def test_an_agent_that_ended_before_its_boots_end_is_never_signalled(
    sleeper: subprocess.Popen[bytes],
) -> None:
    # Its pid is free again once the launcher reaped it: a later cancel must not kill
    # whatever process took that pid.
    kept = Kept()
    kept.add(1e12, _request("failed"), lead=5.0)
    [(due, request)] = list(kept.to_fork(1e12 - 5.0))
    kept.forked(str(request["name"]), due, sleeper.pid)
    kept.reaped(sleeper.pid)  # as if it had ended and been collected
    assert kept.names() == [] and kept.cancel(["failed"]) == 0
    assert sleeper.poll() is None  # the process now at that pid lives on
