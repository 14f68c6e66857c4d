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
"name": instance id, "record": {...}, "start_in_s": s}`` (the record's hash fields, handed to
the agent so it does not read them back; optional); the answer is ``{"pid": n}`` once the child
is forked, or ``{"error": ...}`` (``{"ping": true}`` answers ``{"pong": true}``).
The child leads a session of its own (it outlives the launcher and the worker that asked),
writes to the instance's log file, and carries the instance's name from the fork on
(``/proc/<pid>/comm``, as the provider identifies an agent by pid and name).

A machine boots (the zone's launch delay) before its agent starts. With ``start_in_s`` the
launcher keeps the request: the answer is ``{"deferred": true}`` at once, and the agent records
its own pid when it starts (the provider never learns it). So a booting machine costs this host
nothing, as a VM booting in a cloud costs the caller nothing: no process, no fork in the launch
call (a burst of a thousand launches used to spend a third of its CPU forking agents that then
slept). The agent is forked a little before the boot's end (``LEAD_S``, at most half the boot)
and waits silent for it, so boots that end together (a burst of launches) find their agents
ready rather than queued behind a burst of forks. ``{"cancel": [names]}`` drops the kept starts
of those instances, killing an agent that waits (a terminate during the boot); ``{"kept":
true}`` answers ``{"kept": [names]}``.

``{"quit": true}`` stops the launcher, and the starts it kept are dropped, the agents that wait
killed (those machines never come up: a power cut); an idle spell of ``--idle-exit-s`` with
none kept stops it too. Its agents that have started keep running either way.

Only the standard library and the agent's own modules: never redis-py or celery.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
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
from collections.abc import Iterator
from typing import Any

from corral.services.agent.agent_base import PRIVATE_PREFIXES
from corral.services.providers.local import agent

COMM_LEN = 15  # the kernel keeps this many bytes of a process's name
PUBLIC_SETTINGS = frozenset({"CORRAL_HOME"})
MAX_START_IN_S = 24 * 3600.0  # the longest boot a kept start may wait out
MAX_KEPT = 100_000  # kept starts at once (each a request of a few kilobytes)
LEAD_S = 5.0  # a kept start's agent is forked up to this long before its boot's end (Kept)
FORK_BATCH_S = 0.05  # forks in a row before the socket is served again


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


def _pid(answer: dict[str, Any]) -> int | None:
    return None if answer.get("deferred") else int(answer["pid"])


def start_agent(
    name: str, python: str, request: dict[str, Any], *, idle_exit_s: float = 60.0
) -> int | None:
    """Start an agent through the launcher ``name``, starting the launcher first when none
    listens (several processes may race to: all but one launcher exit at once). The pid; None
    when the start is kept for later (``start_in_s``)."""
    try:
        return _pid(ask(name, request))
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
            return _pid(ask(name, request))
        except GONE:
            if time.monotonic() > deadline:
                raise LauncherError(
                    f"the local launcher did not come up ({' '.join(argv)})"
                ) from None
            time.sleep(0.01)


def cancel(name: str, instance_ids: list[str]) -> int:
    """Drop the kept starts of these instances; how many were kept (0 if no launcher listens)."""
    try:
        return int(ask(name, {"cancel": list(instance_ids)}, timeout_s=2.0)["cancelled"])
    except GONE:
        return 0


def stop(name: str) -> None:
    """Ask the launcher ``name`` to exit (its agents run on); nothing if none listens."""
    with contextlib.suppress(OSError, LauncherError, ValueError):
        ask(name, {"quit": True}, timeout_s=2.0)


def _reap(kept: Kept) -> None:
    """Collect every child that ended (agents are the launcher's children until it exits)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        kept.reaped(pid)


def _child(
    request: dict[str, Any],
    listener: socket.socket,
    conn: socket.socket | None,
    log: int,
    not_before: float | None,
) -> None:
    """In the forked child (named after its instance from birth, ``log`` its open log
    file): become the instance's agent, silent until ``not_before``; never returns."""
    code = 1
    try:
        listener.close()
        if conn is not None:
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
            list(request["argv"]),
            record=record if isinstance(record, dict) else None,
            not_before=not_before,
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


def lead_s(start_in_s: float) -> float:
    """How long before its boot's end a kept start's agent is forked: :data:`LEAD_S`, or half
    the boot when that is shorter."""
    return min(LEAD_S, start_in_s / 2)


class Kept:
    """The starts kept for later: each is forked :func:`lead_s` before its boot's end (its
    agent then waits silent for that end), so a burst of boots ending together does not queue
    a burst of forks behind it. Until its boot's end a start counts as kept, forked or not: a
    cancel drops one not forked yet and kills one that waits. A cancelled start stays in the
    heap until its time comes and is skipped then. Times are ``time.monotonic``."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []  # (fork at, order, name)
        self._requests: dict[str, tuple[float, dict[str, Any]]] = {}  # name -> (due, request)
        self._waiting: dict[str, tuple[float, int]] = {}  # forked early: name -> (due, pid)
        self._ends: list[tuple[float, str]] = []  # the waiting ones' boot ends, soonest first
        self._pids: dict[int, str] = {}  # the waiting ones by pid
        self._seq = 0

    def __len__(self) -> int:
        return len(self._requests) + len(self._waiting)

    def add(self, due: float, request: dict[str, Any], lead: float = 0.0) -> None:
        self._seq += 1
        self._requests[request["name"]] = (due, request)
        heapq.heappush(self._heap, (due - lead, self._seq, request["name"]))

    def cancel(self, names: list[str]) -> int:
        """Drop these starts; how many were kept. An agent that waits for its boot's end is
        killed: it has claimed nothing and run nothing yet. One whose boot has ended is left
        alone: it checks its machine's state as it claims it (and a terminate signals an agent
        that has claimed it)."""
        dropped, now = 0, time.monotonic()
        for name in map(str, names):
            dropped += self._requests.pop(name, None) is not None
            waiting = self._waiting.pop(name, None)
            if waiting is not None:
                self._pids.pop(waiting[1], None)
            # Never a reused pid: a child's pid is not given again until it is reaped, and a
            # reaped one leaves this book first (``reaped``).
            if waiting is not None and waiting[0] > now:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(waiting[1], signal.SIGKILL)
                dropped += 1
        return dropped

    def drop_all(self) -> None:
        """Drop every kept start, killing the agents that wait (the launcher stops)."""
        self.cancel(list(self._requests) + list(self._waiting))

    def names(self) -> list[str]:
        return sorted({*self._requests, *self._waiting})

    def wait_s(self, now: float) -> float | None:
        """Seconds until the next fork is due (None: none to fork)."""
        while self._heap and self._heap[0][2] not in self._requests:
            heapq.heappop(self._heap)  # cancelled
        return max(0.0, self._heap[0][0] - now) if self._heap else None

    def to_fork(self, now: float) -> Iterator[tuple[float, dict[str, Any]]]:
        """The (due, request) of each start whose fork time has come, soonest first, taken
        as the caller asks for the next one."""
        while self._heap and self._heap[0][0] <= now:
            _, _, name = heapq.heappop(self._heap)
            kept = self._requests.pop(name, None)
            if kept is not None:
                yield kept

    def forked(self, name: str, due: float, pid: int) -> None:
        """The agent of ``name`` was forked ahead of its boot's end and waits for it."""
        self._waiting[name] = (due, pid)
        self._pids[pid] = name
        heapq.heappush(self._ends, (due, name))

    def reaped(self, pid: int) -> None:
        """Child ``pid`` ended (an agent that waited failed before its boot's end)."""
        name = self._pids.pop(pid, None)
        if name is not None:
            self._waiting.pop(name, None)

    def settle(self, now: float) -> None:
        """Forget the waiting agents whose boot has ended: they are on their own now."""
        while self._ends and self._ends[0][0] <= now:
            due, name = heapq.heappop(self._ends)
            waiting = self._waiting.get(name)
            if waiting is not None and waiting[0] == due:
                del self._waiting[name]
                self._pids.pop(waiting[1], None)


