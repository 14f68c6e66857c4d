"""The API's routes: launch requests, their events and logs, instances, health.

Reads are open; every write depends on :func:`corral.services.api.auth.require_token`. The
work itself is done by :mod:`corral.services.runtime.requests`; these functions only translate
HTTP to calls and errors to status codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from corral.services.api.auth import require_token
from corral.services.api.schemas import (
    EventPage,
    Health,
    InstanceList,
    RequestList,
    RequestView,
    TaskBody,
)
from corral.services.observability import logs as log_ids
from corral.services.runtime import requests
from corral.services.runtime.deps import Deps
from corral.shared.config.detect import check_problems
from corral.shared.config.task import Task
from corral.shared.configio import ConfigError, Document, Issue, parse_text, validate_doc
from corral.shared.lifecycle import InstanceState, RequestState

router = APIRouter()

TASK_NAME = "task"  # the file name issues carry for a task sent over HTTP
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


def get_deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


def _not_found(what: str, ident: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no {what} with id {ident!r}")


def _invalid(exc: ConfigError) -> HTTPException:
    issues = [i.as_dict() for i in exc.issues]
    return HTTPException(422, {"error": "invalid task", "issues": issues})


async def task_document(request: Request) -> Document:
    """The submitted task as a parsed document (lines known when it came as text)."""
    raw = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if ctype in YAML_TYPES:
            return parse_text(raw.decode("utf-8"), TASK_NAME)
        body = TaskBody.model_validate_json(raw or b"{}")
    except UnicodeDecodeError:
        raise _invalid(ConfigError.single(TASK_NAME, "the body is not UTF-8 text")) from None
    except ConfigError as exc:
        raise _invalid(exc) from None
    except ValidationError as exc:
        issues = [
            Issue("request body", None, ".".join(map(str, e["loc"])), e["msg"])
            for e in exc.errors()
        ]
        raise _invalid(ConfigError(issues)) from None
    if (body.task is None) == (body.task_yaml is None):
        message = 'send exactly one of {"task": {...}} or {"task_yaml": "..."}'
        raise _invalid(ConfigError.single("request body", message))
    if body.task_yaml is not None:
        try:
            return parse_text(body.task_yaml, TASK_NAME)
        except ConfigError as exc:
            raise _invalid(exc) from None
    return Document(name=TASK_NAME, data=body.task)


def _validated_task(doc: Document) -> Task:
    """The task, with the cross-field checks ``corral validate`` makes; raises ConfigError."""
    if not isinstance(doc.data, Mapping):
        raise ConfigError.single(doc.name, "expected a mapping of fields (a task file)", "", 1)
    task = validate_doc(Task, doc)
    check_problems(task, doc)
    config = task.compute_config
    if isinstance(config, str):
        message = "a file path the API cannot read; send the compute config inline"
        raise doc.error(("compute_config",), message)
    if config is not None and (found := config.problems()):
        raise ConfigError([doc.issue(("compute_config", *path), msg) for path, msg in found])
    return task


@router.post(
    "/v1/requests",
    status_code=status.HTTP_201_CREATED,
    response_model=RequestView,
    dependencies=[Depends(require_token)],
    openapi_extra=_SUBMIT_BODY,
    responses={422: {"description": "invalid task, or nothing could ever be planned for it"}},
    summary="Submit a launch request",
)
def submit_request(
    doc: Document = Depends(task_document), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    try:
        task = _validated_task(doc)
        record = requests.submit(deps, task)
        log_ids.tag(request_id=record.id)  # the access log line names the request it made
    except ConfigError as exc:
        raise _invalid(exc) from None
    except requests.Impossible as exc:
        raise HTTPException(422, {"error": "impossible", "reasons": exc.reasons}) from None
    view = requests.public_view(deps, record.id)
    return view if view is not None else record.to_public()


@router.get("/v1/requests", response_model=RequestList, summary="List launch requests")
def list_requests(
    state: RequestState | None = None,
    limit: int = Query(100, ge=1, le=MAX_LIST),
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    records = deps.store.list_requests(state=state, limit=limit)
    views = [r.to_public(deps.store.list_instances(request_id=r.id)) for r in records]
    return {"requests": views}


@router.get("/v1/requests/{request_id}", response_model=RequestView, summary="One request")
def get_request(request_id: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    view = requests.public_view(deps, request_id)
    if view is None:
        raise _not_found("launch request", request_id)
    return view


@router.get(
    "/v1/requests/{request_id}/events",
    response_model=EventPage,
    summary="Progress lines after ?after=N, and the state now",
)
def request_events(
    request_id: str, after: int = Query(0, ge=0), deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    record = deps.store.get_request(request_id)
    if record is None:
        raise _not_found("launch request", request_id)
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
) -> PlainTextResponse:
    if instance is not None:
        _instance_of(deps, request_id, instance)
    try:
        text = requests.read_logs(deps, request_id, instance_id=instance, tail_bytes=tail_bytes)
    except requests.RequestNotFound:
        raise _not_found("launch request", request_id) from None
    return PlainTextResponse(text)


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
    dependencies=[Depends(require_token)],
    summary="Cancel a request (a running one has its instances terminated)",
)
def cancel_request(request_id: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    return _stop(deps, request_id, None)


@router.post(
    "/v1/requests/{request_id}/terminate",
    response_model=RequestView,
    dependencies=[Depends(require_token)],
    summary="Terminate a request's instances (or one, with ?instance=); finished ones stay",
)
def terminate_request(
    request_id: str, instance: str | None = None, deps: Deps = Depends(get_deps)
) -> dict[str, Any]:
    if instance is not None:
        _instance_of(deps, request_id, instance)
    return _stop(deps, request_id, instance)


@router.post(
    "/v1/instances/{instance_id}/terminate",
    response_model=RequestView,
    dependencies=[Depends(require_token)],
    summary="Terminate one instance; returns its request",
)
def terminate_instance(instance_id: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    inst = deps.store.get_instance(instance_id)
    if inst is None:
        raise _not_found("instance", instance_id)
    return _stop(deps, inst.request_id, instance_id)


@router.get("/v1/instances", response_model=InstanceList, summary="List instances")
def list_instances(
    request: str | None = Query(None, description="only this request's instances"),
    state: InstanceState | None = None,
    deps: Deps = Depends(get_deps),
) -> dict[str, Any]:
    states = [state] if state is not None else None
    found = deps.store.list_instances(request_id=request, states=states)
    return {"instances": [{**i.to_public(), "request_id": i.request_id} for i in found]}


@router.get(
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
