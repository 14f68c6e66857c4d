"""The node agent: what runs on a local cloud "machine". One OS process per instance.

    python -m corral.services.providers.local.agent --instance-id ID --redis-url URL \\
        --prefix P [--heartbeat-s 1.0] [--heartbeat-ttl-s 10] [--kill-grace-s 5] \\
        [--boot-delay-s 0]

``--boot-delay-s`` plays a VM's boot: the agent stays silent that long before it starts (the
provider passes the zone's ``launch_delay_s``), so a launch call returns at once and the machine
reports in later, as on a real cloud. On Linux the launcher plays the boot instead (it forks the
agent once the boot is over: see launcher.py), and the agent, with ``--own-pid``, records its
own pid first, and runs only if its machine is still waiting for it (not terminated meanwhile,
no other agent started for it).

It reads its task (setup, run, envs, workdir) from its instance record, written to Redis by the
provider before the process starts (and handed to it by the launcher, which forks it: then it is
not read back). It heartbeats every ``heartbeat-s``: a key with a TTL
holding the time, its resources and its activity (setup | running | idle | exited). It runs
``setup`` then ``run`` with bash, each in a process group of its own, their output going to the
agent's own stdout/stderr (the instance's log file). When ``run`` ends (a job) it records the
exit code and exits; without ``run`` (a service or workspace) it stays up idle. On SIGTERM it
stops its child's process group (SIGTERM, then SIGKILL after ``kill-grace-s``) and exits with a
final record.

An idle machine (a warm one, launched without ``run``) takes *assignments*, several at once:
on every heartbeat it reads the hash ``<prefix>:local:assign:<id>`` (assignment id -> JSON
``{id, setup, run, envs, workdir}``). Each id not seen before starts: its setup then its run,
the same way, in process groups of its own, alongside the others. An id that runs but left the
hash is withdrawn (SIGTERM to its group, SIGKILL after ``kill-grace-s``); an id that ended
never runs again. Each result goes to the hash ``assign-result:<id>`` under its id. An
assignment without ``run`` is a service: after its setup it stays ``serving`` (setup's
background processes kept) until it is withdrawn.

The work itself is run by the agent core (:mod:`corral.services.agent.core`), the same one a
cloud machine's agent runs; this module is its Redis link and its command line.

Dependency-light on purpose: the standard library, Redis through redis_conn's light client
(``MiniRedis``: redis-py's import alone costs three times the agent's) and state.py; never celery.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from corral.services.agent.core import Agent
from corral.services.agent.link import FinalBeat, LinkError, Work, say
from corral.services.providers.local.folders import job_bundle_path
from corral.services.providers.local.state import (
    LOCAL_ADDRESS,
    TAG_FAULT,
    TERMINATED,
    UNREGISTERED,
    CloudState,
    InstanceRecord,
    beat_value,
)
from corral.services.queues.redis_conn import MiniRedis, RedisError

if TYPE_CHECKING:
    from corral.services.state.execs import ExecBook

T = TypeVar("T")


@contextlib.contextmanager
def _link_errors() -> Iterator[None]:
    """A Redis error inside, raised as the agent's :class:`LinkError`."""
    try:
        yield
    except RedisError as exc:
        raise LinkError(str(exc)) from exc