def _answer(conn: socket.socket, answer: dict[str, Any]) -> None:
    conn.sendall(json.dumps(answer).encode() + b"\n")


def _handle(conn: socket.socket, listener: socket.socket, kept: Kept) -> bool:
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
            _answer(conn, {"error": "not a JSON line"})
            return True
        if not isinstance(request, dict):
            _answer(conn, {"error": "not a JSON object"})
            return True
        if request.get("quit"):
            _answer(conn, {"quit": True})
            return False
        if request.get("ping"):
            _answer(conn, {"pong": True})
            return True
        if request.get("kept"):
            _answer(conn, {"kept": kept.names()})
            return True
        if isinstance(request.get("cancel"), list):
            _answer(conn, {"cancelled": kept.cancel(request["cancel"])})
            return True
        malformed = [
            key
            for key, kind in (("argv", list), ("log", str), ("name", str))
            if not isinstance(request.get(key), kind)
        ]
        start_in_s = request.get("start_in_s", 0)
        if not isinstance(start_in_s, int | float) or not 0 <= start_in_s <= MAX_START_IN_S:
            malformed.append("start_in_s")
        if malformed or not isinstance(request.get("env", {}), dict):
            error = f"a start request needs argv, log, name and env; bad: {malformed}"
            _answer(conn, {"error": error})
            return True
        # The log is opened here, so it exists once the answer is sent, and a log that cannot
        # be opened is the asker's error, not a child that dies unseen.
        try:
            log = _open_log(request["log"])
        except OSError as exc:
            _answer(conn, {"error": f"cannot open the log {request['log']}: {exc.strerror}"})
            return True
        if start_in_s > 0:
            os.close(log)
            if len(kept) >= MAX_KEPT:
                _answer(conn, {"error": f"{MAX_KEPT} starts are kept already; retry later"})
                return True
            kept.add(time.monotonic() + start_in_s, request, lead_s(start_in_s))
            _answer(conn, {"deferred": True})
            return True
        pid = _fork(request, listener, conn, log)
        _answer(conn, {"pid": pid})
    return True


