"""How a node agent reports: the :class:`Link` every carrier implements (the local cloud's
Redis, a cloud machine's HTTP API), its errors, and the agent's own log lines.

Standard library only: it runs on machines where nothing but Python is installed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Protocol


class LinkError(Exception):
    """The control plane could not be reached, or refused a report."""


class Dismissed(LinkError):
    """The control plane has ended this node (it terminated the machine): its reports are
    refused for good, so the agent stops its work and exits."""


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