class RedisLink:
    """The local cloud's link: the agent writes its reports into the cloud's records."""

    def __init__(
        self,
        state: CloudState,
        rec: InstanceRecord,
        prefix: str = "corral",
        url: str | None = None,
    ) -> None:
        self.state = state
        self.url = url  # sessions' threads open connections of their own
        self._local = threading.local()
        self.rec = rec
        self.prefix = prefix
        # The agent's client (redis_conn.MiniRedis, typed as redis-py's for CloudState), which
        # the exec book uses on the main thread (sessions' threads open their own).
        self._r: Any = state.r
        # The instance has been heard (a beat written): by this agent, or before it started
        # (its record already holds a first beat's time), so no beat of it writes that again.
        self._heard = rec.first_heartbeat_at is not None
        self._child_pid: int | None = None  # a child's pid the next beat records
        # The last look at the machine's queues found both empty: the job look that follows
        # it in the same step is answered without a command (see take_execs).
        self._queues_empty = False

    def heartbeat(
        self,
        activity: str,
        now: float,
        ttl_s: float,
        queued: dict[str, Any] | None,
        assignment: str | None,
        assignments: dict[str, str],
        status: dict[str, Any] | None = None,
    ) -> None:
        with _link_errors():
            self.state.heartbeat(
                self.rec,
                activity,
                now,
                ttl_s,
                queued,
                assignment,
                assignments,
                status,
                first=not self._heard,
                child_pid=self._child_pid,
            )
            self._heard = True
            self._child_pid = None

    def assignments(self) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        with _link_errors():
            return self.state.assignments(self.rec.id)

    def put_results(self, results: list[dict[str, Any]], drop: list[str]) -> None:
        with _link_errors():
            self.state.put_assign_results(self.rec.id, results, drop)

    def record_children(
        self, child_pid: int | None = None, groups: list[int] | None = None
    ) -> None:
        if groups is None:
            # The forced beat that follows every spawn writes it, in the same round trip.
            self._child_pid = child_pid
            return
        fields: dict[str, str | int] = {"child_pids": json.dumps(groups)}
        child_pid = child_pid if child_pid is not None else self._child_pid
        if child_pid is not None:
            fields["child_pid"] = child_pid
        with _link_errors():
            self.state.set_fields(self.rec.id, **fields)
        self._child_pid = None

    def finish(
        self, exit_code: int | None, reason: str, now: float, beat: FinalBeat | None = None
    ) -> None:
        """The final record and the last beat in one script (no beat of its own before it)."""
        value = None
        if beat is not None:
            value = beat_value(
                self.rec,
                beat.activity,
                beat.now,
                beat.queued,
                beat.assignment,
                beat.assignments,
                beat.status,
            )
        with _link_errors():
            self.state.finish(
                self.rec,
                state=TERMINATED,
                exit_code=exit_code,
                reason=reason,
                now=now,
                beat=value,
                beat_ttl_s=beat.ttl_s if beat is not None else 0.0,
                first=not self._heard,
            )

    def peers(self, count: int) -> list[str] | None:
        """Every local machine is this host (LOCAL_ADDRESS); known once every node of the
        launch has been heard, so none starts before the others are up."""
        if count == 1:
            return [LOCAL_ADDRESS]
        with _link_errors():
            heard = self.state.heard_nodes(self.rec.attempt_id)
        return [LOCAL_ADDRESS] * count if len(heard) == count and all(heard) else None

    # --- corral exec and sessions (corral attach, port-forward): the exec book's protocol, on
    # this agent's client (services/state/execs.py; the node side: services/agent/) ---------
    def _book(self) -> ExecBook:
        """The exec book on this thread's connection (one connection is never shared between
        threads: a session's run in threads of their own)."""
        # Here: most machines never run an exec, and an agent started as a new interpreter
        # (no launcher) would pay its import (about 6 ms of CPU with the relay) at every start.
        from corral.services.state.execs import ExecBook

        return ExecBook(self._session_redis(), self.prefix)

    def take_execs(self) -> list[dict[str, Any]]:
        """The commands queued for this machine, taken. One EXISTS looks at its command queue
        and its job queue at once: nearly always both are empty (a quick job's end looks at
        them once, an idle machine at every beat), and then the step's job look that follows
        (:meth:`take_job`) costs no command either."""
        with _link_errors():
            book = self._book()
            self._queues_empty = not book.anything_queued(self.rec.id)
            return [] if self._queues_empty else book.take(self.rec.id)

    def take_job(self) -> dict[str, Any] | None:
        """The next job queued for this machine (it is free), marked started."""
        if self._queues_empty:  # the step's look at the queues just now found none
            self._queues_empty = False
            return None
        with _link_errors():
            return self._book().take_job(self.rec.id)

    def exec_output(self, exec_id: str, data: bytes) -> None:
        with _link_errors():
            self._book().output(exec_id, data)

    def exec_done(self, exec_id: str, exit_code: int, error: str | None = None) -> None:
        with _link_errors():
            self._book().done(exec_id, exit_code, error)

    def _in_session(self) -> bool:
        return threading.current_thread() is not threading.main_thread()

    def _session_redis(self) -> Any:
        """This thread's own connection (one connection is never shared between threads)."""
        r = getattr(self._local, "r", None)
        if r is None:
            if not self._in_session():
                return self._r
            if self.url is None:
                raise LinkError("this agent was started without a Redis URL for sessions")
            r = self._local.r = MiniRedis.from_url(self.url)
        return r

    def session_pull(
        self, session_id: str, wait_s: float
    ) -> tuple[bytes, bool, tuple[int, int] | None]:
        with _link_errors():
            book = self._book()
            got = book.wait_pull(session_id, "in", min(wait_s, 2.0))
            if got is None and book.gone(session_id):
                raise LinkError(f"session {session_id} is gone")
        return got or (b"", False, None)

    def session_push(self, session_id: str, data: bytes, eof: bool) -> bool:
        with _link_errors():
            book = self._book()
            if book.gone(session_id):
                raise LinkError(f"session {session_id} is gone")
            return book.push(session_id, "up", data, eof)

    def session_gone(self, session_id: str) -> bool:
        with _link_errors():
            return self._book().gone(session_id)

    def fetch_bundle(self, files: dict[str, Any]) -> bytes:
        """The bundle its provider copied from the blob store beside the machine's folder."""
        try:
            return Path(str(files["bundle_file"])).read_bytes()
        except (KeyError, OSError):
            raise LinkError(
                f"the bundle {files['bundle']['sha256']} is no longer kept for this project"
            ) from None

    def fetch_job_bundle(self, item: dict[str, Any]) -> bytes:
        """A queued job's workdir bundle, which the control plane copied beside the machine's
        folder when the job was queued (LocalProvider.hand_job_bundle)."""
        sha = str(item["bundle"]["sha256"])
        try:
            return job_bundle_path(Path(str(self.rec.files["home"])), sha).read_bytes()
        except (KeyError, OSError):
            raise LinkError(f"the job's bundle {sha} is no longer kept for this project") from None


