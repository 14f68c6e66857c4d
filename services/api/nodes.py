"""The API's node routes: what a cloud machine's agent calls, with its node token.

A node token (see :mod:`corral.services.state.nodes`) names one node; every route here acts on
that node only (no route takes a node id), and no other route accepts it. Registration alone
takes the boot script's one-time enrollment ticket instead, and answers with the token. The
agent's wheel is served here too, so a machine needs nothing but Python to boot an agent.
"""

from __future__ import annotations

import base64
import ipaddress
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, field_validator

from corral.services.agent.sandbox import assignment_key
from corral.services.api.execs import session_chunk, wait_pull
from corral.services.api.routes import get_deps
from corral.services.providers.agent_wheel import AGENT_DIST, build_agent_wheel
from corral.services.runtime.deps import Deps
from corral.services.state.execs import ExecBook
from corral.services.state.jobs import JobBook
from corral.services.state.nodes import (
    LOG_CHUNK_MAX,
    NODE,
    RESULTS_KEPT,
    TICKET,
    NodeName,
    ResultsRefused,
    TokenError,
)
from corral.shared.execs import SESSION_MAX_WAIT_S

router = APIRouter(prefix="/v1/node", tags=["nodes"])

_bearer = HTTPBearer(auto_error=False, description="the node's own token (from its boot script)")

__all__ = ["AGENT_DIST", "build_agent_wheel", "router"]


def _verified(
    request: Request, credentials: HTTPAuthorizationCredentials | None, kind: str
) -> NodeName:
    """The node the bearer names: 401 without one of ``kind``, 403 once its node ended."""
    deps: Deps = request.app.state.deps
    what = "an enrollment ticket" if kind == TICKET else "a node token"
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"{what} is required (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        return deps.nodes.verify(credentials.credentials, kind)
    except TokenError as exc:
        ended = "ended" in str(exc)
        raise HTTPException(
            status.HTTP_403_FORBIDDEN if ended else status.HTTP_401_UNAUTHORIZED, str(exc)
        ) from None


def node_of(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> NodeName:
    """The node a node token names (every route but registration)."""
    return _verified(request, credentials, NODE)


def ticket_of(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> NodeName:
    """The node an enrollment ticket names (registration only)."""
    return _verified(request, credentials, TICKET)


class Registration(BaseModel):
    provider_id: str | None = Field(default=None, max_length=200)
    pid: int | None = None
    # The IP the machine reaches the API from: its launch's other nodes learn it (/peers).
    address: str | None = Field(default=None, max_length=64)

    @field_validator("address")
    @classmethod
    def _an_ip(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise ValueError(f"address {value!r} is not an IP address") from None


class Beat(BaseModel):
    activity: str = Field(max_length=32)
    ttl_s: float = Field(gt=0, le=3600)
    queued: dict[str, Any] | None = None
    assignment: str | None = None
    assignments: dict[str, str] = Field(default_factory=dict)
    # How long nothing ran (autostop), how long the agent is up, the readiness probe's verdict.
    idle_s: float | None = Field(default=None, ge=0)
    up_s: float | None = Field(default=None, ge=0)
    ready: bool | None = None
    # The launch's run (job 1) ended with this code, at this time; queued jobs run after it.
    run_exit: int | None = Field(default=None, ge=-1024, le=1024)
    run_ended_at: float | None = Field(default=None, ge=0)
    # What the machine uses (services/agent/usage.py), per cent.
    cpu_percent: float | None = Field(default=None, ge=0, le=100)
    mem_percent: float | None = Field(default=None, ge=0, le=100)
    gpu_percent: float | None = Field(default=None, ge=0, le=100)
    gpu_mem_percent: float | None = Field(default=None, ge=0, le=100)
    gpu_count: int | None = Field(default=None, ge=0, le=1024)


class Results(BaseModel):
    results: list[dict[str, Any]] = Field(max_length=100)
    drop: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list, max_length=RESULTS_KEPT
    )


class Finish(BaseModel):
    exit_code: int | None = None
    reason: str = Field(max_length=64)


class Notice(BaseModel):
    what: str = Field(max_length=64)  # spot-interruption | preempted


@router.post("/register", summary="A node's agent is up: its ticket for its token and work")
def register(
    body: Registration,
    request: Request,
    node: NodeName = Depends(ticket_of),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    """Spend the node's one-time enrollment ticket: the answer carries the node's token and
    its work, once. A node whose ticket other machines could read (one EC2 launch of many)
    must name the machine it runs on, and it must be the one launched as this node."""
    _check_machine(deps, node, body.provider_id)
    if not deps.nodes.register(
        node, body.provider_id, time.time(), _beat_ttl_s(deps), address=_address(body, request)
    ):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"node {node} has registered already: its ticket is spent (the work is handed "
            "out once)",
        )
    return _welcome(deps, node)


def _address(body: Registration, request: Request) -> str | None:
    """The node's address for its launch's other nodes: the one it says it has, else the one
    its call came from (an agent that found no route of its own; behind a proxy, the proxy's,
    which is why the agent's own word comes first)."""
    if body.address:
        return body.address
    try:
        return str(ipaddress.ip_address(request.client.host)) if request.client else None
    except ValueError:
        return None  # not an IP (a test client's name): the node stays without one


def _beat_ttl_s(deps: Deps) -> float:
    """How long a node's heartbeat lasts, and how long a node that just registered has to
    send its first one: a silence longer than this loses it."""
    return max(3 * deps.settings.node_heartbeat_s, deps.settings.timers.heartbeat_timeout_s)


def _welcome(deps: Deps, node: NodeName) -> dict[str, Any]:
    return {
        "node": str(node),
        "token": deps.nodes.token(node),
        "work": deps.nodes.work(node),
        "heartbeat_s": deps.settings.node_heartbeat_s,
        "heartbeat_ttl_s": _beat_ttl_s(deps),
    }


@router.post("/resume", summary="A stopped node's machine was started: its agent is back")
def resume(
    body: Registration,
    request: Request,
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    """The agent of a machine Corral stopped and started again, with the node token it kept:
    its work again (it runs setup and run anew, as a rebooted machine must) and a fresh token.
    Only a node Corral paused may resume; any other already holds its work."""
    _check_machine(deps, node, body.provider_id)
    if not deps.nodes.paused(node):
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"node {node} was not stopped by Corral: nothing to resume"
        )
    deps.nodes.resume(node, time.time(), _beat_ttl_s(deps), address=_address(body, request))
    return _welcome(deps, node)


def _check_machine(deps: Deps, node: NodeName, provider_id: str | None) -> None:
    bound = None if provider_id is None else deps.nodes.node_of(node.cloud, provider_id)
    if bound is not None and bound != node:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"machine {provider_id} was not launched as node {node}"
        )
    if deps.nodes.shared_boot(node):
        if provider_id is None:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"node {node} was launched with others: register with this machine's id",
            )
        if bound is None:  # the launch has not been described yet: the agent tries again
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"machine {provider_id} is not known yet; try again"
            )


