"""Where the node agent's sessions run: ``corral exec``, attach and port-forward run in the
machine's work, in an assignment it names, or in the task's docker container (started here
for an ``image_id: docker:<image>``, removed when the agent ends). One concern of
:class:`~.core.Agent` (a mixin it composes). Standard library only."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from corral.services.agent.agent_base import AgentBase
from corral.services.agent.container import Container, container_name, run_argv
from corral.services.agent.link import say
from corral.services.agent.sandbox import assignment_key
from corral.services.agent.sessions import Where


class PlacesMixin(AgentBase):
    """Where sessions, execs and port-forwards run, and the task's container."""

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
        code = self._stop_child(child)
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
