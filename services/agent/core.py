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

Standard library only: it runs on machines where nothing but Python is installed.
"""

from __future__ import annotations

import fcntl
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from corral.services.agent import skypilot_env
from corral.services.agent.bundle import BundleError, clone, mount_path, unpack
from corral.services.agent.container import Container, container_name, run_argv
from corral.services.agent.execs import Execs
from corral.services.agent.jobs import run_jobs
from corral.services.agent.link import (
    Assignment,
    Dismissed,
    FinalBeat,
    Link,
    LinkError,
    Work,
    say,
)
from corral.services.agent.probe import ReadinessWatch
from corral.services.agent.processes import (
    group_alive,
    kill_group,
    kill_group_now,
    kill_marked,
    ray_python,
    run_beating,
    shell_exit_code,
)
from corral.services.agent.sandbox import Sandbox, assignment_key, assignment_log, read_demand
from corral.services.agent.sessions import Where
from corral.services.agent.usage import Usage

RESULTS_KEPT_S = 24 * 3600  # an assignment's result is dropped a day after it was written


class Agent:
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

    # --- main ----------------------------------------------------------------------------
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

    def _learn_peers(self) -> bool:
        """A launch's node (``CORRAL_NODE_RANK`` of ``CORRAL_NUM_NODES``) waits, heartbeating,
        until every node of its launch has reported its address, then sets SkyPilot's
        ``SKYPILOT_NODE_RANK`` / ``SKYPILOT_NODE_IPS`` for setup and run (skypilot_env.py):
        nothing starts before the node can reach the others. False: stopped while waiting."""
        envs = self.work.envs
        try:
            rank, count = int(envs["CORRAL_NODE_RANK"]), int(envs["CORRAL_NUM_NODES"])
        except (KeyError, ValueError):
            return True  # not one node of a launch (a warm pool machine)
        if not 0 <= rank < count:
            return True  # one node launched again on its own: its peers are not this launch's
        if count > 1:  # (a node alone needs no one's word: no beat, no round trip of its own)
            self._beat(force=True)  # heard: the others count this node as reported in
        waiting = False
        while not self.stopping:
            try:
                ips = self.link.peers(count)
            except Dismissed as exc:
                self._dismiss(exc)
                break
            except LinkError as exc:
                ips = None
                if not waiting:
                    say(f"cannot ask for the other nodes' addresses yet: {exc}")
            if ips is not None:
                self.work.envs = {**envs, **skypilot_env.node_envs(rank, ips)}
                if waiting or count > 1:
                    say(f"node {rank} of {count}; the nodes' addresses: {' '.join(ips)}")
                return True
            if not waiting:
                say(f"waiting for the other {count - 1} node(s) to report their addresses")
            waiting = True
            self._wait(None)
        return False

    def _put_files(self, rec: Work) -> None:
        """The workdir (unpacked, or a repository cloned) and the file mounts, before setup:
        setup and run then start in the workdir (SkyPilot's ~/sky_workdir)."""
        files = rec.files
        home = Path(files.get("home") or os.path.expanduser("~"))
        workdir = home / "sky_workdir"
        bundle = files.get("bundle")
        if bundle:
            say(f"unpacking the task's files ({int(bundle.get('size_bytes', 0)):,} bytes)")
            data = self.link.fetch_bundle(files)
            cap, jail = files.get("unpacked_max_bytes"), bool(files.get("jail"))
            unpack(data, bundle, workdir, home, jail=jail, max_bytes=cap)
        for mount in files.get("copy") or []:
            self._copy_remote(str(mount["source"]), str(mount["target"]), home, files)
        git = files.get("git")
        if git:
            say(f"cloning {git.get('url')} at {git.get('ref') or 'its default branch'}")
            clone(str(git["url"]), git.get("ref"), workdir, self._run_beating)
        if (bundle and bundle.get("workdir")) or git:
            rec.workdir = str(workdir)

    # --- image_id: docker:<image> (setup and run inside a container: container.py) ----------
    def _start_container(self, image: str) -> int:
        """Start the task's container, kept until the agent ends. A node without docker fails
        here (exit 127), never runs on the host."""
        env = self._env(self.work.envs)
        docker = shutil.which("docker", path=env.get("PATH"))
        if docker is None:
            say(f"docker is not installed on the node (the task's image_id is docker:{image})")
            return 127
        name = container_name(self.instance_id)
        argv = run_argv(docker, name, image, self.work.workdir, self.work.envs)
        say(f"starting the task's container from {image}")
        # Its output (docker's progress and errors) goes to the log; the agent heartbeats
        # while it runs (a pull can take minutes).
        child = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        while child.poll() is None and not self.stopping:
            self._wait(child)
        code = (
            self._stop_child(child) if child.poll() is None else shell_exit_code(child.returncode)
        )
        if code != 0:
            say(f"docker run {image} exited {code}")
            return code
        self._container = Container(docker, name)
        return 0

    def _exec_argv(self, argv: list[str], stdin: bool, tty: bool) -> list[str]:
        """Where corral exec and attach run: in the task's container if it has one."""
        if self._container is None:
            return argv
        workdir, envs = self.work.workdir, self.work.envs
        return self._container.exec_argv(argv, workdir, envs, stdin=stdin, tty=tty)

    def _where(self, item: dict[str, Any]) -> Where | str:
        """Where a ``corral exec``, attach or port-forward runs: in the assignment it names
        (its folder, environment and user; refused once it no longer runs here), else in
        the machine's own work."""
        aid = item.get("assignment")
        if aid is None:
            sandbox, env = self.sandbox, self._env(self.work.envs)
            cwd = sandbox.cwd(self.work.workdir)
            marker = f"CORRAL_INSTANCE_ID={self.mark}"
            uid = None if self._container is not None else sandbox.uid  # docker's client: ours
            return Where(cwd, env, self._exec_argv, uid, marker)
        job = self.jobs.get(str(aid))
        if job is None or job.stop_by is not None:
            return f"assignment {aid} does not run on this node"
        env = self._env(self._job_envs(job))
        marker = f"CORRAL_ASSIGNMENT_ID={assignment_key(job.id)}"
        return Where(job.sandbox.cwd(job.workdir), env, uid=job.sandbox.uid, marker=marker)

    def _stop_container(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            container.remove(self._env(self.work.envs))

    def _copy_remote(self, source: str, target: str, home: Path, files: dict[str, Any]) -> None:
        """An ``s3://`` file mount, copied by a child Python in the task's environment (the
        node's credentials, or the task's envs'), so the agent needs no boto3 itself."""
        dest = mount_path(home, target, jail=bool(files.get("jail")))
        say(f"copying {source} to {target}")
        env = self._env(self.work.envs)
        copier = str(Path(__file__).with_name("s3copy.py"))  # standard library and boto3 only
        code, said = self._run_beating([sys.executable, copier, source, str(dest)], env)
        if code != 0:
            raise BundleError(f"file_mounts.{target}: {said[-800:] or 'the copy failed'}")
        for line in said.splitlines()[-3:]:
            say(line)

    def _run_beating(self, argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run a copy or a clone with the heartbeat going (a big one takes minutes)."""
        return run_beating(argv, env, self._wait, self._stop_child)

    def _boot(self) -> None:
        """The machine boots: silent (no heartbeat, so it is "pending") for the zone's launch
        delay, as a cloud VM is between the launch call and its first report. A terminate
        while it boots ends it at once: SIGTERM wakes the wait (the self-pipe), so a booting
        machine costs nothing until then (not ten wake-ups a second, as it used to)."""
        until = time.monotonic() + self.boot_delay_s
        while not self.stopping and (left := until - time.monotonic()) > 0:
            self._select(left)

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
        code = (
            self._stop_child(child) if child.poll() is None else shell_exit_code(child.returncode)
        )
        if keep and code == 0 and not self.stopping:
            self._kept.append(child.pid)
        else:
            kill_group(child.pid, signal.SIGKILL)  # what the script left in the background
        return code

    def _env(self, envs: dict[str, str]) -> dict[str, str]:
        """The node's environment is the agent's, like a machine's, plus the task's envs; but
        never Corral's settings and secrets, nor the cloud credentials the worker holds: a
        task's output is readable through the API."""
        inherited = {k: v for k, v in os.environ.items() if not _private(k)}
        return {**inherited, **envs}

    # --- a service's background processes (a Ray node's daemons) ----------------------------
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
        inherited = {k: v for k, v in os.environ.items() if not _private(k)}
        child = subprocess.Popen(
            argv, env={**inherited, **envs}, stdin=subprocess.DEVNULL, start_new_session=True,
            cwd=self.sandbox.cwd(None), **self.sandbox.popen(),
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
        for pgid in self._kept:
            kill_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.kill_grace_s
        while time.monotonic() < deadline and any(group_alive(g) for g in self._kept):
            time.sleep(GROUP_POLL_S)
        for pgid in self._kept:
            kill_group(pgid, signal.SIGKILL)
        self._kept = []
        kill_marked(self.mark)

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
        argv, user = ["bash", "-c", script], sandbox.popen()
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

    # --- assignments (an idle machine's work) --------------------------------------------
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

    def _record_groups(self) -> None:
        """Every assignment's process group in the record, so terminate() can kill them if
        the agent cannot."""
        groups = sorted(job.child.pid for job in self.jobs.values() if job.child is not None)
        groups += self._kept
        try:
            self.link.record_children(groups=groups)
        except LinkError as exc:
            say(f"could not record the child pids: {exc}")

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

    def _stop_child(self, child: subprocess.Popen[bytes]) -> int:
        kill_group(child.pid, signal.SIGTERM)
        try:
            child.wait(self.kill_grace_s)
        except subprocess.TimeoutExpired:
            kill_group(child.pid, signal.SIGKILL)
            child.wait()
        return shell_exit_code(child.returncode)

    def _wait(self, child: subprocess.Popen[bytes] | None) -> bool:
        """Sleep until the next heartbeat is due or a signal arrives, then beat if due; False
        once the agent is stopping."""
        self._sleep(child)
        self._beat()
        return not self.stopping

    def _sleep(self, child: subprocess.Popen[bytes] | None) -> None:
        """Sleep until the next heartbeat is due or a signal arrives (or ``child`` ended)."""
        timeout = max(0.0, self._next_beat - time.monotonic())
        if child is None or child.poll() is None:
            self._select(timeout)

    def _select(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for a signal (the self-pipe), then empty the pipe."""
        ready, _, _ = select.select([self._wake_r], [], [], timeout_s)
        if ready:
            try:
                while os.read(self._wake_r, 512):
                    pass
            except BlockingIOError:
                pass

    # --- the link to the control plane ------------------------------------------------------
    def _beat(self, force: bool = False, execs: bool = True) -> None:
        """Send a heartbeat when one is due (``force``: now) and, unless not ``execs``, take
        the commands queued for the node and report those running."""
        if not force and time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + self._beat_delay()
        try:
            b = self._beat_now()
            self.link.heartbeat(
                b.activity, b.now, b.ttl_s, b.queued, b.assignment, b.assignments, b.status
            )
            if self._link_down:
                say("the control plane is reachable again")
            self._link_down = False
            self._link_failures = 0
            if execs:
                free = self._run_exit is not None or self.activity == "idle"
                self._execs.step(self.link, self._where, free)
        except Dismissed as exc:
            self._dismiss(exc)
        except LinkError as exc:
            if not self._link_down:  # say it once, keep the task running
                say(f"heartbeat failed: {exc}")
            self._link_down = True
            self._link_failures += 1
            self._next_beat = time.monotonic() + self._beat_delay()

    def _beat_now(self) -> FinalBeat:
        """What a heartbeat sent now says."""
        running = {aid: job.phase for aid, job in sorted(self.jobs.items())}
        activity = self._activity()
        return FinalBeat(
            activity,
            time.time(),
            self.heartbeat_ttl_s,
            self._queued(),
            next(iter(running), None),
            running,
            self._status(activity),
        )

    def _beat_delay(self) -> float:
        """The next heartbeat's delay: the interval, or while the link is down a jittered
        backoff that never exceeds a third of the heartbeat TTL, so the agent is heard again
        well within a timeout once the control plane is back."""
        if not self._link_failures:
            return self.heartbeat_s
        cap = max(self.heartbeat_s, self.heartbeat_ttl_s / 3)
        backoff = min(cap, self.heartbeat_s * 2 ** min(self._link_failures - 1, 8))
        return float(backoff * random.uniform(0.5, 1.0))

    def _status(self, activity: str) -> dict[str, Any]:
        """What the heartbeat says besides the activity: how long the node has been idle
        (autostop counts from it; an exec running is not idle), how long the agent has been
        up, and whether the readiness probe passed (services with one)."""
        now = time.monotonic()
        if activity == "idle" and not self._execs.running:
            if self._idle_from is None:
                self._idle_from = now
        else:
            self._idle_from = None
        status: dict[str, Any] = {
            "idle_s": None if self._idle_from is None else round(now - self._idle_from, 3),
            "up_s": round(now - self._started, 3),
            **self._usage.read(),
        }
        if self.probe is not None:
            status["ready"] = self.probe.ready
        if self._run_exit is not None:  # job 1 has ended; the jobs queued behind it run
            status["run_exit"], status["run_ended_at"] = self._run_exit
        return status

    def _cancelled(self, activity: str) -> bool:
        """`corral cancel ID 1` stops the launch's run (not its setup)."""
        return activity == "running" and self._execs.run_cancelled

    def _dismiss(self, exc: Dismissed) -> None:
        if not self.stopping:
            say(f"the control plane ended this node ({exc}); stopping its work")
        self.stopping = True

    def _activity(self) -> str:
        """The setup/run path's phase; on an idle machine, what its assignments add up to:
        running if any is in setup or run, serving if all are services, else idle."""
        if self.activity != "idle":
            return self.activity
        phases = {job.phase for job in self.jobs.values()}
        if phases - {"serving"}:
            return "running"
        return "serving" if phases else "idle"

    def _queued(self) -> dict[str, Any] | None:
        """The demand the node's workload wrote to CORRAL_DEMAND_FILE (JSON), if any."""
        path = self.work.envs.get("CORRAL_DEMAND_FILE")
        return read_demand(path, say) if path else None

    def _set_child(self, pid: int) -> None:
        try:
            self.link.record_children(child_pid=pid)
        except LinkError as exc:
            say(f"could not record the child pid: {exc}")

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


PRIVATE_PREFIXES = ("CORRAL_", "FLOWER_", "AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_", "GCE_")


def _private(name: str) -> bool:
    return name.startswith(PRIVATE_PREFIXES)


FINISH_PATIENCE_S = 600.0  # how long the agent keeps trying to write its final record
QUICK_EXIT_S = 0.05  # a setup or run over this soon sends no beat of its own (see _run_phase)
GROUP_POLL_S = 0.05  # how often a withdrawn service's process group is looked at
