"""The node agent's files: the task's workdir (a bundle unpacked or a repository cloned) and
its file mounts (``s3://`` copied by a child Python), put in place before setup with the
heartbeat going. One concern of :class:`~.core.Agent` (a mixin it composes). Standard library
only."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from corral.services.agent.agent_base import AgentBase
from corral.services.agent.bundle import BundleError, clone, mount_path, unpack
from corral.services.agent.link import Work, say
from corral.services.agent.processes import run_beating


class FilesMixin(AgentBase):
    """The task's files, put in place before setup."""

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
