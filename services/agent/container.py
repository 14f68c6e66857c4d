"""``image_id: docker:<image>``: the task's container, as SkyPilot runs one. The agent starts it
detached on the host's network with the workdir mounted at the same path, and runs setup, run,
``corral exec`` and ``corral attach`` in it with ``docker exec``. Envs go by name only: their
values reach docker through its environment, never its command line."""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path


def env_names(envs: dict[str, str]) -> list[str]:
    """docker's ``-e NAME`` for each variable: the value comes from docker's environment."""
    return [arg for name in sorted(envs) for arg in ("-e", name)]


def container_name(instance_id: str) -> str:
    return "corral-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in instance_id)


def run_argv(
    docker: str, name: str, image: str, workdir: str | None, envs: dict[str, str]
) -> list[str]:
    """``docker run`` of the task's container, kept alive until it is removed."""
    argv = [docker, "run", "-d", "--name", name, "--network", "host"]
    if workdir and Path(workdir).is_dir():
        argv += ["-v", f"{workdir}:{workdir}", "-w", workdir]
    # `--` ends docker's options: the image is never read as one.
    return [*argv, *env_names(envs), "--", image, "sleep", "infinity"]


@dataclass(frozen=True)
class Container:
    """A started container: docker's path and the container's name."""

    docker: str
    name: str

    def exec_argv(
        self,
        argv: list[str],
        workdir: str | None,
        envs: dict[str, str],
        *,
        stdin: bool = False,
        tty: bool = False,
    ) -> list[str]:
        """``argv`` run in the container by ``docker exec`` (``-i`` with ``stdin``, ``-t``
        with ``tty``)."""
        out = [self.docker, "exec", *(["-i"] if stdin else []), *(["-t"] if tty else [])]
        if workdir and Path(workdir).is_dir():
            out += ["-w", workdir]
        return [*out, *env_names(envs), self.name, *argv]

    def remove(self, env: dict[str, str]) -> None:
        """``docker rm -f``: the container goes with the agent."""
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [self.docker, "rm", "-f", self.name],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
            )