@router.get("/execs", summary="The commands queued for this node (corral exec), taken")
def take_execs(node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    return {"execs": ExecBook(deps.redis, deps.settings.prefix).take(str(node))}


@router.get("/jobs/next", summary="The next job queued for this node (it is free), taken")
def take_job(node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    return {"job": ExecBook(deps.redis, deps.settings.prefix).take_job(str(node))}


@router.post("/execs/{exec_id}/output", summary="Output of one of this node's commands")
async def exec_output(
    exec_id: str,
    request: Request,
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    book = _own(deps, exec_id, node)
    data = await request.body()
    book.output(exec_id, data[:LOG_CHUNK_MAX])
    return {"ok": True}


class ExecDone(BaseModel):
    exit_code: int = Field(ge=-1024, le=1024)
    error: str | None = Field(None, max_length=500)


@router.post("/execs/{exec_id}/done", summary="One of this node's commands ended")
def exec_done(
    exec_id: str, body: ExecDone, node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    book = _own(deps, exec_id, node)
    book.done(exec_id, body.exit_code, body.error)
    return {"ok": True}


def _own(deps: Deps, xid: str, node: NodeName, what: str = "command") -> ExecBook:
    """The book of this node's command (or ``what`` "session": session); else 404."""
    book = ExecBook(deps.redis, deps.settings.prefix)
    if not book.belongs(xid, str(node)) or (what == "session" and not book.is_session(xid)):
        raise HTTPException(404, f"no {what} {xid!r} for this node")
    return book


@router.get("/sessions/{session_id}", summary="Whether a session of this node is still kept")
def session_kept(
    session_id: str, node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    _own(deps, session_id, node, "session")
    return {"ok": True}


@router.get("/sessions/{session_id}/input", summary="What the user sent to a session")
async def session_input(
    session_id: str,
    wait_s: float = Query(10.0, ge=0, le=SESSION_MAX_WAIT_S),
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    book = _own(deps, session_id, node, "session")
    data, eof, size = await wait_pull(book, session_id, "in", wait_s)
    if not (data or eof or size):
        _own(deps, session_id, node, "session")  # gone meanwhile (its user revoked): 404
    return {"data": base64.b64encode(data).decode(), "eof": eof, "size": size}


@router.post("/sessions/{session_id}/output", summary="Bytes from a session's node side")
async def session_output(
    session_id: str,
    request: Request,
    eof: bool = Query(False, description="the node's side has ended (after these bytes)"),
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    book = _own(deps, session_id, node, "session")
    data = await session_chunk(request)
    return {"ok": book.push(session_id, "up", data, eof)}


@router.get("/bundle", summary="The task's files (workdir and file mounts) for this node")
def bundle(
    sha256: str | None = Query(None, pattern=r"^[0-9a-f]{64}$",
                               description="a job's bundle (corral exec ID task.yaml)"),
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
) -> Response:  # fmt: skip
    """The launch's bundle; with ``sha256``, that of a job queued on this node (only)."""
    files = deps.nodes.work(node).get("files") or {}
    sha = (files.get("bundle") or {}).get("sha256")
    scope = files.get("bundle_scope")  # the request's project, written by the control plane
    if sha256 is not None and sha256 != sha:
        sha, scope = (
            sha256,
            JobBook(deps.redis, deps.settings.prefix).bundle_scope(str(node), sha256),
        )
    data = deps.bundles.get(str(scope), str(sha)) if sha and scope else None
    if data is None:
        raise HTTPException(404, "this node's task has no bundle, or it is no longer kept")
    return Response(data, media_type="application/gzip")


@router.get("/peers", summary="The addresses of this node's launch, once all nodes are known")
def peers(node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    """Every node of this node's launch by rank (the head first), each as the address it
    registered with: ``{"ips": [...]}`` once all have registered, ``{"ips": null}`` before.
    SkyPilot's ``SKYPILOT_NODE_IPS`` is made of it; the agent asks until all are known."""
    envs = deps.nodes.work(node).get("envs") or {}
    try:
        count = max(1, int(envs.get("CORRAL_NUM_NODES") or 1))
    except ValueError:
        count = 1
    return {"ips": deps.nodes.peer_addresses(node, count)}


@router.post("/heartbeat", summary="A node is alive")
def heartbeat(
    body: Beat,
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
) -> dict[str, Any]:
    now = time.time()
    deps.nodes.heartbeat(node, body.model_dump(exclude={"ttl_s"}), body.ttl_s, now)
    assert credentials is not None  # node_of refused a request without one
    if deps.nodes.expires_at(credentials.credentials) - now < deps.nodes.token_ttl_s / 2:
        return {"ok": True, "token": deps.nodes.token(node, now)}  # renewed past half life
    return {"ok": True}


@router.get("/assignments", summary="The work a pool node should run")
def assignments(
    node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    good, bad = deps.nodes.assignments(node)
    return {"assignments": good, "bad": bad}


@router.post("/results", summary="How a node's assignments ended")
def results(
    body: Results, node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    for result in body.results:
        if not isinstance(result.get("id"), str) or not 0 < len(result["id"]) <= 200:
            raise HTTPException(422, "every result needs a string id (1-200 characters)")
    try:
        refused = deps.nodes.put_results(node, body.results, body.drop)
    except ResultsRefused as exc:
        raise HTTPException(413, str(exc)) from None
    # Ids never assigned to this node are not kept (nor an error: a withdrawn one races).
    return {"ok": True, "refused": refused}


@router.post("/finish", summary="A node's run ended")
def finish(
    body: Finish, node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    deps.nodes.finish(node, body.exit_code, body.reason, time.time())
    return {"ok": True}


@router.post("/notice", summary="The machine is about to go (spot interruption, preemption)")
def notice(
    body: Notice, node: NodeName = Depends(node_of), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    deps.nodes.notice(node, body.what, time.time())
    return {"ok": True}


@router.post("/logs", summary="Output from the node, from a byte offset of its log")
async def logs(
    request: Request,
    offset: int = Query(ge=0),
    assignment: str | None = Query(
        None, min_length=1, max_length=512, description="an assignment's own output"
    ),
    node: NodeName = Depends(node_of),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    data = await request.body()
    if len(data) > LOG_CHUNK_MAX:
        raise HTTPException(413, f"send at most {LOG_CHUNK_MAX} bytes at a time")
    stream = None
    if assignment is not None:
        if not deps.nodes.was_assigned(node, assignment):
            raise HTTPException(404, "no such assignment for this node")
        stream = assignment_key(assignment)
    return {"held": deps.nodes.append_log(node, offset, data, stream)}


@router.get("/agent.whl", summary="The node agent as a wheel (pip install --no-deps)")
def agent_wheel() -> Response:
    name, data = build_agent_wheel()
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
