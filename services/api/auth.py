"""Who may read and write: the first admin's token, or a user's token with its role.

The first admin's token comes from the settings (``CORRAL_API_TOKEN``) or else from
``<home>/api-token``, the file ``corral up`` writes; it is compared in constant time and acts
as the user ``admin``. Other users' tokens are made by an admin (``corral users add``) and kept
hashed in Redis (:mod:`corral.services.state.users`). Each token resolves to a
:class:`Principal`: a role and the projects it may act in.

| role   | reads                      | writes                                              |
|--------|----------------------------|-----------------------------------------------------|
| admin  | everything                 | everything; users, projects, quotas, pools, clusters |
| member | its projects' requests     | submits to, cancels and terminates in its projects   |
| viewer | its projects' requests     | nothing (403)                                        |

A request outside the caller's projects answers 404, as an unknown id does, so ids do not
leak. Every route needs a token but ``/healthz``, ``/metrics`` (open unless
``CORRAL_METRICS_TOKEN`` is set) and the node routes (which take a node's own token,
:mod:`corral.services.api.nodes`). With no first-admin token configured
they all answer 503: an API without a token is never open by accident. No token is logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from corral.services.settings import Settings
from corral.services.state.users import BOOTSTRAP_ADMIN, Role
from corral.shared.records import LaunchRequest

TOKEN_FILE = "api-token"

_bearer = HTTPBearer(
    auto_error=False,
    description="the first admin's token (CORRAL_API_TOKEN or <home>/api-token) or a user's",
)
BEARER_SCHEME = _bearer.scheme_name  # its name in the OpenAPI document's security schemes


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user's name, role and projects (an admin acts in every project)."""

    name: str
    role: Role
    projects: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def sees(self, project: str | None) -> bool:
        """Whether the caller may see a request of ``project`` (None: no project, admins
        only)."""
        return self.is_admin or (project is not None and project in self.projects)

    def sees_request(self, req: LaunchRequest | None) -> bool:
        return req is not None and self.sees(req.project)


def configured_token(settings: Settings) -> str | None:
    """The first admin's token, or None when none is configured."""
    if settings.api_token is not None and settings.api_token.get_secret_value():
        return str(settings.api_token.get_secret_value())
    path = settings.file(TOKEN_FILE)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return token or None


def principal_of(request: Request, given: str) -> Principal | None:
    """The principal a bearer token names, or None. 503 when no first admin is configured."""
    found = _first_admin(request, given)
    if found is None and given:
        found = _user(request, given)
    return found


def _first_admin(request: Request, given: str) -> Principal | None:
    """The first admin, if ``given`` is its token (no I/O). 503 when none is configured."""
    expected: str | None = request.app.state.api_token
    if expected is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the API has no token configured, so it answers nothing but /healthz "
            "(set CORRAL_API_TOKEN or start it with `corral up`)",
        )
    if hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        return Principal(BOOTSTRAP_ADMIN, "admin")
    return None


def _user(request: Request, given: str) -> Principal | None:
    """The user whose token this is (read from Redis), or None."""
    user = request.app.state.deps.access.verify(given)
    if user is None:
        return None
    return Principal(user.name, user.role, tuple(user.projects))


async def caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> Principal:
    """A dependency of every user route: 503 if no token is configured, 401 if none or an
    unknown (or revoked) one is sent (a node's token is refused here). The first admin's
    token is checked on the event loop; a user's is looked up in Redis in the thread pool."""
    given = credentials.credentials if credentials is not None else ""
    found = _first_admin(request, given)
    if found is None and given:
        found = await run_in_threadpool(_user, request, given)
    if found is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing, wrong or revoked API token (send Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return found


# The name routes used before roles: every user route needs a valid token.
require_token = caller


async def require_admin(who: Principal = Depends(caller)) -> Principal:
    """Admins only (users, projects, quotas, pools, clusters): 403 for the others."""
    if not who.is_admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"user {who.name!r} is a {who.role}: this needs an admin"
        )
    return who


async def caller_of(request: Request) -> Principal:
    """:func:`caller` called directly, not as a dependency (the busiest route, a submit,
    resolves its own: see ``services/api/routes.py``), with the same answers."""
    return await caller(request, await _bearer(request))


def writer(who: Principal) -> Principal:
    """``who``, if it may change things (an admin or a member): 403 for a viewer."""
    if who.role == "viewer":
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"user {who.name!r} is a viewer: it reads its projects' requests, nothing more",
        )
    return who


async def require_writer(who: Principal = Depends(caller)) -> Principal:
    """Admins and members (submit, cancel, terminate, exec, upload): 403 for a viewer."""
    return writer(who)
