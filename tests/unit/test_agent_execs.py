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
