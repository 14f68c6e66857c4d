"""A running request's job queue (``corral exec ID task.yaml``, ``queue``, ``cancel``), and
what its nodes use (``GET /v1/requests/{id}/usage``: the console's per-node utilisation).

``POST /v1/requests/{id}/jobs`` queues a task's ``run`` (with its envs) on the request's first
``num_nodes`` nodes, behind what runs there; ``GET /v1/requests/{id}/jobs`` lists the jobs
(job 1: the launch's own run) with their states and exit codes; ``POST
/v1/requests/{id}/jobs/cancel`` cancels jobs by number (or all that have not ended). The same
rules as ``corral exec``: an admin's or a member's token on its projects' requests (another
project's request is a 404, as an unknown one); a viewer reads the queue, never changes it.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field, model_validator

from corral.services.agent.skypilot_env import task_id
from corral.services.api.auth import Principal, caller, require_writer
from corral.services.api.execs import _node
from corral.services.api.routes import get_deps, visible_request
from corral.services.providers.base import node_work_of
from corral.services.runtime import usage
from corral.services.runtime.deps import Deps
from corral.services.state.bundles import scope_of
from corral.services.state.jobs import JobBook, JobSpec, NodeTarget
from corral.shared import jobs
from corral.shared.bundles import Bundle
from corral.shared.execs import MAX_COMMAND_BYTES
from corral.shared.jobs import MAX_JOB_NAME, Job
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import LaunchRequest
from corral.shared.routing import Direct

router = APIRouter(tags=["jobs"])

MAX_ENVS = 200


class JobIn(BaseModel):
    name: str | None = Field(None, max_length=MAX_JOB_NAME)
    run: str = Field(min_length=1, max_length=MAX_COMMAND_BYTES)
    envs: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENVS)
    num_nodes: int = Field(1, ge=1, le=10_000)
    # The task's own workdir, uploaded first as launch uploads it (PUT /v1/bundles/{sha256}
    # for the request's project): the job runs in it, unpacked on each node as it starts.
    bundle: Bundle | None = None

    @model_validator(mode="after")
    def _workdir_only(self) -> JobIn:
        if self.bundle is not None and (self.bundle.mounts or not self.bundle.workdir):
            raise ValueError("bundle: a job's bundle holds its workdir only (exec copies no "
                             "file_mounts)")  # fmt: skip
        return self


class CancelIn(BaseModel):
    jobs: list[int] = Field(default_factory=list, max_length=1000)
    all: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> CancelIn:
        if bool(self.jobs) == self.all:
            raise ValueError("give job numbers, or all (not both)")
        return self


def job_view(job: Job) -> dict[str, Any]:
    return {**job.model_dump(mode="json"), "duration_s": job.duration_s}


def _num_nodes(req: LaunchRequest) -> int:
    value = req.task.get("num_nodes", 1)
    return value if isinstance(value, int) and value > 0 else 1


def _has_run(req: LaunchRequest) -> bool:
    return bool(req.task.get("run"))


def _head_beat(deps: Deps, request_id: str) -> dict[str, Any]:
    """The head node's last heartbeat (its agent says there when the launch's run ended)."""
    for inst in deps.store.list_instances(request_id=request_id):
        if inst.node_index == 0 and inst.provider_id and inst.state is InstanceState.RUNNING:
            beat = usage.beat_of(deps, inst.cloud, inst.provider_id)
            if beat:
                return dict(beat)
    return {}


def launch_job(deps: Deps, req: LaunchRequest, cancelled: Job | None) -> Job | None:
    """Job 1 as the request and its head's heartbeat say."""
    beat = _head_beat(deps, req.id) if req.state is RequestState.RUNNING else {}
    ran = next((t.at for t in req.history if t.to_state == RequestState.RUNNING), None)
    state, code, ended = str(req.state), req.exit_code, req.updated_at
    if isinstance(beat.get("run_exit"), int):  # the run ended; jobs queued behind it run on
        code = int(beat["run_exit"])
        state = "SUCCEEDED" if code == 0 else "FAILED"
        ended = float(beat.get("run_ended_at") or req.updated_at)
    return jobs.launch_job(
        has_run=_has_run(req),
        request_state=state,
        created_at=req.created_at,
        started_at=ran,
        ended_at=ended,
        exit_code=code,
        name=req.task.get("name") if isinstance(req.task.get("name"), str) else None,
        num_nodes=_num_nodes(req),
        cancelled=cancelled,
    )


def queue_of(deps: Deps, req: LaunchRequest) -> list[Job]:
    """Every job of the request, job 1 first, each as its nodes last reported."""
    book = JobBook(deps.redis, deps.settings.prefix)
    queue = book.refresh(req.id, time.time(), str(req.state))
    first = launch_job(deps, req, queue.launch)
    return ([first] if first is not None else []) + list(queue.jobs)