RECORD_PATIENCE_S = 600.0  # an agent started while Redis is away waits this long for it


def _patiently(call: Callable[[], T], what: str) -> T:
    """``call()``, again with backoff while Redis cannot be reached (the machine was started
    just before a Redis restart or failover): a control-plane outage must not kill it."""
    deadline = time.monotonic() + RECORD_PATIENCE_S
    wait_s, said = 0.1, False
    while True:
        try:
            return call()
        except RedisError as exc:
            if time.monotonic() + wait_s > deadline:
                raise
            if not said:
                say(f"cannot {what} yet ({exc}); retrying")
                said = True
            time.sleep(wait_s * random.uniform(0.5, 1.0))
            wait_s = min(wait_s * 2, 2.0)


def _read_record(state: CloudState, instance_id: str) -> InstanceRecord | None:
    """The instance's record (see :func:`_patiently`)."""
    return _patiently(lambda: state.record(instance_id), "read the instance record")


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="corral-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--instance-id", required=True)
    parser.add_argument(
        "--redis-url",
        default=None,
        help="Redis URL (default: CORRAL_REDIS_URL; the provider passes it there, off the "
        "command line, so a password never shows in ps)",
    )
    parser.add_argument("--prefix", default="corral")
    parser.add_argument("--heartbeat-s", type=float, default=1.0)
    parser.add_argument("--heartbeat-ttl-s", type=float, default=None)
    parser.add_argument("--kill-grace-s", type=float, default=5.0)
    parser.add_argument("--boot-delay-s", type=float, default=0.0)
    parser.add_argument(
        "--own-pid",
        action="store_true",
        help="record this process's pid in the instance record before anything else, and run "
        "only if the instance still waits for its agent (the launcher started it at its "
        "boot's end)",
    )
    parser.add_argument(
        "--redis-url-stdin",
        action="store_true",
        help="read the Redis URL from the first line of stdin (kept out of the environment, "
        "which the tasks can read)",
    )
    return parser


