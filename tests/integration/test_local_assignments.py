"""Warm machines of the local cloud: an idle agent runs the assignments in its assign hash, several
at once, over its life. Real redis-server, real LocalProvider, real agent processes."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.services.providers.base import LaunchSpec
from corral.services.providers.local.provider import LocalProvider
from corral.shared.config.localcloud import parse_local_cloud
from corral.shared.errors import InvalidRequestError

from local_processes import local_provider, processes_of

pytestmark = pytest.mark.integration

CLOUD = parse_local_cloud(
    """
instance_types:
  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.1}
regions:
  - name: lab
    zones:
      - name: lab-a
        capacity: {cpu-2: 4}
""",
    "assign-cloud.yaml",
)


def spec(**kw: Any) -> LaunchSpec:
    return LaunchSpec(
        request_id="req-warm",
        attempt_id=f"att-{uuid.uuid4().hex[:8]}",
        cloud="local",
        region="lab",
        zone="lab-a",
        instance_type="cpu-2",
        **kw,
    )


def wait_for(predicate: Callable[[], Any], timeout_s: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.03)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def provider(redis_url: str, tmp_path: Path) -> Iterator[LocalProvider]:
    """A provider with fast heartbeats; afterwards every process it started is gone."""
    with local_provider(CLOUD, redis_url, tmp_path / "logs") as p:
        yield p


def result_of(provider: LocalProvider, iid: str, aid: str) -> dict[str, Any]:
    """Wait for the result of assignment ``aid``."""

    def done() -> Any:
        return provider.assignment_status(iid)["results"].get(aid)

    found: dict[str, Any] = wait_for(done, what=f"the result of {aid}")
    return found


def status_is(
    provider: LocalProvider, iid: str, running: dict[str, str], activity: str
) -> dict[str, Any]:
    """Wait until the agent's heartbeat reports exactly ``running`` and ``activity``."""

    def check() -> Any:
        status = provider.assignment_status(iid)
        return status if (status["running"], status["activity"]) == (running, activity) else None

    found: dict[str, Any] = wait_for(check, what=f"{running} {activity} on {iid}")
    return found


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def test_a_warm_machine_takes_assignments_over_its_life(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec())
    iid, agent_pid = inst.provider_id, inst.pid
    assert agent_pid is not None
    log = provider.log_dir / f"{iid}.log"

    def out(aid: str) -> str:
        return provider.read_assignment_log(iid, aid, 100_000).decode()

    status = status_is(provider, iid, {}, "idle")
    assert status == {"assigned": [], "running": {}, "activity": "idle", "results": {}}

    # A job: its exit code comes back, its output is in its own log (never the machine's,
    # which other projects' requests may read: issue #47 item 1), its env is clean.
    provider.assign(
        iid,
        {
            "id": "a1",
            "run": "echo hi-$GREETING-$CORRAL_INSTANCE_ID-${CORRAL_REDIS_URL:-none}; exit 3",
            "envs": {"GREETING": "there"},
        },
    )
    first = result_of(provider, iid, "a1")
    assert (first["id"], first["exit_code"], first["reason"]) == ("a1", 3, "completed")
    # Its end is told once, by the machine's id (reconcile takes it and wakes the pool).
    assert provider.ended_work() == [iid]
    assert provider.ended_work() == []
    assert out("a1") == f"hi-there-{iid}-none\n"
    assert "hi-there" not in log.read_text()
    assert "[corral-agent] assignment a1: exited 3" in log.read_text()
    status = status_is(provider, iid, {}, "idle")
    assert status["assigned"] == ["a1"]  # the field stays; the same id never runs twice
    provider.assign(iid, {"id": "a1", "run": "echo hi-there-again"})  # not even replaced
    time.sleep(0.3)
    assert out("a1").count("hi-there") == 1
    day_ms = 24 * 3600 * 1000
    assert 0 < provider.state.r.pttl(provider.state.keys.assign_result(iid)) <= day_ms

    # More ids run on the same machine; a failing setup skips its run. An unreadable field is
    # reported once and holds up nothing.
    provider.state.r.hset(provider.state.keys.assign(iid), "junk", "not json")
    provider.assign(iid, {"id": "a2", "setup": "echo second", "run": "exit 0"})
    provider.assign(iid, {"id": "a3", "setup": "exit 5", "run": "echo never-ran"})
    assert (result_of(provider, iid, "a2")["exit_code"], "second\n" in out("a2")) == (0, True)
    third = result_of(provider, iid, "a3")
    assert (third["exit_code"], third["reason"]) == (5, "setup_failed")
    assert "never-ran" not in out("a3") + log.read_text()
    assert log.read_text().count("ignoring assignment field 'junk'") == 1
    status = provider.assignment_status(iid)
    assert status["assigned"] == ["a1", "a2", "a3", "junk"]
    assert sorted(status["results"]) == ["a1", "a2", "a3"]

    # A long job withdrawn: its whole process group goes, the machine stays up and idle.
    provider.withdraw(iid)
    provider.assign(iid, {"id": "long", "run": "sleep 60 & sleep 60 & wait"})
    status_is(provider, iid, {"long": "running"}, "running")
    wait_for(lambda: len(processes_of(iid)) >= 4, what="agent, bash, two sleeps")
    provider.withdraw(iid, "long")
    withdrawn = result_of(provider, iid, "long")
    assert (withdrawn["reason"], withdrawn["exit_code"]) == ("withdrawn", 128 + signal.SIGTERM)
    assert processes_of(iid) == [agent_pid]
    os.kill(agent_pid, 0)  # the agent is alive
    assert status_is(provider, iid, {}, "idle")["assigned"] == []
    assert "[corral-agent] assignment long: withdrawn" in log.read_text()

    # A service serves until withdrawn, alongside a job; terminate ends both with the machine.
    provider.assign(iid, {"id": "svc", "setup": "sleep 60 &"})
    status_is(provider, iid, {"svc": "serving"}, "serving")
    assert len(processes_of(iid)) == 2  # the agent and the service setup started
    provider.assign(iid, {"id": "next", "run": "sleep 60"})
    status_is(provider, iid, {"svc": "serving", "next": "running"}, "running")
    assert provider.state.record(iid).child_pid in processes_of(iid)  # type: ignore[union-attr]
    provider.terminate([iid])
    assert processes_of(iid) == []
    assert [i.state for i in provider.describe() if i.provider_id == iid] == ["terminated"]
    status = provider.assignment_status(iid)
    assert status["assigned"] == []
    results = status["results"]
    assert (results["svc"]["reason"], results["svc"]["exit_code"]) == ("withdrawn", None)
    assert (results["next"]["reason"], results["next"]["exit_code"]) == ("withdrawn", 143)


