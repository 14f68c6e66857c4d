"""``corral exec`` and sessions in Redis: commands queued for a node, their output and exit
code, a session's two streams (key names in shared/execs.py; the bytes ride the one relay,
state/relay.py). One protocol for both sides of every node: the API calls it for a cloud
node's agent (over HTTP) and for the user, the local cloud's agent calls it itself, on its own
client (the methods a node's side calls use ``execute_command`` only, which it has too)."""

from __future__ import annotations

import json
import secrets
import time
from typing import TYPE_CHECKING, Any

from corral.services.state import relay
from corral.services.state.relay import Stream
from corral.shared.execs import (
    EXEC_TTL_S,
    MAX_OUTPUT_BYTES,
    SESSION_MAX_PENDING,
    SESSION_READ_BATCH,
    SESSION_TTL_S,
    exec_key,
    exec_output_key,
    exec_queue_key,
    job_queue_key,
    session_stream_key,
    user_sessions_key,
)

if TYPE_CHECKING:
    import redis

CUT_NOTE = b"\n[corral] output cut at the 8 MiB kept per command\n"


def output_stream(prefix: str, exec_id: str) -> Stream:
    """A command's output: read from a cursor, at most :data:`MAX_OUTPUT_BYTES`."""
    counter = (exec_key(prefix, exec_id), "bytes")
    return Stream(exec_output_key(prefix, exec_id), EXEC_TTL_S, counter, max_bytes=MAX_OUTPUT_BYTES)


def session_stream(prefix: str, exec_id: str, side: str) -> Stream:
    """One side of a session: drained, at most :data:`SESSION_MAX_PENDING` entries waiting;
    a write keeps the session's record alive too."""
    return Stream(
        session_stream_key(prefix, exec_id, side),
        SESSION_TTL_S,
        max_pending=SESSION_MAX_PENDING,
        touch=(exec_key(prefix, exec_id),),
    )


class SessionEnded(Exception):
    """Input for a session whose node side (or user side) has ended: refused, not kept."""


