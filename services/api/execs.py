"""``corral exec``: run a command on a running machine of a request, through its agent.

``POST /v1/requests/{id}/exec`` queues the command for one node (the head by default); the
node's agent takes it on its next beat and runs it in the task's workdir with the task's
environment. ``GET /v1/execs/{exec_id}?offset=N`` gives its output from byte N on and, once it
ended, its exit code. An admin's or a member's token, on its projects' requests (another
project's request is a 404, as an unknown one).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field

from corral.services.api.auth import Principal, caller, require_writer
from corral.services.api.routes import get_deps, visible_request
from corral.services.runtime.deps import Deps
from corral.services.state.execs import ExecBook
from corral.services.state.nodes import NodeName
from corral.shared.execs import MAX_COMMAND_BYTES
from corral.shared.lifecycle import InstanceState

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
    running = [
        i
        for i in deps.store.list_instances(request_id=request_id)
        if i.state is InstanceState.RUNNING and i.node_index == body.node and i.provider_id
    ]
    if not running:
        raise HTTPException(409, f"request {request_id} has no running node {body.node}")
    inst = running[-1]
    assert inst.provider_id is not None
    if inst.cloud == "local" or not inst.attempt_id:
        node = inst.provider_id
    else:
        named = deps.nodes.node_of(inst.cloud, inst.provider_id)
        node = str(named or NodeName(inst.cloud, inst.attempt_id, inst.node_index))
    xid = ExecBook(deps.redis, deps.settings.prefix).create(
        request_id, inst.id, node, body.command, time.time()
    )
    return {"id": xid, "request_id": request_id, "instance_id": inst.id}


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