def _open_log(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _fork(
    request: dict[str, Any],
    listener: socket.socket,
    conn: socket.socket | None,
    log: int,
    not_before: float | None = None,
) -> int:
    """Fork the agent of ``request`` (``log`` its open log file, closed here); its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    # The child carries its instance's name from birth (a fork copies the name): this
    # process takes the name for the fork and gives its own back. So the answer never names
    # a pid that does not look like the instance's agent, and need not wait for the child
    # to be scheduled to rename itself (under load, most of what a start cost).
    own = _name()
    _rename(comm_name(request["name"]))
    try:
        pid = os.fork()
    except OSError:
        _rename(own)
        os.close(log)
        raise
    if pid == 0:
        _child(request, listener, conn, log, not_before)
    _rename(own)
    os.close(log)
    return pid


def _start_due(kept: Kept, listener: socket.socket) -> bool:
    """Fork the agents whose fork time has come, for at most :data:`FORK_BATCH_S` (so a
    request waiting on the socket is served between batches); True when some are left. A log
    that cannot be opened now (its folder removed meanwhile) leaves that machine without an
    agent: the provider finds it lost once its start timeout passed, as a VM that never came
    up."""
    now = time.monotonic()
    kept.settle(now)
    for due, request in kept.to_fork(now):
        try:
            pid = _fork(request, listener, None, _open_log(request["log"]), due)
        except OSError as exc:
            print(f"[corral-launcher] could not start {request['name']}: {exc}", file=sys.stderr)
        else:
            if due > time.monotonic():
                kept.forked(request["name"], due, pid)
        if time.monotonic() - now > FORK_BATCH_S:
            return True
    return False


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
    agent.warm_up()  # once here rather than in every agent forked (see agent.warm_up)
    # SIGCHLD wakes the select below (through the wakeup pipe); children are reaped in the
    # loop, so an ended agent is not left a zombie.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    last = time.monotonic()
    kept = Kept()
    more = False
    while True:
        wait_s = 0.0 if more else kept.wait_s(time.monotonic())
        timeout_s = 1.0 if wait_s is None else min(1.0, wait_s)
        ready, _, _ = select.select([listener.fileno(), wake_r], [], [], timeout_s)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        _reap(kept)
        more = _start_due(kept, listener)
        if listener.fileno() in ready:
            conn, _ = listener.accept()
            last = time.monotonic()
            try:
                if not _handle(conn, listener, kept):
                    kept.drop_all()
                    return 0
            except OSError:
                continue  # the asker went away; the child (if any) runs on
        elif not kept and time.monotonic() - last > idle_exit_s:
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
