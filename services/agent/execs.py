"""Commands run on a machine after it is up (``corral exec``), beside its work.

On every beat the agent takes the commands queued for its node, starts each (bash, in the
task's workdir with the task's environment, a process group of its own), and sends what each
wrote since the last beat, then its exit code once it ended. Output goes through a file, not a
pipe, so a command never blocks on a full pipe between beats.

Jobs (``corral exec ID task.yaml``; shared/jobs.py) come through a queue of their own: the
agent takes the next one only when it is free (its launch's run over, no job running), so a
request's nodes run one job at a time, first submitted first. A ``cancel`` item kills a
running job's process group (SIGTERM, SIGKILL after the grace period), or the launch's own
run (job 1: :attr:`Execs.run_cancelled`, which the core acts on). Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.services.agent import skypilot_env
from corral.services.agent.bundle import BundleError
from corral.services.agent.job_files import put_workdir
from corral.services.agent.link import LinkError
from corral.services.agent.pgroup import kill_group
from corral.services.agent.processes import shell_exit_code
from corral.services.agent.sandbox import run_as
from corral.services.agent.sessions import Session, Where

CHUNK = 256 * 1024


@dataclass
class Running:
    id: str
    child: subprocess.Popen[bytes]
    path: str
    sent: int = 0
    kill_at: float | None = None  # cancelled: when SIGKILL follows the SIGTERM


class Execs:
    def __init__(self, kill_grace_s: float = 5.0) -> None:
        self.running: dict[str, Running] = {}
        self.sessions: dict[str, Session] = {}  # corral attach, port-forward (their threads)
        self.folder = ""  # made by the first command, removed by stop_all
        self.job: str | None = None  # the job running here (its command's id), if any
        self.run_cancelled = False  # `corral cancel ID 1`: the core stops the launch's run
        self.kill_grace_s = kill_grace_s

    def step(
        self, link: Any, where: Callable[[dict[str, Any]], Where | str], free: bool = False
    ) -> None:
        """Take new commands, ship what the running ones wrote, report those that ended, and
        when ``free`` (the launch's run is over) and no job runs, start the next job.
        ``where(item)`` says where an item runs (the machine's work or one assignment's: its
        folder, environment, user, container), or why it cannot run here."""
        take = getattr(link, "take_execs", None)
        if take is None:
            return
        for item in take():
            if item.get("kind") == "cancel":
                self._cancel(item)
                continue
            place = where(item)
            if isinstance(place, str):
                link.exec_done(str(item["id"]), 1, place)
            elif item.get("kind") in ("shell", "forward"):
                self.sessions[str(item["id"])] = Session(link, item, place)
            else:
                self._start(str(item["id"]), str(item["command"]), place)
        for sid in [s for s, run in self.sessions.items() if run.finished.is_set()]:
            del self.sessions[sid]
        for xid, run in list(self.running.items()):
            ended = run.child.poll() is not None
            self._ship(link, run)
            if ended:
                self._ship(link, run)  # what it wrote as it ended
                link.exec_done(xid, shell_exit_code(run.child.returncode))
                with contextlib.suppress(OSError):
                    os.unlink(run.path)
                del self.running[xid]
                if xid == self.job:
                    self.job = None
            elif run.kill_at is not None and time.monotonic() >= run.kill_at:
                kill_group(run.child.pid, signal.SIGKILL)
        take_job = getattr(link, "take_job", None) if free else None
        while take_job is not None and self.job is None:  # past those that could not start
            item = take_job()
            if item is None:
                break
            self._start_job(link, item, where(item))

    def _start_job(self, link: Any, item: dict[str, Any], place: Where | str) -> None:
        """A job's run on this node: in the machine's work (its workdir and environment),
        with the job's envs and SkyPilot's per-job values (its task id, its nodes); a job
        with a workdir of its own in that, unpacked now (job_files.py)."""
        xid = str(item["id"])
        if isinstance(place, str):
            link.exec_done(xid, 1, place)
            return
        envs = {str(k): str(v) for k, v in (item.get("envs") or {}).items()}
        env = {**place.env, **envs, **job_envs(place.env, item)}
        job = Where(place.cwd, env, place.wrap, place.uid, place.marker)
        if item.get("bundle"):  # its own workdir, unpacked now that it starts (job_files.py)
            try:
                job = put_workdir(link, item, job)
            except (BundleError, LinkError, OSError) as exc:
                said = f"the job's workdir could not be put in place: {exc}"
                with contextlib.suppress(LinkError):
                    link.exec_output(xid, f"[corral-agent] {said}\n".encode())
                link.exec_done(xid, 1, said)
                return
        self._start(xid, str(item.get("run") or "true"), job)
        self.job = xid

    def _cancel(self, item: dict[str, Any]) -> None:
        """Kill a cancelled job's process group (SIGTERM now, SIGKILL after the grace); the
        launch's run (job 1) is the core's to stop. A job not running here: nothing to do
        (its pending entry was taken off the queue by whoever cancelled it)."""
        if item.get("job") == 1:
            self.run_cancelled = True
            return
        run = self.running.get(str(item.get("target")))
        if run is not None and run.kill_at is None and run.child.poll() is None:
            kill_group(run.child.pid, signal.SIGTERM)
            run.kill_at = time.monotonic() + self.kill_grace_s

    def _start(self, xid: str, command: str, where: Where) -> None:
        if not self.folder:
            self.folder = tempfile.mkdtemp(prefix="corral-exec-")
        path = os.path.join(self.folder, f"{xid}.out")
        with open(path, "wb") as out:
            child = subprocess.Popen(
                where.wrap(["bash", "-c", command], False, False),
                cwd=where.cwd,
                env=where.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **run_as(where.uid),
            )
        self.running[xid] = Running(xid, child, path)

    def _ship(self, link: Any, run: Running) -> None:
        with open(run.path, "rb") as fh:
            fh.seek(run.sent)
            while piece := fh.read(CHUNK):
                link.exec_output(run.id, piece)
                run.sent += len(piece)

    def stop_all(self) -> None:
        for session in self.sessions.values():
            session.stop()
        for run in self.running.values():
            kill_group(run.child.pid, signal.SIGKILL)
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = ""


def job_envs(node_env: dict[str, str], item: dict[str, Any]) -> dict[str, str]:
    """SkyPilot's values for one job on this node: its own task id, and its nodes (the
    first ``num_nodes`` of the launch's, so a smaller job sees only its own)."""
    out = {skypilot_env.TASK_ID: str(item.get("task_id") or "")}
    count = int(item.get("num_nodes") or 1)
    ips = [ip for ip in node_env.get(skypilot_env.NODE_IPS, "").split("\n") if ip][:count]
    if ips:
        lines = "\n".join(ips)
        out.update({skypilot_env.NODE_IPS: lines, skypilot_env.SETUP_NODE_IPS: lines})
    out[skypilot_env.NUM_NODES] = str(count)
    return out