def test_one_machine_runs_several_assignments_at_once(
    provider: LocalProvider, tmp_path: Path
) -> None:
    [inst] = provider.launch(spec())
    iid = inst.provider_id
    status_is(provider, iid, {}, "idle")
    for aid, code in (("j1", 7), ("j2", 9)):
        pid_file = tmp_path / f"{aid}.pid"
        provider.assign(iid, {"id": aid, "run": f"echo $$ > {pid_file}; sleep 2; exit {code}"})

    # Both run at the same moment: each one's bash is alive while the other's is.
    def both_pids() -> Any:
        texts = [
            (tmp_path / f"{a}.pid").read_text() if (tmp_path / f"{a}.pid").exists() else ""
            for a in ("j1", "j2")
        ]
        return [int(t) for t in texts] if all(t.endswith("\n") for t in texts) else None

    pids = wait_for(both_pids, what="both jobs' pids")
    assert all(alive(pid) for pid in pids), "the two jobs did not overlap"
    assert set(pids) <= set(processes_of(iid))
    status = status_is(provider, iid, {"j1": "running", "j2": "running"}, "running")
    assert status["assigned"] == ["j1", "j2"]
    assert provider.state.record(iid).child_pids == sorted(pids)  # type: ignore[union-attr]

    # Each gets its own exit code.
    one, two = result_of(provider, iid, "j1"), result_of(provider, iid, "j2")
    assert (one["exit_code"], one["reason"], two["exit_code"], two["reason"]) == (
        7,
        "completed",
        9,
        "completed",
    )
    status_is(provider, iid, {}, "idle")

    # A power cut takes every assignment's processes down with the agent.
    provider.assign(iid, {"id": "p1", "run": "sleep 60"})
    provider.assign(iid, {"id": "p2", "run": "sleep 60"})
    status_is(provider, iid, {"p1": "running", "p2": "running"}, "running")
    assert provider.power_off() == 1
    wait_for(lambda: processes_of(iid) == [], what="every process of the machine gone")


