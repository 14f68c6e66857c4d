"""The local cloud's launcher: one small process per cloud (prefix, log folder, Redis) that
starts agents by forking itself.

    python -m corral.services.providers.local.launcher --name NAME [--idle-exit-s 60]

Starting an agent as a new interpreter costs some 40 ms of CPU (the interpreter, then the
agent's imports) and, from a Celery worker, a fork of a large process. A cloud call returns in
a millisecond or two; so should the local cloud's. The launcher has imported the agent once;
each start is a fork that runs ``agent.main`` at once (about a millisecond, and the forked
agents share the launcher's pages).

It listens on an abstract Unix socket (Linux; no file to clean up, no path length limit) named
by the provider. A request is one JSON line ``{"argv": [...], "log": path, "env": {...},
"name": instance id, "record": {...}}`` (the record's hash fields, handed to the agent so it
does not read them back; optional); the answer is ``{"pid": n}`` once the child is forked, or
``{"error": ...}`` (``{"ping": true}`` answers ``{"pong": true}``).
The child leads a session of its own (it outlives the launcher and the worker that asked),
writes to the instance's log file, and carries the instance's name from the fork on
(``/proc/<pid>/comm``, as the provider identifies an agent by pid and name).
``{"quit": true}`` stops the launcher; so does an idle spell of ``--idle-exit-s``. Its agents
keep running either way.

Only the standard library and the agent's own modules: never redis-py or celery.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from corral.services.agent.core import PRIVATE_PREFIXES
from corral.services.providers.local import agent

COMM_LEN = 15  # the kernel keeps this many bytes of a process's name
PUBLIC_SETTINGS = frozenset({"CORRAL_HOME"})


def address(name: str) -> str:
    """The abstract socket address of the launcher called ``name``."""
    return f"\0corral-launcher-{name}"


def comm_name(instance_id: str) -> str:
    """The process name an agent started by the launcher carries."""
    return instance_id[:COMM_LEN]


class LauncherError(Exception):
    """The launcher could not be reached or could not start the agent."""


# No launcher listens, or one was exiting with our connection not yet accepted or not yet read
# (our request then meets a reset or a broken pipe): nothing started.
GONE = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, FileNotFoundError)


def ask(name: str, request: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one request to the launcher ``name``; its answer. One of :data:`GONE` when no
    launcher of that name listens (or the one that did is exiting)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(address(name))
        _check_server(conn, name)
        conn.sendall(json.dumps(request).encode() + b"\n")
        with conn.makefile("rb") as reader:
            line = reader.readline()
    if not line:
        raise LauncherError("the launcher closed the connection without an answer")
    answer: dict[str, Any] = json.loads(line)
    if "error" in answer:
        raise LauncherError(str(answer["error"]))
    return answer


def _check_server(conn: socket.socket, name: str) -> None:
    """Refuse a launcher socket another user serves. An abstract socket has no file mode, so
    once our launcher has exited idle any user could take its name and be sent our requests
    (commands, environments, the Redis URL): the kernel's word on the server (SO_PEERCRED)
    must be our own uid before anything is written."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        raise LauncherError(
            f"the local launcher socket {address(name)[1:]!r} is served by uid {uid}, not by "
            f"this user (uid {os.getuid()}): refusing to send it anything; stop that process"
        )


def public_env() -> dict[str, str]:
    """This process's environment without Corral's settings and secrets or cloud credentials
    (what an agent, and the tasks that can read its environment, may see)."""
    # CORRAL_HOME stays: a path, no secret (the folder is 0700), and what names which Corral
    # installation an agent belongs to (its processes are found and stopped by it).
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(PRIVATE_PREFIXES) or k in PUBLIC_SETTINGS
    }


