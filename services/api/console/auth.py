"""Who may see the console, and what: any user's token (the first admin's, or one made by
``corral users add``), as a bearer header or as a session cookie. The caller is the API's
:class:`~corral.services.api.auth.Principal`: a member or viewer sees its projects' requests
only (another's answers 404, as in the API), a viewer changes nothing (403).

A browser signs in once at ``/console/login`` with its token; the cookie it gets holds a
random session id (never the token, nor anything derived from it alone), kept in Redis
(:mod:`corral.services.state.console_sessions`) until it expires or the browser signs out,
which deletes it: a copied cookie is worth nothing after sign-out. Every page checks the
session's user anew: a revoked user's sessions (``corral users revoke``) end at once, and a
changed first-admin token ends the sessions opened with the old one. The cookie is HttpOnly,
SameSite=Strict and scoped to ``/console``. The actions (cancel, terminate) also carry a form
field derived from the session id (from the token for a caller signed in by header), so a
page of another site cannot post them.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote

from fastapi import HTTPException, Request, status

from corral.services.api.auth import Principal, principal_of
from corral.services.state.console_sessions import ConsoleSessions
from corral.services.state.users import BOOTSTRAP_ADMIN

COOKIE = "corral_console"
SESSION_MAX_AGE_S = 12 * 3600


def _derive(token: str, purpose: str) -> str:
    return hmac.new(token.encode("utf-8"), purpose.encode(), hashlib.sha256).hexdigest()


def token_mark(token: str) -> str:
    """What a session keeps of the first admin's token: a changed token ends it."""
    return _derive(token, "corral-console-session")


def _user_mark(token_sha256: str) -> str:
    """What a session keeps of a user's token (from the hash its record holds)."""
    return _derive(token_sha256, "corral-console-user-session")


def _sessions(request: Request) -> ConsoleSessions:
    deps = request.app.state.deps
    return ConsoleSessions(deps.redis, deps.settings.prefix)


def open_session(request: Request, who: Principal) -> str:
    """A new session's id for the cookie (``who`` has shown its token)."""
    if who.name == BOOTSTRAP_ADMIN:
        mark = token_mark(expected_token(request))
    else:
        user = request.app.state.deps.access.user(who.name)
        mark = _user_mark(user.token_sha256)
    return _sessions(request).open(who.name, mark, SESSION_MAX_AGE_S)


def close_session(request: Request) -> None:
    """End the session the request's cookie names (sign-out)."""
    _sessions(request).close(request.cookies.get(COOKIE, ""))


def _session_holder(request: Request) -> Principal | None:
    """Who the request's cookie signs in: its session's user while the session is open and
    the user's token is the one it signed in with and not revoked."""
    held = _sessions(request).holder(request.cookies.get(COOKIE, ""))
    if held is None:
        return None
    name, mark = held
    if name == BOOTSTRAP_ADMIN:
        ok = hmac.compare_digest(mark.encode(), token_mark(expected_token(request)).encode())
        return Principal(BOOTSTRAP_ADMIN, "admin") if ok else None
    user = request.app.state.deps.access.user(name)
    if user is None or user.revoked_at is not None:
        return None
    if not hmac.compare_digest(mark.encode(), _user_mark(user.token_sha256).encode()):
        return None
    return Principal(user.name, user.role, tuple(user.projects))


def form_key(request: Request) -> str:
    """The value the console's forms carry (checked by :func:`check_form_key`): derived from
    the session id, or from the bearer token for a caller signed in by its header."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return _derive(header[7:].strip(), "corral-console-form")
    return _derive(request.cookies.get(COOKIE, ""), "corral-console-form")


def expected_token(request: Request) -> str:
    token: str | None = request.app.state.api_token
    if token is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the API has no token configured (set CORRAL_API_TOKEN or start it with `corral up`)",
        )
    return token


def caller(request: Request) -> Principal | None:
    """Who is signed in, by bearer header or session cookie; None when nobody is."""
    expected_token(request)  # 503 when the API has none
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return principal_of(request, header[7:].strip())
    return _session_holder(request)


def require_session(request: Request) -> Principal:
    """A dependency of every console page: the caller (kept as ``request.state.who``), or a
    redirect to the sign-in page when nobody is signed in."""
    who = caller(request)
    if who is None:
        target = quote(request.url.path, safe="/")
        raise HTTPException(
            status.HTTP_303_SEE_OTHER, headers={"Location": f"/console/login?next={target}"}
        )
    request.state.who = who
    return who


def who(request: Request) -> Principal:
    """The caller :func:`require_session` let in."""
    found: Principal = request.state.who
    return found


def check_form_key(request: Request, given: str) -> None:
    if not hmac.compare_digest(given.encode(), form_key(request).encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the form is stale or not the console's")


def sign_in(request: Request, given: str) -> Principal | None:
    """The user ``given`` is the token of (the first admin's or a live user's), or None."""
    if not given or len(given) > 256:
        return None
    return principal_of(request, given.strip())