def test_withdrawing_one_assignment_leaves_the_others(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec())
    iid, agent_pid = inst.provider_id, inst.pid
    provider.assign(iid, {"id": "keep", "run": "sleep 60; true"})  # bash and its sleep
    provider.assign(iid, {"id": "drop", "run": "sleep 60; true"})
    # Ignores SIGTERM (its children inherit that): it is SIGKILLed after the grace period.
    provider.assign(iid, {"id": "stubborn", "run": "trap '' TERM; sleep 60; true"})
    provider.assign(iid, {"id": "svc", "setup": "sleep 60 &"})
    everyone = {"keep": "running", "drop": "running", "stubborn": "running", "svc": "serving"}
    status_is(provider, iid, everyone, "running")
    groups = provider.state.record(iid).child_pids  # type: ignore[union-attr]
    # The group leaders: three bashes, and the service's setup (gone; its group lives on).
    assert len(groups) == 4 and len(set(groups) & set(processes_of(iid))) == 3

    provider.withdraw(iid, "drop")
    dropped = result_of(provider, iid, "drop")
    assert (dropped["reason"], dropped["exit_code"]) == ("withdrawn", 128 + signal.SIGTERM)
    status = status_is(provider, iid, {k: v for k, v in everyone.items() if k != "drop"}, "running")
    assert status["assigned"] == ["keep", "stubborn", "svc"]
    assert sorted(status["results"]) == ["drop"]
    assert len(processes_of(iid)) == 1 + 2 + 2 + 1  # the agent, keep, stubborn, svc's sleep
    left = provider.state.record(iid).child_pids  # type: ignore[union-attr]
    assert len(left) == 3 and set(left) < set(groups)

    # withdraw(all): the others stop at once, each within the one grace period.
    started = time.monotonic()
    provider.withdraw(iid)
    results = {aid: result_of(provider, iid, aid) for aid in ("keep", "stubborn", "svc")}
    assert time.monotonic() - started < 1.0 + 1.5  # kill_grace_s is terminate_grace_s / 2
    assert {aid: (r["reason"], r["exit_code"]) for aid, r in results.items()} == {
        "keep": ("withdrawn", 128 + signal.SIGTERM),
        "stubborn": ("withdrawn", 128 + signal.SIGKILL),
        "svc": ("withdrawn", None),
    }
    assert processes_of(iid) == [agent_pid]
    assert status_is(provider, iid, {}, "idle")["assigned"] == []


def test_assign_refuses_what_no_agent_would_pick_up(provider: LocalProvider) -> None:
    [job] = provider.launch(spec(run="sleep 30"))
    with pytest.raises(InvalidRequestError):
        provider.assign(job.provider_id, {"id": "x", "run": "true"})  # runs a task of its own
    with pytest.raises(InvalidRequestError):
        provider.assign("li-000000000000", {"id": "x", "run": "true"})
    [warm] = provider.launch(spec())
    with pytest.raises(InvalidRequestError):
        provider.assign(warm.provider_id, {"run": "true"})  # no id
    with pytest.raises(InvalidRequestError):
        provider.assign(warm.provider_id, {"id": "x", "envs": ["A=1"]})
    provider.withdraw(warm.provider_id)  # nothing assigned: fine
    provider.withdraw(warm.provider_id, "nope")
    provider.terminate([warm.provider_id])
    with pytest.raises(InvalidRequestError):
        provider.assign(warm.provider_id, {"id": "x", "run": "true"})  # ended


def test_an_assignment_leaves_nothing_behind_for_the_next(
    provider: LocalProvider, tmp_path: Path
) -> None:
    """Issue #47 item 1: an assignment has a folder of its own (its HOME and where it starts),
    and what it left (its folder, a daemon that left its process group) is gone once it ended,
    before the machine runs the next one."""
    [inst] = provider.launch(spec())
    iid = inst.provider_id
    status_is(provider, iid, {}, "idle")
    pid_file = tmp_path / "daemon.pid"
    provider.assign(
        iid,
        {
            "id": "first",
            "run": (
                "echo left-behind > ~/note; echo HOME=$HOME PWD=$PWD; "
                f"setsid sleep 300 & echo $! > {pid_file}; sleep 0.3; exit 0"
            ),
        },
    )
    assert result_of(provider, iid, "first")["exit_code"] == 0
    said = provider.read_assignment_log(iid, "first", 10_000).decode()
    home = said.split("HOME=", 1)[1].split()[0]
    assert f"PWD={home}" in said and home != str(Path.home())
    daemon = int(pid_file.read_text())
    wait_for(lambda: not alive(daemon), what="the daemon that left its group killed")
    assert not Path(home).exists()
    provider.assign(iid, {"id": "second", "run": "cat ~/note || echo no-note; echo HOME=$HOME"})
    assert result_of(provider, iid, "second")["exit_code"] == 0
    second = provider.read_assignment_log(iid, "second", 10_000).decode()
    assert "no-note" in second and "left-behind" not in second
    assert second.split("HOME=", 1)[1].split()[0] != home
