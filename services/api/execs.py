"""``corral exec``: run a command on a running machine of a request, through its agent.

``POST /v1/requests/{id}/exec`` queues the command for one node (the head by default); the
node's agent takes it on its next beat and runs it in the task's workdir with the task's
environment. ``GET /v1/execs/{exec_id}?offset=N`` gives its output from byte N on and, once it
ended, its exit code. An admin's or a member's token, on its projects' requests (another
project's request is a 404, as an unknown one).

Sessions (``corral attach``, ``corral port-forward``; docs/attach.md) are execs of another
kind whose bytes flow both ways through two Redis lists: ``POST /v1/requests/{id}/sessions``
opens one, ``POST /v1/sessions/{id}/input`` writes to the node, ``GET /v1/sessions/{id}/output``
reads what the node sent (waiting up to ``wait_s`` for it), then the end and its exit code.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, Field, model_validator

from corral.services.api.auth import Principal, caller, require_writer
from corral.services.api.routes import get_deps, visible_request
from corral.services.runtime.deps import Deps
from corral.services.state.execs import ExecBook, SessionEnded
from corral.shared.execs import (
    MAX_COMMAND_BYTES,
    SESSION_CHUNK_BYTES,
    SESSION_MAX_WAIT_S,
    exec_key,
)
from corral.shared.lifecycle import InstanceState
from corral.shared.routing import Direct

router = APIRouter(tags=["exec"])


class ExecIn(BaseModel):
    command: str = Field(min_length=1, max_length=MAX_COMMAND_BYTES)
    node: int = Field(0, ge=0, le=10_000, description="the node's index (0: the head)")


@router.post("/v1/requests/{request_id}/exec", status_code=201, summary="Run a command on a node")
def start_exec(
    request_id: str,
    body: ExecIn,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    node, inst_id, aid = _node(deps, request_id, body.node)
    xid = ExecBook(deps.redis, deps.settings.prefix).create(
        request_id, inst_id, node, body.command, time.time(), assignment=aid
    )
    return {"id": xid, "request_id": request_id, "instance_id": inst_id}


def _node(deps: Deps, request_id: str, index: int) -> tuple[str, str, str | None]:
    """The running node ``index`` of a request: its name for its exec queue, its instance id
    and, for pooled work, its assignment (the agent runs the command or session there, in
    its folder as its user, never elsewhere on the shared machine). 404 for an unknown
    request, 409 when that node does not run."""
    req = deps.store.get_request(request_id)
    if req is None:
        raise HTTPException(404, f"no launch request {request_id!r}")
    running = [
        i
        for i in deps.store.list_instances(request_id=request_id)
        if i.state is InstanceState.RUNNING and i.node_index == index and i.provider_id
    ]
    if not running:
        raise HTTPException(409, f"request {request_id} has no running node {index}")
    inst = running[-1]
    assert inst.provider_id is not None
    provider = deps.provider(inst.cloud)
    aid = inst.attempt_id if not isinstance(req.route, Direct) else None
    return provider.agent_name(inst.provider_id, inst.attempt_id, inst.node_index), inst.id, aid


@router.get("/v1/execs/{exec_id}", summary="A command's output from an offset, and its end")
def read_exec(
    exec_id: str,
    offset: int = Query(0, ge=0, le=1 << 40),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    seen = ExecBook(deps.redis, deps.settings.prefix).read(exec_id, offset)
    owner = None if seen is None else deps.store.get_request(str(seen.get("request_id", "")))
    if seen is None or not who.sees_request(owner):
        raise HTTPException(404, f"no command {exec_id!r}")
    return seen


class SessionIn(BaseModel):
    kind: Literal["shell", "forward"]
    node: int = Field(0, ge=0, le=10_000, description="the node's index (0: the head)")
    port: int | None = Field(None, ge=1, le=65535, description="forward: the node's port")
    tty: bool = Field(False, description="shell: a terminal (pty) on the node, else pipes")
    rows: int = Field(24, ge=1, le=1000)
    cols: int = Field(80, ge=1, le=1000)
    command: str | None = Field(
        None, max_length=MAX_COMMAND_BYTES, description="shell: instead of a login shell"
    )

    @model_validator(mode="after")
    def _port_for_forward(self) -> SessionIn:
        if (self.kind == "forward") != (self.port is not None):
            raise ValueError("port is required for a forward session, and only there")
        return self


@router.post(
    "/v1/requests/{request_id}/sessions", status_code=201, summary="Open a relayed session"
)
def open_session(
    request_id: str,
    body: SessionIn,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    book = ExecBook(deps.redis, deps.settings.prefix)
    limit = deps.settings.sessions_per_user
    if len(book.open_sessions(who.name)) >= limit:
        raise HTTPException(
            429,
            f"user {who.name!r} has {limit} sessions open, the most a user may "
            "(CORRAL_SESSIONS_PER_USER); end one (exit the shell, stop the forward) first",
        )
    node, inst_id, aid = _node(deps, request_id, body.node)
    session = body.model_dump(exclude={"node", "command"}, exclude_none=True)
    xid = book.create(
        request_id,
        inst_id,
        node,
        body.command or "",
        time.time(),
        session=session,
        user=who.name,
        assignment=aid,
    )
    return {"id": xid, "request_id": request_id, "instance_id": inst_id}


def _session_book(deps: Deps, session_id: str, who: Principal) -> ExecBook:
    """The sessions of requests the caller may see (another project's is a 404)."""
    book = ExecBook(deps.redis, deps.settings.prefix)
    raw = deps.redis.hget(exec_key(deps.settings.prefix, session_id), "request_id")
    rid = raw.decode() if isinstance(raw, bytes) else raw
    owner = deps.store.get_request(str(rid)) if rid else None
    if not book.is_session(session_id) or not who.sees_request(owner):
        raise HTTPException(404, f"no session {session_id!r}")
    return book


@router.post("/v1/sessions/{session_id}/input", summary="Bytes for a session's node side")
async def session_input(
    session_id: str,
    request: Request,
    eof: bool = Query(False, description="the user's side has ended (after these bytes)"),
    rows: int | None = Query(None, ge=1, le=1000, description="the terminal's new size"),
    cols: int | None = Query(None, ge=1, le=1000),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    book = _session_book(deps, session_id, who)
    data = await session_chunk(request)
    size = (rows, cols) if rows is not None and cols is not None else None
    try:
        return {"ok": book.push(session_id, "in", data, eof, size)}
    except SessionEnded as exc:
        raise HTTPException(409, str(exc)) from None


@router.get("/v1/sessions/{session_id}/output", summary="What a session's node side sent")
async def session_output(
    session_id: str,
    wait_s: float = Query(10.0, ge=0, le=SESSION_MAX_WAIT_S),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    book = _session_book(deps, session_id, who)
    data, eof, _ = await wait_pull(book, session_id, "up", wait_s)
    code, error = book.ended(session_id) if eof or not data else (None, None)
    if not data and not eof:
        # The node's side writes all it has, then its exit code, then the end: ended with
        # nothing left means the end marker is gone (an agent that knows no sessions).
        # A node that is no longer running will never write it.
        eof = code is not None
        inst_id = book.instance_of(session_id)
        inst = deps.store.get_instance(inst_id) if inst_id else None
        if not eof and (inst is None or inst.state is not InstanceState.RUNNING):
            eof, error = True, "the node is no longer running"
    return {
        "data": base64.b64encode(data).decode(),
        "eof": eof,
        "exit_code": code,
        "error": error,
    }


async def session_chunk(request: Request) -> bytes:
    """The bytes a session's side sent; 413 over :data:`SESSION_CHUNK_BYTES`."""
    data = await request.body()
    if len(data) > SESSION_CHUNK_BYTES:
        raise HTTPException(413, f"at most {SESSION_CHUNK_BYTES} bytes per write")
    return data


async def wait_pull(
    book: ExecBook, session_id: str, side: str, wait_s: float
) -> tuple[bytes, bool, tuple[int, int] | None]:
    """Read one stream, waiting up to ``wait_s`` for something: polled (5 ms at first,
    backing off to :data:`POLL_CAP_S`), so a waiting read holds no thread and no Redis
    connection; the price is a Redis LPOP every 25 ms per waiting read. A session that is
    gone (its user revoked) ends the wait within a second: the caller looks again."""
    deadline = time.monotonic() + wait_s
    pause = 0.005
    look = time.monotonic() + 1.0
    while True:
        data, eof, size = book.pull(session_id, side)
        if data or eof or size or time.monotonic() >= deadline:
            return data, eof, size
        if time.monotonic() >= look:
            if not book.is_session(session_id):
                return data, eof, size
            look = time.monotonic() + 1.0
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, POLL_CAP_S)


POLL_CAP_S = 0.025  # a waiting read looks at Redis at least this often (a keystroke's delay)
