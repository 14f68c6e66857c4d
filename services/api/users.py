"""Users, their tokens and projects with their quotas: the admin's routes, and ``whoami``.

``POST /v1/users`` answers with the new user's token, once (only its hash is kept);
``POST /v1/users/{name}/revoke`` stops it at once. ``PUT /v1/projects/{name}/quota`` sets a
project's quota, checked when its requests are admitted
(:mod:`corral.services.runtime.quotas`). Every route but ``whoami`` and ``GET /v1/projects``
(which shows a member or viewer its own projects) needs an admin.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, status
from pydantic import BaseModel, ConfigDict, Field

from corral.services.api.auth import Principal, caller, require_admin
from corral.services.api.routes import get_deps
from corral.services.runtime import quotas as quota_usage
from corral.services.runtime.deps import Deps
from corral.services.state.execs import ExecBook
from corral.services.state.users import AccessError, ProjectRecord, Role
from corral.shared.quotas import Quota

router = APIRouter(tags=["users"])

NAME = Field(min_length=1, max_length=63)


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = NAME
    role: Role
    projects: list[str] = Field(default_factory=list, max_length=64)


class ProjectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = NAME
    quota: Quota = Field(default_factory=Quota)


@router.get("/v1/whoami", summary="The caller: its user name, role and projects")
def whoami(who: Principal = Depends(caller)) -> dict[str, Any]:
    return {"name": who.name, "role": who.role, "projects": list(who.projects)}


@router.post(
    "/v1/users",
    status_code=status.HTTP_201_CREATED,
    dependencies=[Depends(require_admin)],
    summary="Add a user with a role and projects; the answer holds its token, shown once",
)
def add_user(body: UserIn, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    try:
        record, token = deps.access.add_user(body.name, body.role, body.projects, deps.now())
    except AccessError as exc:
        code = 409 if "exists already" in str(exc) else 422
        raise HTTPException(code, str(exc)) from None
    return {**record.public(), "token": token}


@router.get("/v1/users", dependencies=[Depends(require_admin)], summary="Every user")
def list_users(deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    return {"users": [u.public() for u in deps.access.list_users()]}


@router.post(
    "/v1/users/{name}/revoke",
    dependencies=[Depends(require_admin)],
    summary="Revoke a user's token (at once; the user stays listed as revoked)",
)
def revoke_user(name: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    try:
        revoked = deps.access.revoke(name, deps.now()).public()
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    # Its open shells and forwards end too: each node's agent finds its session gone within
    # seconds and kills what it ran (the token alone would leave them up to the session TTL).
    ExecBook(deps.redis, deps.settings.prefix).end_sessions_of(name)
    return revoked


def _project_view(deps: Deps, project: ProjectRecord) -> dict[str, Any]:
    """A project with its quota and what it uses now (GPUs held, dollars this period)."""
    now = deps.now()
    usage = quota_usage.project_usage(deps, project.name, project.quota, now)
    return {
        "name": project.name,
        "quota": project.quota.model_dump(),
        "gpus_in_use": usage.gpus_in_use,
        "spent_usd": round(usage.spent_usd, 6),
        "period_start": usage.period_start,
        "created_at": project.created_at,
    }


@router.post(
    "/v1/projects",
    status_code=status.HTTP_201_CREATED,
    dependencies=[Depends(require_admin)],
    summary="Add a project (optionally with its quota)",
)
def add_project(body: ProjectIn, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    try:
        record = deps.access.add_project(body.name, deps.now(), body.quota)
    except AccessError as exc:
        code = 409 if "exists already" in str(exc) else 422
        raise HTTPException(code, str(exc)) from None
    return _project_view(deps, record)


@router.get("/v1/projects", summary="Projects with their quotas and usage (a member's own)")
def list_projects(
    deps: Deps = Depends(get_deps), who: Principal = Depends(caller)
) -> dict[str, Any]:
    found = [p for p in deps.access.list_projects() if who.sees(p.name)]
    return {"projects": [_project_view(deps, p) for p in found]}


@router.put(
    "/v1/projects/{name}/quota",
    dependencies=[Depends(require_admin)],
    summary="Set a project's quota (a limit left out or null: no limit)",
)
def set_quota(name: str, body: Quota, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    try:
        record = deps.access.set_quota(name, body)
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    return _project_view(deps, record)
