"""Relayed sessions on the node: ``corral attach`` (a shell) and ``corral port-forward`` (one
TCP connection to 127.0.0.1:PORT), each the node's end of two byte streams kept by the API
(shared/execs.py; the design in docs/attach.md).

A session arrives as an exec of another kind, taken on a heartbeat like any other. It then
lives in threads of its own, so its bytes never wait for a heartbeat: one reads what the user
sent (the link waits for it) and writes it to the shell or the socket; the other reads what the
shell or the socket said and sends it. When the node's side ends, the exit code is recorded,
then the end of the stream, so the user reads both together. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.services.agent.pgroup import kill_group
from corral.services.agent.processes import shell_exit_code
from corral.services.agent.sandbox import forward_refusal, run_as

# How an argv is run: as is, or in the task's container (argv, stdin wanted, a tty wanted).
Wrap = Callable[[list[str], bool, bool], list[str]]


def as_is(argv: list[str], _stdin: bool, _tty: bool) -> list[str]:
    return argv


@dataclass(frozen=True)
class Where:
    """Where a command or a session runs: the work's working directory, environment, how an
    argv is wrapped (its container), the user it runs as (None: the agent's), and the mark
    its processes carry in their environment (a port-forward reaches only their sockets)."""

    cwd: str | None
    env: dict[str, str]
    wrap: Wrap = as_is
    uid: int | None = None
    marker: str | None = None


READ_BYTES = 64 * 1024
PULL_WAIT_S = 20.0
FULL_PAUSE_S = 0.05


class Peer:
    """The node's end: bytes in, bytes out, an end of input, and how it ended."""

    def read(self) -> bytes:  # b"" at the end
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def close_input(self) -> None:
        raise NotImplementedError

    def wait(self) -> int:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def resize(self, rows: int, cols: int) -> None:
        """The user's terminal changed size (a pty only)."""


class ShellPeer(Peer):
    """A shell (or the command given) on a pty when the user has a terminal, else on pipes
    (stdout and stderr together), in a process group of its own."""

    def __init__(self, item: dict[str, Any], where: Where) -> None:
        command = str(item.get("command") or "")
        self.tty = bool(item.get("tty"))
        wrap, cwd, env = where.wrap, where.cwd, where.env
        stdio: dict[str, Any]
        if self.tty:
            argv = wrap(["bash", "-c", command] if command else ["bash", "-l"], True, True)
            self.master, slave = os.openpty()
            size = struct.pack("HHHH", int(item.get("rows", 24)), int(item.get("cols", 80)), 0, 0)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
            if where.uid is not None:
                os.fchown(slave, where.uid, where.uid)  # the shell's user owns its terminal
            env = {"TERM": "xterm-256color", **env}
            stdio = dict(stdin=slave, stdout=slave, stderr=slave, preexec_fn=_controlling_tty)
        else:
            argv = wrap(["bash", "-c", command] if command else ["bash"], True, False)
            stdio = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.child = subprocess.Popen(
            argv, cwd=cwd, env=env, start_new_session=True, **stdio, **run_as(where.uid)
        )
        if self.tty:
            os.close(slave)
        else:
            assert self.child.stdout is not None
            self.master = self.child.stdout.fileno()

    def read(self) -> bytes:
        try:
            return os.read(self.master, READ_BYTES)
        except OSError:  # EIO: the pty's other side closed
            return b""

    def write(self, data: bytes) -> None:
        if self.tty:
            view = memoryview(data)
            while view:
                view = view[os.write(self.master, view) :]
        elif self.child.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.child.stdin.write(data)
                self.child.stdin.flush()

    def resize(self, rows: int, cols: int) -> None:
        if self.tty:  # the kernel tells the shell's foreground group (SIGWINCH)
            with contextlib.suppress(OSError):
                fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def close_input(self) -> None:
        if self.tty:  # the user's terminal went away: hang up, as sshd does
            kill_group(self.child.pid, signal.SIGHUP)
        elif self.child.stdin is not None:
            with contextlib.suppress(OSError):
                self.child.stdin.close()

    def wait(self) -> int:
        code = self.child.wait()
        if self.tty:
            with contextlib.suppress(OSError):
                os.close(self.master)
        return shell_exit_code(code)

    def kill(self) -> None:
        kill_group(self.child.pid, signal.SIGKILL)


class ForwardPeer(Peer):
    """One TCP connection to 127.0.0.1:PORT on the node."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.settimeout(None)

    def read(self) -> bytes:
        try:
            return self.sock.recv(READ_BYTES)
        except OSError:
            return b""

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def wait(self) -> int:
        with contextlib.suppress(OSError):
            self.sock.close()
        return 0

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


def _controlling_tty() -> None:
    """In the child, after setsid: its pty becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Session:
    """One session's threads on the node."""

    def __init__(
        self,
        link: Any,
        item: dict[str, Any],
        where: Where,
    ) -> None:
        self.link = link
        self.where = where
        self.id = str(item["id"])
        self.item = item
        self.peer: Peer | None = None
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"session-{self.id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            if self.item.get("kind") == "forward":
                port = int(self.item["port"])
                refused = forward_refusal(port, self.where.marker) if self.where.marker else None
                if refused is not None:
                    self._end(1, refused)
                    return
                try:
                    self.peer = ForwardPeer(port)
                except OSError as exc:
                    self._end(1, f"nothing answers at 127.0.0.1:{port} on the node ({exc})")
                    return
            else:
                self.peer = ShellPeer(self.item, self.where)
        except (OSError, ValueError, KeyError) as exc:
            self._end(1, f"the session could not start on the node: {exc}")
            return
        threading.Thread(target=self._pump_in, daemon=True).start()
        self._pump_up(self.peer)
        self._end(self.peer.wait(), None)

    def _pump_up(self, peer: Peer) -> None:
        """The node's side to the user until it ends (or the session is gone)."""
        while data := peer.read():
            if not self._push(data, False):
                peer.kill()
                return

    def _pump_in(self) -> None:
        """The user's side to the node until it ends (or the node's side has ended)."""
        peer = self.peer
        assert peer is not None
        while not self.finished.is_set():
            try:
                data, eof, size = self.link.session_pull(self.id, PULL_WAIT_S)
            except Exception:
                if self._gone():
                    peer.kill()
                    return
                time.sleep(1.0)
                continue
            try:
                if data:
                    peer.write(data)
                if size:
                    peer.resize(*size)
            except OSError:
                return
            if eof:
                peer.close_input()
                return

    def _push(self, data: bytes, eof: bool) -> bool:
        """Send, waiting while the user's side is behind; False once the session is gone."""
        pause = FULL_PAUSE_S
        while True:
            try:
                if self.link.session_push(self.id, data, eof):
                    return True
            except Exception:
                if self._gone():
                    return False
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _gone(self) -> bool:
        try:
            return bool(self.link.session_gone(self.id))
        except Exception:
            return False

    def _end(self, code: int, error: str | None) -> None:
        """The exit code first, then the end of the stream: the user reads them together."""
        self.finished.set()
        for _ in range(30):
            try:
                self.link.exec_done(self.id, code, error)
                break
            except Exception:
                time.sleep(1.0)
        self._push(b"", True)

    def stop(self) -> None:
        if self.peer is not None:
            self.peer.kill()
