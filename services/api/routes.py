"""The API's routes: launch requests, their events and logs, instances, health.

Every route here, reads included, needs a user's token (:mod:`corral.services.api.auth`):
admins see every request; members and viewers only their projects' (another project's
request is a 404, as an unknown id); viewers may not write (403). A request's view holds its
task's envs, and machines reach this API too. The work itself is
done by :mod:`corral.services.runtime.requests`; these functions only translate HTTP to calls
and errors to status codes.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from corral.services.api.auth import (
    BEARER_SCHEME,
    Principal,
    caller,
    caller_of,
    require_writer,
)
from corral.services.api.schemas import (
    EventPage,
    Health,
    InstanceList,
    RequestList,
    RequestView,
    SubmissionView,
    TaskBody,
)
from corral.services.observability import logs as log_ids
from corral.services.queues import dispatch
from corral.services.runtime import requests, serving, stopping
from corral.services.runtime.deps import Deps
from corral.shared.configio import ConfigError, Issue
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import LaunchRequest

router = APIRouter()
# /healthz answers without a token (load balancers and probes ask it); every route of
# ``router`` needs the admin token (create_app adds it).
health_router = APIRouter()
# A submit: its route checks the token itself (create_app includes it without a dependency).
submit_router = APIRouter()

SERVE_PATH = "/v1/services"  # a replicated service's endpoint (services/api/serve.py)
TASK_NAME = requests.TASK_NAME  # the file name issues carry for a task sent over HTTP
YAML_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml", "text/x-yaml"})
MAX_LIST = 1000

_SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": TaskBody.model_json_schema()},
            "application/yaml": {"schema": {"type": "string", "description": "a task file"}},
            "text/yaml": {"schema": {"type": "string", "description": "a task file"}},
        },
    }
}


async def get_deps(request: Request) -> Deps:
    """The app's dependencies. A coroutine, as every dependency that neither blocks nor waits
    is here: FastAPI runs a plain function dependency in its thread pool, one hand-off per
    dependency per request (about a tenth of a millisecond of CPU each)."""
    deps: Deps = request.app.state.deps
    return deps


def _not_found(what: str, ident: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no {what} with id {ident!r}")


def visible_request(deps: Deps, who: Principal, request_id: str) -> LaunchRequest:
    """The request if the caller may see it; else 404, as for an unknown id (ids of other
    projects do not leak)."""
    req = deps.store.get_request(request_id)
    if req is None or not who.sees(req.project):
        raise _not_found("launch request", request_id)
    return req


def project_for(deps: Deps, who: Principal, project: str | None) -> str | None:
    """The project a submission goes to: the one named (the caller must belong to it), else
    the caller's only project; an admin may name any existing project or none."""
    if project is not None:
        if not who.is_admin and project not in who.projects:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"user {who.name!r} is not a member of project {project!r}",
            )
        if deps.access.project(project) is None:
            raise HTTPException(422, f"project: no project {project!r}")
        return project
    if len(who.projects) == 1:
        return who.projects[0]
    if who.is_admin:
        return None
    raise HTTPException(
        422,
        f"project: user {who.name!r} belongs to {len(who.projects)} projects "
        f"({', '.join(who.projects)}); name one (?project=NAME, corral launch --project)",
    )


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # a pool's or a cluster's


def check_name(what: str, name: str) -> None:
    """422 unless ``name`` can name a pool or a cluster (``what``)."""
    if not NAME.fullmatch(name):
        raise HTTPException(
            422,
            {
                "error": f"{what} name {name!r}: expected letters, digits, '.', '_' or '-' "
                "(at most 63, starting with a letter or digit)"
            },
        )


def invalid_file(exc: ConfigError, what: str) -> HTTPException:
    """422 for a file that is not valid (a pool's, a cluster's, a demand): its issues."""
    issues = [i.as_dict() for i in exc.issues]
    return HTTPException(422, {"error": f"invalid {what}", "issues": issues})