class ExecBook:
    def __init__(self, client: redis.Redis, prefix: str) -> None:  # or the agent's MiniRedis
        self.r = client
        self.prefix = prefix

    def create(
        self,
        request_id: str,
        instance_id: str,
        node: str,
        command: str,
        now: float,
        session: dict[str, Any] | None = None,
        user: str | None = None,
        assignment: str | None = None,
        push: bool = True,
    ) -> str:
        """Queue ``command`` for ``node`` (or, with ``session``, a relayed session: its
        ``kind`` and what it needs, shared/execs.py, counted among ``user``'s); its id.
        ``assignment``: the pooled work it runs in on that node (the agent refuses it once
        that no longer runs there)."""
        xid = "x-" + secrets.token_hex(8)
        ttl = SESSION_TTL_S if session else EXEC_TTL_S
        key = exec_key(self.prefix, xid)
        queue = exec_queue_key(self.prefix, node)
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "request_id": request_id,
                "instance_id": instance_id,
                "node": node,
                "state": "queued",
                "created_at": repr(now),
                "bytes": 0,
                "kind": str((session or {}).get("kind") or "exec"),
                **({"user": user} if user else {}),
            },
        )
        pipe.expire(key, ttl)
        if session and user:
            pipe.zadd(user_sessions_key(self.prefix, user), {xid: now})
            pipe.expire(user_sessions_key(self.prefix, user), SESSION_TTL_S)
        item = {"id": xid, "command": command, **(session or {})}
        if assignment is not None:
            item["assignment"] = assignment
        if push:  # (a job's command is queued by the job book, once the job has its number)
            pipe.rpush(queue, json.dumps(item))
            pipe.expire(queue, EXEC_TTL_S)
        pipe.execute()
        return xid

    def anything_queued(self, node: str) -> bool:
        """Whether ``node``'s command queue or job queue holds anything, in one command (an
        emptied queue is no key: EXISTS counts the two keys)."""
        keys = (exec_queue_key(self.prefix, node), job_queue_key(self.prefix, node))
        return int(relay.command(self.r, "EXISTS", *keys)) > 0

    def take(self, node: str, limit: int = 8) -> list[dict[str, Any]]:
        """The commands waiting for ``node`` (taken off its queue), marked running."""
        taken = []
        for _ in range(limit):
            raw = relay.command(self.r, "LPOP", exec_queue_key(self.prefix, node))
            if raw is None:
                break
            item = json.loads(str(raw if not isinstance(raw, bytes) else raw.decode()))
            relay.command(self.r, "HSET", exec_key(self.prefix, item["id"]), "state", "running")
            taken.append(item)
        return taken

    def take_job(self, node: str) -> dict[str, Any] | None:
        """The next job queued for ``node`` (its agent is free), marked started."""
        got = relay.command(self.r, "ZPOPMIN", job_queue_key(self.prefix, node))
        if not got:
            return None
        # redis-py pairs the reply, [(member, score)]; the agent's MiniRedis: [member, score]
        raw = got[0][0] if isinstance(got[0], tuple) else got[0]
        item: dict[str, Any] = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
        key = exec_key(self.prefix, str(item["id"]))
        relay.command(self.r, "HSET", key, "state", "running", "started_at", repr(time.time()))
        return item

    def belongs(self, exec_id: str, node: str) -> bool:
        return self.r.hget(exec_key(self.prefix, exec_id), "node") in (node, node.encode())

    def output(self, exec_id: str, data: bytes) -> None:
        """Append output, up to the cap (past it, the rest is dropped and the cut said)."""
        relay.append(self.r, output_stream(self.prefix, exec_id), data, cut_note=CUT_NOTE)

    def done(self, exec_id: str, exit_code: int, error: str | None = None) -> None:
        """The command (or session) ended: its code kept; a session's unread input let go."""
        key = exec_key(self.prefix, exec_id)
        fields = ["state", "done", "exit_code", exit_code, "ended_at", repr(time.time())]
        error_field = ["error", error[:500]] if error else []
        relay.together(  # one round trip; each write stands alone
            self.r,
            [
                ("HSET", key, *fields, *error_field),
                ("DEL", session_stream_key(self.prefix, exec_id, "in")),
            ],
            transaction=False,
        )

    # --- a user's sessions: a limit, and their end with the user's token ---------------------
    def open_sessions(self, user: str) -> list[str]:
        """The sessions ``user`` opened that have not ended (ended ones are forgotten here)."""
        index = user_sessions_key(self.prefix, user)
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in self.r.zrange(index, 0, -1)]
        pipe = self.r.pipeline(transaction=False)
        for xid in ids:
            pipe.hget(exec_key(self.prefix, xid), "state")
        states = pipe.execute() if ids else []
        live = [x for x, st in zip(ids, states, strict=True) if st not in (None, "done", b"done")]
        if gone := [x for x in ids if x not in live]:
            self.r.zrem(index, *gone)
        return live

    def end_sessions_of(self, user: str) -> int:
        """End every session ``user`` opened (revoked): their records and streams deleted, so
        each node's agent finds its session gone within its next look (seconds) and kills
        the shell or closes the forward. How many there were."""
        index = user_sessions_key(self.prefix, user)
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in self.r.zrange(index, 0, -1)]
        pipe = self.r.pipeline(transaction=True)
        for xid in ids:
            pipe.delete(
                exec_key(self.prefix, xid),
                session_stream_key(self.prefix, xid, "in"),
                session_stream_key(self.prefix, xid, "up"),
            )
        pipe.delete(index)
        pipe.execute()
        return len(ids)

    # --- sessions (corral attach, port-forward): two streams, drained as they are read ------
    def is_session(self, exec_id: str) -> bool:
        kind = self.r.hget(exec_key(self.prefix, exec_id), "kind")
        return kind not in (None, "exec", b"exec")

    def push(
        self,
        exec_id: str,
        side: str,
        data: bytes,
        eof: bool = False,
        size: tuple[int, int] | None = None,
    ) -> bool:
        """Append ``data`` (then a terminal ``size``, then the end, with ``eof``) to one
        stream; False when the stream is full (the reader is behind: write again later)."""
        if side == "in":
            state, closed = self.r.hmget(exec_key(self.prefix, exec_id), ["state", "in_closed"])
            if state in (None, "done", b"done") or closed:
                raise SessionEnded(f"session {exec_id} has ended: its input is refused")
        close = [("HSET", exec_key(self.prefix, exec_id), "in_closed", 1)]
        return relay.push(
            self.r,
            session_stream(self.prefix, exec_id, side),
            relay.encode_entries(data, eof, size),
            also=close if side == "in" and eof else (),
        )

    def pull(self, exec_id: str, side: str) -> tuple[bytes, bool, tuple[int, int] | None]:
        """What waits in one stream (taken off it), whether its end was reached, and the
        last terminal size it carried."""
        stream = session_stream(self.prefix, exec_id, side)
        return relay.decode_entries(relay.take(self.r, stream, SESSION_READ_BATCH))

    def wait_pull(
        self, exec_id: str, side: str, wait_s: float
    ) -> tuple[bytes, bool, tuple[int, int] | None] | None:
        """As :meth:`pull`, waiting up to ``wait_s`` for something to come (None: nothing came)."""
        stream = session_stream(self.prefix, exec_id, side)
        got = relay.wait_take(self.r, stream, wait_s, SESSION_READ_BATCH)
        return None if got is None else relay.decode_entries(got)

    def gone(self, exec_id: str) -> bool:
        """The session's (or command's) record is no more: ended long ago, or its user revoked."""
        return not relay.command(self.r, "EXISTS", exec_key(self.prefix, exec_id))

    def instance_of(self, exec_id: str) -> str | None:
        got = self.r.hget(exec_key(self.prefix, exec_id), "instance_id")
        return got.decode() if isinstance(got, bytes) else got

    def ended(self, exec_id: str) -> tuple[int | None, str | None]:
        """A session's exit code and error once its node side has ended."""
        rec = self.r.hmget(exec_key(self.prefix, exec_id), ["state", "exit_code", "error"])
        state, code, error = (v.decode() if isinstance(v, bytes) else v for v in rec)
        if state != "done" or code is None:
            return None, None
        return int(code), error

    def read(self, exec_id: str, offset: int) -> dict[str, Any] | None:
        """What the command said from byte ``offset`` on, and whether it ended (its code)."""
        rec = self.r.hgetall(exec_key(self.prefix, exec_id))
        if not rec:
            return None
        rec = {(k.decode() if isinstance(k, bytes) else k): v for k, v in rec.items()}
        _, data, end = relay.read_since(self.r, output_stream(self.prefix, exec_id), offset)
        state = rec.get("state")
        state = state.decode() if isinstance(state, bytes) else state
        code = rec.get("exit_code")
        owner = rec.get("request_id")
        return {
            "id": exec_id,
            "request_id": owner.decode() if isinstance(owner, bytes) else owner,
            "state": state,
            "output": data.decode("utf-8", errors="replace"),
            "offset": end,
            "exit_code": int(code) if code is not None and state == "done" else None,
        }
