"""The agent's `corral exec` runner keeps its output files in a folder of its own: made by the
first command, removed when the agent ends (an agent that runs no command leaves nothing)."""

from __future__ import annotations

import os
import time
from typing import Any

from corral.services.agent.execs import Execs
from corral.services.agent.sessions import Where


def HERE(_item: dict[str, Any]) -> Where:
    """Every command in this process's folder and environment."""
    return Where(None, dict(os.environ))


class Link:
    """What the agent's link would carry to the control plane, kept here."""

    def __init__(self, commands: list[dict[str, Any]]) -> None:
        self.commands = commands
        self.output = b""
        self.codes: dict[str, int] = {}
        self.errors: dict[str, str | None] = {}

    def take_execs(self) -> list[dict[str, Any]]:
        taken, self.commands = self.commands, []
        return taken

    def exec_output(self, xid: str, piece: bytes) -> None:
        self.output += piece

    def exec_done(self, xid: str, code: int, error: str | None = None) -> None:
        self.codes[xid] = code
        self.errors[xid] = error


def test_an_agent_that_runs_no_command_makes_no_folder() -> None:
    execs = Execs()
    execs.step(Link([]), HERE)
    assert execs.folder == ""
    execs.stop_all()


def test_a_commands_output_is_shipped_and_its_folder_goes_with_the_agent() -> None:
    execs, link = Execs(), Link([{"id": "x1", "command": "echo hi; exit 3"}])
    execs.step(link, HERE)
    folder = execs.folder
    assert os.path.isdir(folder)
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    deadline = time.monotonic() + 10
    while "x1" not in link.codes and time.monotonic() < deadline:
        time.sleep(0.02)
        execs.step(link, HERE)
    assert link.codes == {"x1": 3} and link.output == b"hi\n"
    execs.stop_all()
    assert not os.path.exists(folder)


def test_a_command_for_an_assignment_that_no_longer_runs_here_is_refused() -> None:
    """Issue #47 item 1: an exec or session of pooled work runs in its assignment; once that
    assignment no longer runs on the node it is refused, never run elsewhere on the machine."""
    execs = Execs()
    link = Link([{"id": "x1", "command": "echo ran; exit 0", "assignment": "gone"}])

    def where(item: dict[str, Any]) -> Where | str:
        if item.get("assignment") == "gone":
            return "assignment gone does not run on this node"
        return HERE(item)

    execs.step(link, where)
    assert link.codes == {"x1": 1} and link.output == b""
    assert link.errors == {"x1": "assignment gone does not run on this node"}
    assert execs.running == {} and execs.folder == ""


class JobLink(Link):
    """A link with a job queue: the node takes the next job only when it asks (free)."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        super().__init__([])
        self.jobs = jobs

    def take_job(self) -> dict[str, Any] | None:
        return self.jobs.pop(0) if self.jobs else None


def _until(check: Any, execs: Execs, link: Link, free: bool = True, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
        execs.step(link, HERE, free)
    assert check()


def test_jobs_run_one_at_a_time_first_queued_first_and_only_once_the_node_is_free() -> None:
    env = {**os.environ, "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2"}
    link = JobLink(
        [
            {"id": "j2", "kind": "job", "job": 2, "run": "echo two; sleep 0.3; exit 3",
             "task_id": "sky-x_r-1_2", "num_nodes": 1, "envs": {"WHO": "two"}},
            {"id": "j3", "kind": "job", "job": 3, "run": 'echo "$WHO $SKYPILOT_TASK_ID '
             '$SKYPILOT_NUM_NODES $SKYPILOT_NODE_IPS"', "task_id": "sky-x_r-1_3",
             "num_nodes": 1, "envs": {"WHO": "three"}},
        ]
    )  # fmt: skip
    execs = Execs()
    execs.step(link, lambda _i: Where(None, env), free=False)  # the launch's run still runs
    assert execs.job is None and len(link.jobs) == 2
    execs.step(link, lambda _i: Where(None, env), free=True)
    assert execs.job == "j2" and len(link.jobs) == 1
    execs.step(link, lambda _i: Where(None, env), free=True)
    assert execs.job == "j2" and len(link.jobs) == 1  # j3 waits behind it
    deadline = time.monotonic() + 10
    while "j3" not in link.codes and time.monotonic() < deadline:
        time.sleep(0.02)
        execs.step(link, lambda _i: Where(None, env), free=True)
    assert link.codes == {"j2": 3, "j3": 0}
    assert link.output == b"two\nthree sky-x_r-1_3 1 10.0.0.1\n"  # its own task id, one node
    assert execs.job is None
    execs.stop_all()


def test_a_cancel_kills_the_running_jobs_group_and_one_for_job_1_is_the_cores() -> None:
    link = JobLink([{"id": "j2", "kind": "job", "job": 2, "run": "sleep 30 & wait"}])
    execs = Execs(kill_grace_s=5)
    execs.step(link, HERE, True)
    assert execs.job == "j2"
    started = time.monotonic()
    link.commands = [
        {"id": "k-1", "kind": "cancel", "target": "j2"},
        {"id": "k-2", "kind": "cancel", "job": 1},
    ]
    _until(lambda: "j2" in link.codes, execs, link)
    assert time.monotonic() - started < 5  # SIGTERM ended it, no wait for the grace
    assert link.codes["j2"] == 143 and "k-1" not in link.codes  # a cancel reports nothing
    assert execs.run_cancelled and execs.job is None
    execs.stop_all()
