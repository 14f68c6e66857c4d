"""What the node agent's parts share: the :class:`~.core.Agent`'s state, declared once for the
mixins it is composed of (registration and heartbeat, work, sessions, files: heartbeat.py,
work.py, places.py, files.py), the environment a task's process gets, and the agent's timings.

Each mixin derives from :class:`AgentBase`, so each reads the state under one declaration; the
methods one part calls in another are declared here for the type checker only (the agent's
class composes the real ones). Standard library only: it runs on machines where nothing but
Python is installed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.services.agent.container import Container
from corral.services.agent.execs import Execs
from corral.services.agent.link import Assignment, Dismissed, Link, Work
from corral.services.agent.probe import ReadinessWatch
from corral.services.agent.sandbox import Sandbox
from corral.services.agent.sessions import Where
from corral.services.agent.usage import Usage

RESULTS_KEPT_S = 24 * 3600  # an assignment's result is dropped a day after it was written
FINISH_PATIENCE_S = 600.0  # how long the agent keeps trying to write its final record
QUICK_EXIT_S = 0.05  # a setup or run over this soon sends no beat of its own (see _run_phase)
GROUP_POLL_S = 0.05  # how often a withdrawn service's process group is looked at

PRIVATE_PREFIXES = ("CORRAL_", "FLOWER_", "AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_", "GCE_")


def _private(name: str) -> bool:
    return name.startswith(PRIVATE_PREFIXES)


def private_env() -> dict[str, str]:
    """The agent's own environment without Corral's settings and secrets, nor the cloud
    credentials the worker holds."""
    return {k: v for k, v in os.environ.items() if not _private(k)}


class AgentBase:
    """The agent's state (set by :meth:`~.core.Agent.__init__`) and what its parts share."""

    link: Link
    boot_delay_s: float
    work: Work
    sandbox: Sandbox
    instance_id: str
    mark: str
    heartbeat_s: float
    heartbeat_ttl_s: float
    kill_grace_s: float
    stopping: bool
    activity: str
    _next_beat: float
    _link_down: bool
    _link_failures: int
    jobs: dict[str, Assignment]
    assignment_logs: dict[str, Path]
    _kept: list[int]
    _ended: set[str]
    _unsent: dict[str, dict[str, Any]]
    _written: dict[str, float]
    _bad: dict[str, str]
    _results_failing: bool
    _execs: Execs
    _run_exit: tuple[int, float] | None
    _usage: Usage
    _started: float
    _idle_from: float | None
    probe: ReadinessWatch | None
    _container: Container | None
    _wake_r: int

    def _env(self, envs: dict[str, str]) -> dict[str, str]:
        """The node's environment is the agent's, like a machine's, plus the task's envs; but
        never Corral's settings and secrets, nor the cloud credentials the worker holds: a
        task's output is readable through the API."""
        return {**private_env(), **envs}

    if TYPE_CHECKING:  # one part calling another: the Agent class composes the real ones

        def _select(self, timeout_s: float) -> None: ...
        def _wait(self, child: subprocess.Popen[bytes] | None) -> bool: ...
        def _stop_child(self, child: subprocess.Popen[bytes]) -> int: ...
        def _beat(self, force: bool = False, execs: bool = True) -> None: ...
        def _dismiss(self, exc: Dismissed) -> None: ...
        def _record_groups(self) -> None: ...
        def _set_child(self, pid: int) -> None: ...
        def _cancelled(self, activity: str) -> bool: ...
        def _job_envs(self, job: Assignment) -> dict[str, str]: ...
        def _where(self, item: dict[str, Any]) -> Where | str: ...
        def _run_beating(
            self, argv: list[str], env: dict[str, str] | None = None
        ) -> tuple[int, str]: ...