def start_agent(
    name: str, python: str, request: dict[str, Any], *, idle_exit_s: float = 60.0
) -> int:
    """Start an agent through the launcher ``name``, starting the launcher first when none
    listens (several processes may race to: all but one launcher exit at once). The pid."""
    try:
        return int(ask(name, request)["pid"])
    except GONE:
        pass
    argv = [python, "-m", __name__, "--name", name, "--idle-exit-s", str(idle_exit_s)]
    proc = subprocess.Popen(
        argv,
        # Not the worker's settings and secrets: a task can read /proc/<ancestor>/environ,
        # and its agent is this launcher's fork. The Redis URL comes with each request.
        env=public_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    threading.Thread(target=proc.wait, name=f"reap-launcher-{name}", daemon=True).start()
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return int(ask(name, request)["pid"])
        except GONE:
            if time.monotonic() > deadline:
                raise LauncherError(
                    f"the local launcher did not come up ({' '.join(argv)})"
                ) from None
            time.sleep(0.01)


def stop(name: str) -> None:
    """Ask the launcher ``name`` to exit (its agents run on); nothing if none listens."""
    with contextlib.suppress(OSError, LauncherError, ValueError):
        ask(name, {"quit": True}, timeout_s=2.0)


def _reap() -> None:
    """Collect every child that ended (agents are the launcher's children until it exits)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(request: dict[str, Any], listener: socket.socket, conn: socket.socket, log: int) -> None:
    """In the forked child (named after its instance from birth, ``log`` its open log
    file): become the instance's agent; never returns."""
    code = 1
    try:
        listener.close()
        conn.close()
        signal.set_wakeup_fd(-1)
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.environ.update({str(k): str(v) for k, v in request.get("env", {}).items()})
        sys.argv = ["corral-agent", *request["argv"]]
        record = request.get("record")
        code = agent.main(
            list(request["argv"]), record=record if isinstance(record, dict) else None
        )
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException as exc:
        with contextlib.suppress(Exception):
            print(f"[corral-agent] launcher child failed: {exc!r}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _handle(conn: socket.socket, listener: socket.socket) -> bool:
    """Serve one request; False when asked to quit."""
    conn.settimeout(5.0)
    # An abstract socket has no file permissions: only our own user may start processes.
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        conn.close()
        return True
    with conn, conn.makefile("rb") as reader:
        line = reader.readline()
        try:
            request = json.loads(line)
        except ValueError:
            conn.sendall(b'{"error": "not a JSON line"}\n')
            return True
        if not isinstance(request, dict):
            conn.sendall(b'{"error": "not a JSON object"}\n')
            return True
        if request.get("quit"):
            conn.sendall(b'{"quit": true}\n')
            return False
        if request.get("ping"):
            conn.sendall(b'{"pong": true}\n')
            return True
        malformed = [
            key
            for key, kind in (("argv", list), ("log", str), ("name", str))
            if not isinstance(request.get(key), kind)
        ]
        if malformed or not isinstance(request.get("env", {}), dict):
            error = {"error": f"a start request needs argv, log, name and env; bad: {malformed}"}
            conn.sendall(json.dumps(error).encode() + b"\n")
            return True
        sys.stdout.flush()
        sys.stderr.flush()
        # The child carries its instance's name from birth (a fork copies the name): this
        # process takes the name for the fork and gives its own back. So the answer never names
        # a pid that does not look like the instance's agent, and need not wait for the child
        # to be scheduled to rename itself (under load, most of what a start cost).
        # The log is opened here, so it exists once the answer is sent, and a log that cannot
        # be opened is the asker's error, not a child that dies unseen.
        try:
            log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            error = {"error": f"cannot open the log {request['log']}: {exc.strerror}"}
            conn.sendall(json.dumps(error).encode() + b"\n")
            return True
        own = _name()
        _rename(comm_name(request["name"]))
        try:
            pid = os.fork()
        except OSError:
            _rename(own)
            os.close(log)
            raise
        if pid == 0:
            _child(request, listener, conn, log)
        _rename(own)
        os.close(log)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return True


def _name() -> str:
    with open("/proc/self/comm", encoding="utf-8", errors="replace") as fh:
        return fh.read().strip()


def _rename(name: str) -> None:
    with open("/proc/self/comm", "w", encoding="utf-8") as fh:
        fh.write(name)


def serve(name: str, idle_exit_s: float) -> int:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(name))
    except OSError:
        return 0  # another launcher of this name is up: it serves
    listener.listen(128)
    # SIGCHLD wakes the select below (through the wakeup pipe); children are reaped in the
    # loop, so an ended agent is not left a zombie.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([listener.fileno(), wake_r], [], [], 1.0)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        _reap()
        if listener.fileno() in ready:
            conn, _ = listener.accept()
            last = time.monotonic()
            try:
                if not _handle(conn, listener):
                    return 0
            except OSError:
                continue  # the asker went away; the child (if any) runs on
        elif time.monotonic() - last > idle_exit_s:
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="corral-local-launcher", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--name", required=True)
    parser.add_argument("--idle-exit-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    return serve(args.name, args.idle_exit_s)


if __name__ == "__main__":
    sys.exit(main())
