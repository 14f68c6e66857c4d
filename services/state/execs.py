"""``corral exec`` in Redis: commands queued for a node, their output and exit code
(key names in shared/execs.py)."""

from __future__ import annotations

import base64
import json
import secrets
import time
from typing import Any

import redis

from corral.shared.execs import (
    END_OF_STREAM,
    EXEC_TTL_S,
    MAX_OUTPUT_BYTES,
    RESIZE_PREFIX,
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


class SessionEnded(Exception):
    """Input for a session whose node side (or user side) has ended: refused, not kept."""


class ExecBook:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
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

    def take(self, node: str, limit: int = 8) -> list[dict[str, Any]]:
        """The commands waiting for ``node`` (taken off its queue), marked running."""
        taken = []
        for _ in range(limit):
            raw = self.r.lpop(exec_queue_key(self.prefix, node))
            if raw is None:
                break
            item = json.loads(str(raw if not isinstance(raw, bytes) else raw.decode()))
            self.r.hset(exec_key(self.prefix, item["id"]), "state", "running")
            taken.append(item)
        return taken

    def take_job(self, node: str) -> dict[str, Any] | None:
        """The next job queued for ``node`` (its agent is free), marked started."""
        got = self.r.zpopmin(job_queue_key(self.prefix, node), 1)
        if not got:
            return None
        raw = got[0][0]
        item: dict[str, Any] = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
        key = exec_key(self.prefix, str(item["id"]))
        self.r.hset(key, mapping={"state": "running", "started_at": repr(time.time())})
        return item

    def belongs(self, exec_id: str, node: str) -> bool:
        return self.r.hget(exec_key(self.prefix, exec_id), "node") in (node, node.encode())

    def output(self, exec_id: str, data: bytes) -> None:
        """Append output, up to the cap (past it, the rest is dropped and the cut said)."""
        key = exec_key(self.prefix, exec_id)
        held = int(self.r.hget(key, "bytes") or 0)
        room = MAX_OUTPUT_BYTES - held
        if room <= 0:
            return
        piece = data[:room]
        if len(data) > room:
            piece += b"\n[corral] output cut at the 8 MiB kept per command\n"
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(exec_output_key(self.prefix, exec_id), piece)
        pipe.hincrby(key, "bytes", len(piece))
        pipe.expire(exec_output_key(self.prefix, exec_id), EXEC_TTL_S)
        pipe.execute()

    def done(self, exec_id: str, exit_code: int, error: str | None = None) -> None:
        """The command (or session) ended: its code kept; a session's unread input let go."""
        key = exec_key(self.prefix, exec_id)
        if error:
            self.r.hset(key, "error", error[:500])
        ended = repr(time.time())
        self.r.hset(key, mapping={"state": "done", "exit_code": exit_code, "ended_at": ended})
        self.r.delete(session_stream_key(self.prefix, exec_id, "in"))

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
        stream = session_stream_key(self.prefix, exec_id, side)
        if side == "in":
            state, closed = self.r.hmget(exec_key(self.prefix, exec_id), ["state", "in_closed"])
            if state in (None, "done", b"done") or closed:
                raise SessionEnded(f"session {exec_id} has ended: its input is refused")
        if int(self.r.llen(stream)) >= SESSION_MAX_PENDING:
            return False
        items = (
            ([base64.b64encode(data).decode()] if data else [])
            + ([f"{RESIZE_PREFIX}{size[0]}:{size[1]}"] if size else [])
            + ([END_OF_STREAM] if eof else [])
        )
        if items:
            pipe = self.r.pipeline(transaction=True)
            pipe.rpush(stream, *items)
            pipe.expire(stream, SESSION_TTL_S)
            pipe.expire(exec_key(self.prefix, exec_id), SESSION_TTL_S)
            if side == "in" and eof:
                pipe.hset(exec_key(self.prefix, exec_id), "in_closed", 1)
            pipe.execute()
        return True

    def pull(self, exec_id: str, side: str) -> tuple[bytes, bool, tuple[int, int] | None]:
        """What waits in one stream (taken off it), whether its end was reached, and the
        last terminal size it carried."""
        got = self.r.lpop(session_stream_key(self.prefix, exec_id, side), SESSION_READ_BATCH)
        return decode_chunks(got)

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
        chunks = self.r.lrange(exec_output_key(self.prefix, exec_id), 0, -1)
        data = b"".join(c if isinstance(c, bytes) else str(c).encode() for c in chunks)
        state = rec.get("state")
        state = state.decode() if isinstance(state, bytes) else state
        code = rec.get("exit_code")
        owner = rec.get("request_id")
        return {
            "id": exec_id,
            "request_id": owner.decode() if isinstance(owner, bytes) else owner,
            "state": state,
            "output": data[offset:].decode("utf-8", errors="replace"),
            "offset": len(data),
            "exit_code": int(code) if code is not None and state == "done" else None,
        }


def decode_chunks(got: Any) -> tuple[bytes, bool, tuple[int, int] | None]:
    """A stream's entries (base64 text, ``size:R:C``, an empty one for its end) as bytes,
    the end, and the last size."""
    data, eof, size = b"", False, None
    for item in got or []:
        text = item.decode() if isinstance(item, bytes) else str(item)
        if text == END_OF_STREAM:
            eof = True
            break  # nothing is written after the end
        if text.startswith(RESIZE_PREFIX):
            rows, _, cols = text[len(RESIZE_PREFIX) :].partition(":")
            size = (int(rows), int(cols))
            continue
        data += base64.b64decode(text)
    return data, eof, size
