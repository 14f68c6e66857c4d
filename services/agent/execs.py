"""Commands run on a machine after it is up (``corral exec``), beside its work.

On every beat the agent takes the commands queued for its node, starts each (bash, in the
task's workdir with the task's environment, a process group of its own), and sends what each
wrote since the last beat, then its exit code once it ended. Output goes through a file, not a
pipe, so a command never blocks on a full pipe between beats. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.services.agent.sessions import Session, Where

CHUNK = 256 * 1024


@dataclass
class Running:
    id: str
    child: subprocess.Popen[bytes]
    path: str
    sent: int = 0


class Execs:
    def __init__(self) -> None:
        self.running: dict[str, Running] = {}
        self.sessions: dict[str, Session] = {}  # corral attach, port-forward (their threads)
        self.folder = ""  # made by the first command, removed by stop_all

    def step(self, link: Any, where: Callable[[dict[str, Any]], Where | str]) -> None:
        """Take new commands, ship what the running ones wrote, report those that ended.
        ``where(item)`` says where an item runs (the machine's work or one assignment's: its
        folder, environment, user, container), or why it cannot run here."""
        take = getattr(link, "take_execs", None)
        if take is None:
            return
        for item in take():
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
                code = run.child.returncode
                link.exec_done(xid, 128 - code if code < 0 else code)
                with contextlib.suppress(OSError):
                    os.unlink(run.path)
                del self.running[xid]

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
                **where.popen(),
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
            with contextlib.suppress(OSError):
                os.killpg(run.child.pid, signal.SIGKILL)
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = ""