def warm_up() -> None:
    """Do once, in the launcher before it forks any agent, what every agent's start would
    otherwise do for itself: build the command line's parser, load the resolver's libraries,
    make a Redis client and its scripts and read a record. A forked agent shares what its
    launcher did; one that does it again pays for it in copied pages (measured here: an agent's
    start took 7.3 ms of CPU in the forked child, 3.0 ms after this). Nothing is connected or
    written."""
    _parser()
    from corral.services.state import execs  # noqa: F401  (the forks' execs share it)

    for host in ("localhost", "127.0.0.1"):
        with contextlib.suppress(OSError):
            socket.getaddrinfo(host, 6379, type=socket.SOCK_STREAM)
    state = CloudState(MiniRedis.from_url("redis://localhost:6379/0"), "warm-up")  # type: ignore[arg-type]
    record = InstanceRecord(
        id="li-000000000000", request_id="r", attempt_id="a", region="r", zone="z",
        instance_type="t", market="on_demand", pool=state.keys.pool("z", "t"), log_path="-",
        created_at=0.0, vcpus=1.0, memory_gib=1.0, tags={"k": "v"}, envs={"K": "V"},
    )  # fmt: skip
    InstanceRecord.from_hash(record.to_hash())
    json.loads(json.dumps({"warm": [1.0, "up"]}))


def _never_register() -> int:
    """The cloud file's ``unregistered`` fault: a machine whose boot stopped before its agent
    registered. The process lives (the cloud runs the machine) and says nothing, until it is
    terminated."""
    say("boot stopped before the agent registered (the cloud file's unregistered fault)")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    return 0


def main(
    argv: list[str] | None = None,
    record: dict[str, str] | None = None,
    not_before: float | None = None,
) -> int:
    """Run the agent of the instance named by ``argv``. ``record``: its record's hash fields as
    the provider just wrote them (the launcher passes them on), so it is not read back.
    ``not_before``: the boot's end (``time.monotonic``), for an agent the launcher forked ahead
    of it: it makes ready, then stays silent until then, as a machine still booting."""
    args = _parser().parse_args(argv)
    url = args.redis_url or os.environ.pop("CORRAL_REDIS_URL", None)
    if args.redis_url_stdin:
        url = sys.stdin.readline().strip() or url
    if not url:
        say("no Redis URL: pass --redis-url or set CORRAL_REDIS_URL")
        return 2
    state = CloudState(MiniRedis.from_url(url), args.prefix)  # type: ignore[arg-type]
    given = InstanceRecord.from_hash(record) if record else None
    rec = given if given is not None and given.id == args.instance_id else None
    rec = rec or _read_record(state, args.instance_id)
    if rec is None:
        say(f"no record for {args.instance_id}; nothing to run")
        return 2
    rec.pid = os.getpid()
    if not_before is not None:
        time.sleep(max(0.0, not_before - time.monotonic()))
    if args.own_pid:
        iid, pid = rec.id, rec.pid
        why = _patiently(lambda: state.claim_start(iid, pid), "record the agent's pid")
        if why != "ok":
            say(f"not starting: the instance is {why}")
            return 0
    if rec.tags.get(TAG_FAULT) == UNREGISTERED:
        return _never_register()
    work = Work(
        setup=rec.setup, run=rec.run, envs=dict(rec.envs), workdir=rec.workdir, files=rec.files
    )
    agent = Agent(
        RedisLink(state, rec, args.prefix, url=url),
        work,
        rec.id,
        heartbeat_s=args.heartbeat_s,
        heartbeat_ttl_s=args.heartbeat_ttl_s or max(3 * args.heartbeat_s, 5.0),
        kill_grace_s=args.kill_grace_s,
        boot_delay_s=args.boot_delay_s,
    )
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
