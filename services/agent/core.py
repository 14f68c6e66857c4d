"""The node agent's core: what runs a machine's work, whatever carries its reports.

One agent per machine. It runs the machine's task (``setup`` then ``run``, each a bash script
in a process group of its own, their output on the agent's stdout and stderr), or, on a
machine launched without a ``run``, *assignments*: several pieces of work side by side, each
started when it appears in the control plane's list and stopped (SIGTERM, SIGKILL after the
grace period) when it leaves it. It heartbeats with what it is doing (setup | running |
serving | idle | exited), the assignments it runs and the demand its workload queued (the JSON
in ``CORRAL_DEMAND_FILE``), reports each assignment's result and, at the end, the run's exit
code.

Everything it says to the control plane goes through a :class:`~.link.Link`: the local cloud's agent
writes to Redis (:mod:`corral.services.providers.local.agent`); a cloud machine's agent speaks
to Corral's HTTP API with its node token (:mod:`corral.services.agent.node`). The behaviour
lives here once, so the two cannot drift. A link that fails raises :class:`LinkError`; the
agent keeps the work running, says so once, and tries again on the next beat.

The :class:`Agent` is its concerns composed (mixins over the state they share, declared once in
agent_base.py): registration and heartbeat (heartbeat.py), the machine's run and its
assignments (work.py), where sessions, execs and port-forwards run and the task's container
(places.py), and the task's files (files.py). This module holds its life: the signals, the
waits between beats, and the final record.

Standard library only: it runs on machines where nothing but Python is installed.
"""

from __future__ import annotations

import fcntl
import os
import random
import select
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import Any

from corral.services.agent.agent_base import FINISH_PATIENCE_S, AgentBase
from corral.services.agent.bundle import BundleError
from corral.services.agent.container import Container
from corral.services.agent.execs import Execs
from corral.services.agent.files import FilesMixin
from corral.services.agent.heartbeat import HeartbeatMixin
from corral.services.agent.jobs import run_jobs
from corral.services.agent.link import Assignment, Dismissed, Link, LinkError, Work, say
from corral.services.agent.pgroup import stop_group
from corral.services.agent.places import PlacesMixin
from corral.services.agent.probe import ReadinessWatch
from corral.services.agent.processes import kill_marked, shell_exit_code
from corral.services.agent.usage import Usage
from corral.services.agent.work import WorkMixin