def _invalid(exc: ConfigError) -> HTTPException:
    return HTTPException(422, requests.refusal_of(exc))


async def submitted_task(request: Request) -> dict[str, Any] | str:
    """The submitted task as sent: a mapping, or text (YAML or JSON) to parse. What the body
    itself gets wrong (not UTF-8, not the documented shape) is a 422 here."""
    raw = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if ctype in YAML_TYPES:
            return raw.decode("utf-8")
        body = TaskBody.model_validate_json(raw or b"{}")
    except UnicodeDecodeError:
        raise _invalid(ConfigError.single(TASK_NAME, "the body is not UTF-8 text")) from None
    except ValidationError as exc:
        issues = [
            Issue("request body", None, ".".join(map(str, e["loc"])), e["msg"])
            for e in exc.errors()
        ]
        raise _invalid(ConfigError(issues)) from None
    if (body.task is None) == (body.task_yaml is None):
        message = 'send exactly one of {"task": {...}} or {"task_yaml": "..."}'
        raise _invalid(ConfigError.single("request body", message))
    return body.task if body.task is not None else str(body.task_yaml)


IDEMPOTENCY_KEY = "Idempotency-Key"
PROJECT_MAX = 63  # a project's name at most
# What a submit reads besides its body, as FastAPI would document a Header and a Query
# parameter (the route reads them itself: see submit_request).
_SUBMIT_PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "project",
        "in": "query",
        "required": False,
        "description": (about := "the project to submit to (default: the caller's only one)"),
        "schema": {
            "anyOf": [{"type": "string", "maxLength": PROJECT_MAX}, {"type": "null"}],
            "title": "Project",
            "description": about,
        },
    },
    {
        "name": IDEMPOTENCY_KEY,
        "in": "header",
        "required": False,
        "description": (
            key_about := "submit at most once: a request already created under this key is "
            "returned (200) and nothing is created; the outcome is readable at "
            "/v1/submissions/{key}"
        ),
        "schema": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "title": IDEMPOTENCY_KEY,
            "description": key_about,
        },
    },
]
# The project as FastAPI's Query(max_length=63) checks it, with the same 422 when too long.
_PROJECT = TypeAdapter(Annotated[str | None, Field(max_length=PROJECT_MAX)])