@router.post("/v1/requests/{request_id}/jobs", status_code=201, summary="Queue a job on a request")
def submit_job(
    request_id: str,
    body: JobIn,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    req = visible_request(deps, who, request_id)
    if req.state is not RequestState.RUNNING:
        raise HTTPException(409, f"request {request_id} is {req.state}: a job needs it RUNNING")
    if not isinstance(req.route, Direct):
        raise HTTPException(
            409,
            f"request {request_id} runs on a pool's machines: a job queue needs the "
            "request's own (run a command with `corral exec ID -- CMD`)",
        )
    count = _num_nodes(req)
    if body.num_nodes > count:
        raise HTTPException(
            422, f"num_nodes: the job asks {body.num_nodes} nodes; request {request_id} has {count}"
        )
    targets = [NodeTarget(*_node(deps, request_id, i)[:2]) for i in range(body.num_nodes)]
    book = JobBook(deps.redis, deps.settings.prefix)
    spec = JobSpec(body.name, body.run, body.envs, body.num_nodes, **_workdir(deps, req, body))
    book.refresh(request_id, time.time(), str(req.state))  # ended jobs count as ended
    try:
        job = book.submit(
            req.id,
            spec,
            targets,
            now=time.time(),
            user=who.name,
            task_id=lambda number: task_id(req.created_at, req.id, number),
            first=2 if _has_run(req) else 1,
        )
    except jobs.QueueFull as exc:
        raise HTTPException(409, str(exc)) from None
    return {"request_id": request_id, **job_view(job)}


def _workdir(deps: Deps, req: LaunchRequest, body: JobIn) -> dict[str, Any]:
    """The job's own workdir: its bundle, kept for the request's project (as a launch's
    must be: another project's bundle cannot be named), and the unpacked cap."""
    if body.bundle is None:
        return {}
    scope = scope_of(req.project)
    if not deps.bundles.has(scope, body.bundle.sha256):
        raise HTTPException(
            422,
            f"bundle: {body.bundle.sha256} is not kept for the request's project; upload it "
            "first (PUT /v1/bundles/{sha256}?project=...)",
        )
    for inst in deps.store.list_instances(request_id=req.id):
        work = node_work_of(deps.provider(inst.cloud))
        running = inst.state is InstanceState.RUNNING and inst.provider_id is not None
        if work is not None and running and inst.node_index < body.num_nodes:
            work.hand_job_bundle(str(inst.provider_id), scope, body.bundle.sha256)
    return {
        "bundle": body.bundle.model_dump(),
        "bundle_scope": scope,
        "unpacked_max_bytes": deps.settings.bundle_unpacked_max_bytes,
    }


@router.get("/v1/requests/{request_id}/jobs", summary="A request's job queue")
def list_jobs(
    request_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(caller)
) -> dict[str, Any]:
    req = visible_request(deps, who, request_id)
    return {"request_id": request_id, "jobs": [job_view(j) for j in queue_of(deps, req)]}


@router.get("/v1/requests/{request_id}/usage", summary="What each running node uses")
def request_usage(
    request_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(caller)
) -> dict[str, Any]:
    """CPU and memory per cent (GPU and GPU memory where the node has GPUs) per running
    node, from its agent's last heartbeat (``at``)."""
    visible_request(deps, who, request_id)
    return {"request_id": request_id, "nodes": usage.of_request(deps, request_id)}


@router.post("/v1/requests/{request_id}/jobs/cancel", summary="Cancel jobs of a request")
def cancel_jobs(
    request_id: str,
    body: CancelIn,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    req = visible_request(deps, who, request_id)
    current = queue_of(deps, req)
    numbers = body.jobs or [j.id for j in current if j.state not in jobs.TERMINAL]
    known = {j.id for j in current}
    if unknown := [n for n in numbers if n not in known]:
        raise HTTPException(404, f"request {request_id} has no job {', '.join(map(str, unknown))}")
    # Job 1 is the launch's run only where it has one (a service's first exec'd job is 1 too).
    first = next((j for j in current if j.id == 1), None) if _has_run(req) else None
    nodes = [
        _node(deps, request_id, i.node_index)[0]
        for i in deps.store.list_instances(request_id=request_id)
        if i.state is InstanceState.RUNNING and i.provider_id
    ]
    book = JobBook(deps.redis, deps.settings.prefix)
    done, refused = book.cancel(request_id, numbers, time.time(), who.name, first, nodes)
    return {
        "request_id": request_id,
        "cancelled": [job_view(j) for j in done],
        "not_cancelled": [{"id": n, "reason": why} for n, why in refused],
    }