class Agent(HeartbeatMixin, WorkMixin, PlacesMixin, FilesMixin, AgentBase):
    """Runs one machine's work and reports it through its link."""

    def __init__(
        self,
        link: Link,
        work: Work,
        instance_id: str,
        *,
        heartbeat_s: float,
        heartbeat_ttl_s: float,
        kill_grace_s: float,
        boot_delay_s: float = 0.0,
    ) -> None:
        self.link = link
        self.boot_delay_s = boot_delay_s
        self.work = work
        self.sandbox = work.sandbox()
        # Its HOME is its own folder (never the user's, nor the agent's).
        work.envs = {**work.envs, **self.sandbox.env()}
        self.instance_id = instance_id
        # Every process of the machine's work carries this mark in its environment (the local
        # provider sets it; a cloud node's agent adds its name): stray daemons are found by it,
        # and a port-forward reaches only sockets that such a process holds.
        self.mark = work.envs.setdefault("CORRAL_INSTANCE_ID", instance_id)
        self.heartbeat_s = heartbeat_s
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self.kill_grace_s = kill_grace_s
        self.stopping = False
        self.activity = "setup"
        self._next_beat = 0.0
        self._link_down = False
        self._link_failures = 0  # heartbeats failed in a row: the next try backs off
        self.jobs: dict[str, Assignment] = {}  # the assignments being worked on, by id
        # Every assignment's own log, by id (a cloud node's shipper sends each as a stream).
        self.assignment_logs: dict[str, Path] = {}
        self._kept: list[int] = []  # a service's process groups (setup's, the Ray reporter)
        self._ended: set[str] = set()  # ids that ended here: never run twice
        self._unsent: dict[str, dict[str, Any]] = {}  # results the link did not take yet
        self._written: dict[str, float] = {}  # results written, by id: when (to drop a day on)
        self._bad: dict[str, str] = {}  # unreadable assign fields already reported
        self._results_failing = False  # a failed result write was reported
        self._execs = Execs(kill_grace_s)  # commands and jobs run beside the work (corral exec)
        self._run_exit: tuple[int, float] | None = None  # the launch's run (job 1) ended so
        self._usage = Usage()  # CPU, memory and GPUs in use, in every heartbeat
        self._started = time.monotonic()
        self._idle_from: float | None = None  # monotonic: since when nothing has run
        self.probe = ReadinessWatch.from_envs(work.envs)  # a service's readiness probe
        self._container: Container | None = None  # the task's docker container, once started
        # Self-pipe: signals (SIGTERM, and SIGCHLD when a child ends) wake the select() below.
        self._wake_r, wake_w = os.pipe()
        for fd in (self._wake_r, wake_w):
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)

    def _on_stop(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> int:
        """The agent's life; returns its process exit code."""
        rec = self.work
        if self.probe is not None:
            self.probe.start()
        if self.boot_delay_s > 0:
            self._boot()
        try:
            self.sandbox.make()
            if {"bundle", "git", "copy"} & rec.files.keys() and not self.stopping:
                self.activity = "setup"
                self._beat(force=True)
                self._put_files(rec)
            self.sandbox.hand_over()
        except (BundleError, LinkError, OSError, ValueError) as exc:
            say(f"the task's files could not be put in place: {exc}")
            return self._end(1, "setup_failed")
        if not self._learn_peers():
            return self._end(None, "terminated")
        if rec.files.get("docker") and not self.stopping:
            code = self._start_container(str(rec.files["docker"]))
            if code:
                return self._end(code, "setup_failed")
        if rec.setup and not self.stopping:
            # A machine without a run is a service: what its setup started in the background
            # (a Ray node's daemons) is the service, kept until the machine is terminated.
            code = self._run_phase("setup", rec.setup, keep=not rec.run)
            if self.stopping:
                self._stop_kept()
                return self._end(code, "terminated")
            if code != 0:
                say(f"setup exited {code}")
                if not rec.run:
                    kill_marked(self.mark)  # a service's daemons started before the failure
                return self._end(code, "setup_failed")
        if rec.run and not self.stopping:
            code = self._run_phase("running", rec.run)
            self._run_exit = (code, time.time())
            run_jobs(self)  # the jobs queued behind the run (jobs.py), then the end
            return self._end(code, "terminated" if self.stopping else "completed")
        self._start_ray_reporter()
        self.activity = "idle"
        self._serve_assignments()
        self._stop_kept()
        return self._end(None, "terminated")

    def _boot(self) -> None:
        """The machine boots: silent (no heartbeat, so it is "pending") for the zone's launch
        delay, as a cloud VM is between the launch call and its first report. A terminate
        while it boots ends it at once: SIGTERM wakes the wait (the self-pipe), so a booting
        machine costs nothing until then (not ten wake-ups a second, as it used to)."""
        until = time.monotonic() + self.boot_delay_s
        while not self.stopping and (left := until - time.monotonic()) > 0:
            self._select(left)

    def _end(self, exit_code: int | None, reason: str) -> int:
        """The final record: exit code, capacity freed, the exit event published."""
        self.activity = "exited"
        self._execs.stop_all()
        if self.probe is not None:
            self.probe.stop()
        self._stop_container()
        if exit_code is not None:
            say(f"run exited {exit_code}" if reason == "completed" else f"{reason} ({exit_code})")
        # The final record is what tells a finished job from a dead machine: keep trying
        # through a control-plane outage (a terminate SIGKILLs the agent after its grace).
        deadline = time.monotonic() + FINISH_PATIENCE_S
        wait_s = 0.2
        while True:
            try:
                # The last beat ("exited") rides with the final report: one write where the
                # link can (the local cloud's finish script), never a beat after it.
                self.link.finish(exit_code, reason, time.time(), beat=self._beat_now())
                break
            except Dismissed:
                break  # the node ended already: nobody is waiting for this report
            except LinkError as exc:
                if time.monotonic() > deadline:
                    say(f"could not write the final record: {exc}")
                    break
                time.sleep(wait_s * random.uniform(0.5, 1.0))
                wait_s = min(wait_s * 2, 2.0)
        return 0 if exit_code is None else exit_code & 0xFF

    def _select(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for a signal (the self-pipe), then empty the pipe."""
        ready, _, _ = select.select([self._wake_r], [], [], timeout_s)
        if ready:
            try:
                while os.read(self._wake_r, 512):
                    pass
            except BlockingIOError:
                pass

    def _sleep(self, child: subprocess.Popen[bytes] | None) -> None:
        """Sleep until the next heartbeat is due or a signal arrives (or ``child`` ended)."""
        timeout = max(0.0, self._next_beat - time.monotonic())
        if child is None or child.poll() is None:
            self._select(timeout)

    def _wait(self, child: subprocess.Popen[bytes] | None) -> bool:
        """Sleep until the next heartbeat is due or a signal arrives, then beat if due; False
        once the agent is stopping."""
        self._sleep(child)
        self._beat()
        return not self.stopping

    def _stop_child(self, child: subprocess.Popen[bytes]) -> int:
        """The child's exit code as a shell reads it, stopped first (its group: SIGTERM, the
        grace, SIGKILL) if it still runs."""
        ended = child.poll() is not None
        return shell_exit_code(child.returncode if ended else stop_group(child, self.kill_grace_s))
