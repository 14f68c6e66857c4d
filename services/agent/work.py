"""The node agent's work: the machine's setup and run (each a bash script in a process group
of its own), a service's background processes (a Ray node's daemons, the Ray demand
reporter), and on a machine without a run its *assignments*: started when they appear in the
control plane's list, withdrawn (SIGTERM, SIGKILL after the grace period) when they leave it,
their results written back. One concern of :class:`~.core.Agent` (a mixin it composes).
Standard library only."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from corral.services.agent.agent_base import (
    GROUP_POLL_S,
    QUICK_EXIT_S,
    RESULTS_KEPT_S,
    AgentBase,
    private_env,
)
from corral.services.agent.link import Assignment, Dismissed, LinkError, say
from corral.services.agent.pgroup import (
    group_alive,
    kill_group,
    kill_group_now,
    stop_groups,
)
from corral.services.agent.processes import (
    kill_marked,
    ray_python,
    shell_exit_code,
)
from corral.services.agent.sandbox import Sandbox, assignment_key, assignment_log, run_as


class WorkMixin(AgentBase):
    """The machine's run and its assignments."""

    def _run_phase(self, activity: str, script: str, keep: bool = False) -> int:
        """Run one bash script in its own process group until it ends or we are stopped;
        with ``keep``, what it left running in the background stays (see :meth:`_stop_kept`)."""
        self.activity = activity
        child = self._spawn(script, self.work.workdir, self.work.envs, container=True)
        # A beat after the spawn (a link may carry the child's pid; no commands: they wait for
        # the interval's beat), unless the child is over at once: its final report says it all.
        quick_until = time.monotonic() + QUICK_EXIT_S
        while child.poll() is None and not self.stopping and time.monotonic() < quick_until:
            self._select(max(0.0, quick_until - time.monotonic()))  # woken by its SIGCHLD
        if child.poll() is None:
            self._beat(force=True, execs=False)
        while child.poll() is None and not self.stopping and not self._cancelled(activity):
            self._wait(child)
        code = self._stop_child(child)
        if keep and code == 0 and not self.stopping:
            self._kept.append(child.pid)
        else:
            kill_group(child.pid, signal.SIGKILL)  # what the script left in the background
        return code

    def _spawn(
        self,
        script: str,
        workdir: str | None,
        envs: dict[str, str],
        container: bool = False,
        sandbox: Sandbox | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start one bash script in a process group of its own, in ``sandbox`` (the machine's
        own by default: its folder, user and log; with ``container``, in the task's container
        if it has one)."""
        sandbox = sandbox or self.sandbox
        cwd = sandbox.cwd(workdir)
        if workdir and not Path(workdir).is_dir():
            say(f"workdir {workdir} does not exist; running in {cwd or os.getcwd()}")
        env = self._env(envs)
        # Its environment carries CORRAL_INSTANCE_ID (set by the provider), which is how the
        # provider recognises the task's processes when it must kill them itself.
        argv, user = ["bash", "-c", script], run_as(sandbox.uid)
        if container and self._container is not None:
            # The container is the task's user and room: docker's client needs the agent's.
            argv, user = self._container.exec_argv(["bash", "-c", script], workdir, envs), {}
        out = sandbox.open_log()
        try:
            child = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True, **user,
            )  # fmt: skip
        finally:
            if out is not None:
                os.close(out)
        self._set_child(child.pid)
        return child

    def _start_ray_reporter(self) -> None:
        """On a Ray head (``CORRAL_RAY_GCS`` set by the cluster's node task): run
        ``ray_demand.py`` with Ray's own Python in the background; it writes what the GCS
        reports to ``CORRAL_DEMAND_FILE``, which every heartbeat carries."""
        envs = self.work.envs
        gcs, out = envs.get("CORRAL_RAY_GCS"), envs.get("CORRAL_DEMAND_FILE")
        if not gcs or not out:
            return
        python = ray_python(envs)
        if python is None:
            say("this Ray head has no `ray` on its PATH: Ray's demand is not reported")
            return
        script = str(Path(__file__).with_name("ray_demand.py"))
        argv = [python, script, "--gcs", gcs, "--out", out, "--interval-s", "1"]
        child = subprocess.Popen(
            argv, env={**private_env(), **envs}, stdin=subprocess.DEVNULL, start_new_session=True,
            cwd=self.sandbox.cwd(None), **run_as(self.sandbox.uid),
        )  # fmt: skip
        say(f"reporting Ray's demand from the GCS at {gcs} (pid {child.pid})")
        self._kept.append(child.pid)
        self._record_groups()

    def _stop_kept(self) -> None:
        """Stop the service: SIGTERM its process groups (Ray shuts down cleanly on it),
        SIGKILL what is left after the grace period, and then every process still carrying
        this machine's instance id (daemons that left the group, as Ray's workers do)."""
        if not self._kept:
            return
        say("stopping the node's services")
        stop_groups(self._kept, self.kill_grace_s, GROUP_POLL_S)
        self._kept = []
        kill_marked(self.mark)

    def _serve_assignments(self) -> None:
        """The idle loop: on every heartbeat look at the assign hash, and move each
        assignment on when its process ends, until the agent is stopped."""
        while not self.stopping:
            self._advance()
            if time.monotonic() >= self._next_beat:
                self._poll_assignments()
                self._beat()
            self._sleep_jobs()
        # The machine is being terminated: stop every assignment, all within one grace period.
        for job in self.jobs.values():
            self._withdraw(job)
        while self.jobs:
            self._advance()
            self._beat()
            if self.jobs:
                self._sleep_jobs()

    def _poll_assignments(self) -> None:
        """Start and withdraw assignments as the assign hash now says."""
        if self._unsent:
            self._flush_results()
        try:
            wanted, bad = self.link.assignments()
        except Dismissed as exc:
            self._dismiss(exc)
            return
        except LinkError:
            return  # unknown is not withdrawn: keep working, the heartbeat reports the outage
        for aid, why in bad.items():
            if self._bad.get(aid) != why:
                say(f"ignoring assignment field {aid!r}: {why}")
        self._bad = bad  # an unreadable field still holds its id: not a withdrawal
        for job in self.jobs.values():
            if job.id not in wanted and job.id not in bad:
                self._withdraw(job)
        for aid in sorted(wanted):
            if aid not in self.jobs and aid not in self._ended:
                self._start_job(Assignment.from_json(wanted[aid]))

    def _start_job(self, job: Assignment) -> None:
        self.jobs[job.id] = job
        say(f"assignment {job.id}: started")
        job.sandbox = self._job_sandbox(job)
        if job.sandbox.log is not None:
            self.assignment_logs[job.id] = job.sandbox.log
        try:
            job.sandbox.make()
        except OSError as exc:
            say(f"assignment {job.id}: its folder could not be made ({exc})")
            self._close_job(job, "setup_failed", 1)
            return
        if job.setup:
            self._job_phase(job, "setup", job.setup)
        else:
            self._after_setup(job)

    def _job_sandbox(self, job: Assignment) -> Sandbox:
        """An assignment's own folder (beside the machine's, or under the agent's folder on a
        cloud machine), its user (the one the provider gave, else the agent's) and its own
        log where the link keeps one per assignment (the local cloud's log folder)."""
        key = assignment_key(job.id)
        home = self.sandbox.folder
        folder = Path(f"{home}.{key}") if home else Path.cwd() / "assignments" / key
        logs = self.work.files.get("logs")
        log = assignment_log(Path(logs), self.instance_id, job.id) if logs else None
        return Sandbox(folder, job.uid, log)

    def _job_envs(self, job: Assignment) -> dict[str, str]:
        """The record's envs are the machine's; the assignment's come on top, then its own
        HOME. The instance id stays, so the provider can still tell the task's processes
        apart; the assignment's key marks them as its own (port-forward reaches only them)."""
        return {
            **self.work.envs,
            **job.envs,
            **job.sandbox.env(),
            "CORRAL_INSTANCE_ID": self.mark,
            "CORRAL_ASSIGNMENT_ID": assignment_key(job.id),
        }

    def _job_phase(self, job: Assignment, phase: str, script: str) -> None:
        job.phase = phase
        job.child = self._spawn(script, job.workdir, self._job_envs(job), sandbox=job.sandbox)
        self._record_groups()
        self._beat(force=True)

    def _after_setup(self, job: Assignment) -> None:
        if job.run:
            if job.child is not None:
                kill_group(job.child.pid, signal.SIGKILL)  # what setup left in the background
            self._job_phase(job, "running", job.run)
        else:
            # A service: setup's background processes are the service; keep them.
            job.phase = "serving"
            self._beat(force=True)

    def _advance(self) -> None:
        """Move each assignment on whose current process has ended, or whose withdrawal is
        complete."""
        for job in list(self.jobs.values()):
            if job.stop_by is not None:
                self._advance_withdrawal(job)
            elif job.phase != "serving" and job.child is not None:
                code = job.child.poll()
                if code is None:
                    continue
                code = shell_exit_code(code)
                if job.phase == "setup" and code != 0:
                    self._close_job(job, "setup_failed", code)
                elif job.phase == "setup":
                    self._after_setup(job)
                else:
                    self._close_job(job, "completed", code)

    def _withdraw(self, job: Assignment) -> None:
        """SIGTERM the assignment's process group; :meth:`_advance_withdrawal` finishes."""
        if job.stop_by is None:
            job.stop_by = time.monotonic() + self.kill_grace_s
            if job.child is not None:
                kill_group(job.child.pid, signal.SIGTERM)

    def _advance_withdrawal(self, job: Assignment) -> None:
        """Close a withdrawn assignment once its processes are gone, SIGKILLing them when
        the grace period is over."""
        child = job.child
        late = job.stop_by is not None and time.monotonic() >= job.stop_by
        if job.phase == "serving" or child is None:
            # A service's setup has ended; it lives on in the group until it goes or is killed.
            if child is None or late or not group_alive(child.pid):
                self._close_job(job, "withdrawn")
        elif child.poll() is not None or late:
            kill_group(child.pid, signal.SIGKILL)
            child.wait()
            self._close_job(job, "withdrawn", shell_exit_code(child.returncode))

    def _close_job(self, job: Assignment, reason: str, exit_code: int | None = None) -> None:
        """End the assignment (killing what is left of its group) and record its result."""
        if job.child is not None and not kill_group_now(job.child.pid):
            say(f"assignment {job.id}: process group {job.child.pid} outlived SIGKILL")
        # What it left: its processes outside its group (they carry its mark), then its folder
        # and, under a user of its own, every process of that user.
        kill_marked(assignment_key(job.id), "CORRAL_ASSIGNMENT_ID")
        job.sandbox.clear()
        if reason == "withdrawn":
            say(f"assignment {job.id}: withdrawn")
        elif reason == "setup_failed":
            say(f"assignment {job.id}: setup exited {exit_code}")
        else:
            say(f"assignment {job.id}: exited {exit_code}")
        del self.jobs[job.id]
        self._ended.add(job.id)
        result = {"id": job.id, "exit_code": exit_code, "reason": reason, "at": time.time()}
        self._unsent[job.id] = result
        self._flush_results()
        self._record_groups()
        self._beat(force=True)

    def _flush_results(self) -> None:
        """Write the results the link has not taken yet; drop those written over a day ago."""
        now = time.time()
        old = [aid for aid, at in self._written.items() if now - at > RESULTS_KEPT_S]
        try:
            self.link.put_results(list(self._unsent.values()), old)
        except LinkError as exc:
            if not self._results_failing:
                say(f"could not write assignment results {sorted(self._unsent)}: {exc}")
            self._results_failing = True
            return  # the next poll tries again
        self._results_failing = False
        for aid in old:
            del self._written[aid]
        for aid in self._unsent:
            self._written[aid] = now
        self._unsent = {}

    def _sleep_jobs(self) -> None:
        """Sleep until the next heartbeat, a signal (a child ended) or a withdrawal's deadline;
        a withdrawn service's group is looked at every GROUP_POLL_S (no signal says it went)."""
        now = time.monotonic()
        timeout = self._next_beat - now
        children = []
        for job in self.jobs.values():
            if job.stop_by is not None:
                timeout = min(timeout, job.stop_by - now)
                if job.phase == "serving":
                    timeout = min(timeout, GROUP_POLL_S)
            if job.phase != "serving" and job.child is not None:
                children.append(job.child)
        if all(child.poll() is None for child in children):
            self._select(max(0.0, timeout))