@submit_router.post(
    "/v1/requests",
    status_code=status.HTTP_201_CREATED,
    response_model=RequestView,
    openapi_extra={
        **_SUBMIT_BODY,
        "parameters": _SUBMIT_PARAMETERS,
        "security": [{BEARER_SCHEME: []}],
    },
    responses={
        200: {"model": RequestView, "description": "the request its Idempotency-Key holds"},
        422: {"description": "invalid task or key, or nothing could ever be planned for it"},
    },
    summary="Submit a launch request",
)
async def submit_request(request: Request, response: Response) -> dict[str, Any]:
    # The busiest route reads its token, body, header and query itself, in the order FastAPI
    # resolved them as dependencies (the router's token check, the body, the writer check,
    # then the parameters): FastAPI's resolution of them cost about a fifth of the API's CPU
    # per submit.
    who = await caller_of(request)
    task = await submitted_task(request)
    deps = await get_deps(request)
    who = await require_writer(who)
    idempotency_key = request.headers.get(IDEMPOTENCY_KEY)
    try:
        project = _PROJECT.validate_python(request.query_params.get("project"))
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("query", "project", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    # The submit talks to Redis: it runs in the thread pool, and the answer is checked against
    # its model here, on the event loop (a plain function endpoint would hand that check to
    # the thread pool too: a second hand-off per submit, the busiest route).
    view, created = await run_in_threadpool(_submit, deps, who, task, idempotency_key, project)
    if not created:
        response.status_code = status.HTTP_200_OK
    return view


def _submit(
    deps: Deps,
    who: Principal,
    task: dict[str, Any] | str,
    idempotency_key: str | None,
    project: str | None,
) -> tuple[dict[str, Any], bool]:
    """Submit the task: its request's public view, and whether this call created it."""
    owner = requests.Owner(who.name, project_for(deps, who, project), admin=who.is_admin)
    try:
        done = requests.submit_task(deps, task, idempotency_key=idempotency_key, owner=owner)
    except requests.BadKey as exc:
        raise HTTPException(
            422, {"error": "invalid idempotency key", "reasons": [str(exc)]}
        ) from None
    except (ConfigError, requests.Impossible) as exc:
        raise HTTPException(422, requests.refusal_of(exc)) from None
    log_ids.tag(request_id=done.request.id)  # the access log line names the request
    # A request this call created is shown as written (PENDING, no instances): no read back.
    created = done.request if done.created else None
    view = requests.public_view(deps, done.request.id, created=created)
    return (view if view is not None else done.request.to_public()), done.created


@router.get(
    "/v1/submissions/{key:path}",
    response_model=SubmissionView,
    responses={404: {"description": "nothing recorded under the key (yet)"}},
    summary="What a task submitted under an idempotency key became: its request, or why not",
)
def get_submission(
    key: str,
    project: str | None = Query(None, max_length=63, description="the project it went to"),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    # Keys are kept per project (a member's key never reaches another project's request).
    if project is not None and not who.sees(project):
        raise HTTPException(404, f"nothing submitted under idempotency key {key!r}")
    projects: list[str | None] = [project] if project is not None else [*who.projects]
    if who.is_admin and project is None:
        projects.insert(0, None)  # the first admin's project-less submissions
    found = None
    for scope in projects:
        found = deps.store.submission(requests.scoped_key(key, scope))
        if found is not None:
            break
    if found is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"nothing submitted under idempotency key {key!r} yet (a task sent onto the "
            "schedule queue shows here once the scheduling worker took it)",
        )
    request = None if found.request_id is None else requests.public_view(deps, found.request_id)
    return {
        "idempotency_key": key,
        "state": "accepted" if found.accepted else "refused",
        "request_id": found.request_id,
        "request": request,
        "refusal": found.refusal,
        "at": found.at,
        "received": found.received,
    }


@router.get("/v1/requests", response_model=RequestList, summary="List launch requests")
def list_requests(
    state: RequestState | None = None,
    limit: int = Query(100, ge=1, le=MAX_LIST),
    project: str | None = Query(None, max_length=63, description="only this project's"),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    if project is not None and not who.sees(project):
        return {"requests": []}
    projects = [project] if project is not None else None
    if projects is None and not who.is_admin:
        projects = list(who.projects)
    records = deps.store.list_requests(state=state, limit=limit, projects=projects)
    views = [r.to_public(deps.store.list_instances(request_id=r.id)) for r in records]
    return {"requests": views}


@router.get("/v1/requests/{request_id}", response_model=RequestView, summary="One request")
def get_request(
    request_id: str,
    request: Request,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    view = requests.public_view(deps, request_id)
    if view is None:
        raise _not_found("launch request", request_id)
    return {**view, **served_view(deps, request_id, str(request.base_url))}


def served_view(deps: Deps, request_id: str, base_url: str) -> dict[str, Any]:
    """A replicated service's endpoint (its load balancer, on this API) and its replicas as
    beat's serving pass last saw them; nothing for another request."""
    req = deps.store.get_request(request_id)
    if req is None or req.serving is None:
        return {}
    ready = {r.replica: r.url for r in req.serving.ready}
    return {
        "service_endpoint": f"{base_url.rstrip('/')}{SERVE_PATH}/{request_id}/",
        "replicas_target": req.serving.target,
        "qps": req.serving.qps,
        "replicas": [
            {
                "replica": rid,
                "request_id": serving.replica_request_id(request_id, rid),
                "ready": rid in ready,
                "url": ready.get(rid),
            }
            for rid in req.serving.replicas
        ],
    }


@router.get(
    "/v1/requests/{request_id}/events",
    response_model=EventPage,
    summary="Progress lines after ?after=N, and the state now",
)
def request_events(
    request_id: str,
    after: int = Query(0, ge=0),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    record = visible_request(deps, who, request_id)
    events = deps.store.events(request_id, after=after)
    return {
        "request_id": request_id,
        "state": record.state.value,
        "events": [e.model_dump() for e in events],
    }


@router.get(
    "/v1/requests/{request_id}/logs",
    response_class=PlainTextResponse,
    summary="The output of the request's instances (the last tail_bytes of each)",
)
def request_logs(
    request_id: str,
    instance: str | None = None,
    tail_bytes: int = Query(256_000, ge=1, le=16_000_000),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> PlainTextResponse:
    visible_request(deps, who, request_id)
    if instance is not None:
        _instance_of(deps, request_id, instance)
    try:
        text = requests.read_logs(deps, request_id, instance_id=instance, tail_bytes=tail_bytes)
    except requests.RequestNotFound:
        raise _not_found("launch request", request_id) from None
    return PlainTextResponse(text)


@router.get(
    "/v1/requests/{request_id}/logs/since",
    summary="New output of each of the request's instances, from the offsets the caller holds",
)
def request_log_pieces(
    request_id: str,
    instance: str | None = None,
    after: str = Query(
        "",
        max_length=20_000,
        description="instance:offset pairs separated by commas (the `end` of the last read)",
    ),
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    if instance is not None:
        _instance_of(deps, request_id, instance)
    offsets: dict[str, int] = {}
    for pair in filter(None, after.split(",")):
        iid, _, offset = pair.rpartition(":")
        if not iid or not offset.isascii() or not offset.isdigit() or len(offset) > 15:
            raise HTTPException(422, f"after: {pair!r} is not INSTANCE:OFFSET")
        offsets[iid] = int(offset)
    record = deps.store.get_request(request_id)
    try:
        pieces = requests.read_log_pieces(deps, request_id, offsets, instance_id=instance)
    except requests.RequestNotFound:
        raise _not_found("launch request", request_id) from None
    return {
        "request_id": request_id,
        "ended": bool(record and record.is_terminal),
        "pieces": [dataclasses.asdict(p) for p in pieces],
    }


def _instance_of(deps: Deps, request_id: str, instance_id: str) -> None:
    """404 unless ``instance_id`` is an instance of ``request_id``."""
    if deps.store.get_request(request_id) is None:
        raise _not_found("launch request", request_id)
    inst = deps.store.get_instance(instance_id)
    if inst is None or inst.request_id != request_id:
        raise HTTPException(404, f"launch request {request_id!r} has no instance {instance_id!r}")


def _stop(deps: Deps, request_id: str, instance_id: str | None) -> dict[str, Any]:
    try:
        requests.cancel(deps, request_id, instance_id=instance_id)
    except requests.RequestNotFound:
        raise _not_found("launch request", request_id) from None
    view = requests.public_view(deps, request_id)
    assert view is not None  # requests are never deleted
    return view


@router.post(
    "/v1/requests/{request_id}/cancel",
    response_model=RequestView,
    summary="Cancel a request (a running one has its instances terminated)",
)
def cancel_request(
    request_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(require_writer)
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    return _stop(deps, request_id, None)


@router.post(
    "/v1/requests/{request_id}/terminate",
    response_model=RequestView,
    summary="Terminate a request's instances (or one, with ?instance=); finished ones stay",
)
def terminate_request(
    request_id: str,
    instance: str | None = None,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    if instance is not None:
        _instance_of(deps, request_id, instance)
    return _stop(deps, request_id, instance)


def _stop_or_start(deps: Deps, who: Principal, request_id: str, action: str) -> dict[str, Any]:
    """Check the request can be stopped (or started) here, then publish the work; 409 with
    the reason when it cannot (a cloud that cannot stop a machine names itself); 404 for a
    request the caller may not see."""
    req = visible_request(deps, who, request_id)
    why = stopping.refusal(deps, req, action)
    if why is not None:
        raise HTTPException(409, why)
    publish = dispatch.stop if action == "stop" else dispatch.start
    publish(request_id, settings=deps.settings)
    view = requests.public_view(deps, request_id)
    assert view is not None
    return view


@router.post(
    "/v1/requests/{request_id}/stop",
    response_model=RequestView,
    summary="Stop a running request's machines, keeping their disks (clouds that can stop)",
)
def stop_request(
    request_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(require_writer)
) -> dict[str, Any]:
    return _stop_or_start(deps, who, request_id, "stop")


@router.post(
    "/v1/requests/{request_id}/start",
    response_model=RequestView,
    summary="Start a stopped request's machines again; RUNNING once their agents report",
)
def start_request(
    request_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(require_writer)
) -> dict[str, Any]:
    return _stop_or_start(deps, who, request_id, "start")


class AutostopBody(BaseModel):
    """``corral autostop``: idle minutes (and ``down``), or ``cancel``."""

    model_config = ConfigDict(extra="forbid")

    idle_minutes: float | None = Field(None, ge=0, le=525_600, description="idle this long")
    down: bool = Field(False, description="terminate instead of stop")
    cancel: bool = Field(False, description="no autostop any more")


@router.post(
    "/v1/requests/{request_id}/autostop",
    response_model=RequestView,
    summary="Set or cancel a running request's autostop (idle time counts from now)",
)
def set_autostop(
    request_id: str,
    body: AutostopBody,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, Any]:
    from corral.shared.autostop import DEFAULT_IDLE_MINUTES, Autostop

    visible_request(deps, who, request_id)
    if body.cancel and (body.idle_minutes is not None or body.down):
        raise HTTPException(422, "cancel: give either cancel, or idle_minutes (and down)")
    minutes = DEFAULT_IDLE_MINUTES if body.idle_minutes is None else body.idle_minutes
    policy = None if body.cancel else Autostop(minutes, down=body.down)
    try:
        stopping.set_autostop(deps, request_id, policy)
    except stopping.AutostopRefused as exc:
        raise HTTPException(409, str(exc)) from None
    except LookupError:
        raise _not_found("launch request", request_id) from None
    view = requests.public_view(deps, request_id)
    assert view is not None
    return view


@router.post(
    "/v1/instances/{instance_id}/terminate",
    response_model=RequestView,
    summary="Terminate one instance; returns its request",
)
def terminate_instance(
    instance_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(require_writer)
) -> dict[str, Any]:
    inst = deps.store.get_instance(instance_id)
    if inst is None or not who.sees_request(deps.store.get_request(inst.request_id)):
        raise _not_found("instance", instance_id)
    return _stop(deps, inst.request_id, instance_id)


@router.get("/v1/instances", response_model=InstanceList, summary="List instances")
def list_instances(
    request: str | None = Query(None, description="only this request's instances"),
    state: InstanceState | None = None,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> dict[str, Any]:
    states = [state] if state is not None else None
    found = deps.store.list_instances(request_id=request, states=states)
    if not who.is_admin:
        ids = {i.request_id for i in found}
        seen = {i for i in ids if who.sees_request(deps.store.get_request(i))}
        found = [i for i in found if i.request_id in seen]
    return {"instances": [{**i.to_public(), "request_id": i.request_id} for i in found]}


@health_router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health, "description": "Redis is unreachable"}},
    summary="Whether the API can reach Redis",
)
def healthz(deps: Deps = Depends(get_deps)) -> Any:
    try:
        deps.redis.ping()
    except Exception as exc:  # any failure to reach Redis means "not healthy"
        return JSONResponse(
            status_code=503,
            content={"status": "unavailable", "detail": f"redis: {type(exc).__name__}"},
        )
    return {"status": "ok", "detail": None}
