"""What an agent's core and its links share: the work a machine was launched with, an
assignment, the link a report goes through and its errors, and the agent's own log lines.

Standard library only.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from corral.services.agent.sandbox import Sandbox


class LinkError(Exception):
    """The control plane could not be reached, or refused a report."""


class Dismissed(LinkError):
    """The control plane has ended this node (it terminated the machine): its reports are
    refused for good, so the agent stops its work and exits."""


@dataclass
class Work:
    """What the machine was launched to run (all empty for a warm pool machine)."""

    setup: str | None = None
    run: str | None = None
    envs: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    # Files to put in place first (shared/bundles.py): {"bundle": {...}, "bundle_scope",
    # "unpacked_max_bytes", "git": {url, ref}, and on the local cloud "home" (the machine's
    # folder), "jail", "bundle_file", "uid" (the user its work runs as) and
    # "logs" (the folder of its assignments' logs)}.
    files: dict[str, Any] = field(default_factory=dict)

    def sandbox(self) -> Sandbox:
        """Where the machine's own work runs: its folder (its HOME), its user."""
        home, uid = self.files.get("home"), self.files.get("uid")
        return Sandbox(Path(home) if home else None, int(uid) if uid is not None else None)


@dataclass(frozen=True)
class FinalBeat:
    """The heartbeat an agent sends with its final report (the arguments of
    :meth:`Link.heartbeat`)."""

    activity: str
    now: float
    ttl_s: float
    queued: dict[str, Any] | None
    assignment: str | None
    assignments: dict[str, str]
    status: dict[str, Any] | None


class Link(Protocol):
    """How an agent reports; every method raises :class:`LinkError` when it cannot."""

    def heartbeat(
        self,
        activity: str,
        now: float,
        ttl_s: float,
        queued: dict[str, Any] | None,
        assignment: str | None,
        assignments: dict[str, str],
        status: dict[str, Any] | None = None,
    ) -> None:
        """The node is alive, doing ``activity``; ``assignments`` maps id -> phase;
        ``status``: ``idle_s`` (how long nothing ran: no setup, run, assignment or exec),
        ``up_s`` (since the agent started) and ``ready`` (the readiness probe's verdict,
        absent without a probe), carried in the heartbeat as they are."""

    def assignments(self) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """The assignments the node should run, by id, and unreadable ones (id -> why)."""

    def put_results(self, results: list[dict[str, Any]], drop: list[str]) -> None:
        """How assignments ended; forget the results in ``drop``."""

    def record_children(
        self, child_pid: int | None = None, groups: list[int] | None = None
    ) -> None:
        """The process groups the work runs in (the local cloud kills them if the agent
        cannot; a cloud's link may ignore them). Every spawn is followed by a forced
        heartbeat, which a link may carry ``child_pid`` in instead of a write of its own."""

    def finish(
        self, exit_code: int | None, reason: str, now: float, beat: FinalBeat | None = None
    ) -> None:
        """The final report: the run's exit code (None without a run) and why it ended, with
        the node's last heartbeat (``beat``: activity "exited"), so a reader never sees the
        finished node's last beat still saying it runs. A link may write the two in one step."""

    def fetch_bundle(self, files: dict[str, Any]) -> bytes:
        """The bytes of the task's bundle (``files["bundle"]``), unchecked."""

    def peers(self, count: int) -> list[str] | None:
        """The addresses of this launch's ``count`` nodes by rank (the head first), once every
        one has reported in; None while some have not."""


def say(message: str) -> None:
    """One line in the instance's log, marked so it reads apart from the task's output."""
    sys.stderr.write(f"[corral-agent] {message}\n")
    sys.stderr.flush()


@dataclass
class Assignment:
    """One piece of work given to an idle machine, and how far it got."""

    id: str
    setup: str | None = None
    run: str | None = None
    envs: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    uid: int | None = None  # the user it runs as (given by the provider), None: the agent's
    sandbox: Sandbox = field(default_factory=Sandbox)  # its folder, user and log, once started
    child: subprocess.Popen[bytes] | None = None  # the current phase's bash
    phase: str = "setup"  # setup | running | serving
    stop_by: float | None = None  # once withdrawn: when SIGKILL follows the SIGTERM

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Assignment:
        envs = data.get("envs") or {}
        return cls(
            id=str(data["id"]),
            setup=_text(data.get("setup")),
            run=_text(data.get("run")),
            envs={str(k): str(v) for k, v in envs.items()} if isinstance(envs, dict) else {},
            workdir=_text(data.get("workdir")),
            uid=int(data["uid"]) if isinstance(data.get("uid"), int) else None,
        )


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None
