"""Who may see the console: the API's admin token, as a bearer header or as a session cookie.

A browser signs in once at ``/console/login`` with the token; the cookie it gets holds a
random session id (never the token, nor anything derived from it alone), kept in Redis
(:mod:`corral.services.state.console_sessions`) until it expires or the browser signs out,
which deletes it: a copied cookie is worth nothing after sign-out, and nothing once the token
changes. It is HttpOnly, SameSite=Strict and scoped to ``/console``. The actions (cancel,
terminate) also carry a form field derived from the session id (from the token for a caller
signed in by header), so a page of another site cannot post them.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote

from fastapi import HTTPException, Request, status

from corral.services.state.console_sessions import ConsoleSessions

COOKIE = "corral_console"
SESSION_MAX_AGE_S = 12 * 3600


def _derive(token: str, purpose: str) -> str:
    return hmac.new(token.encode("utf-8"), purpose.encode(), hashlib.sha256).hexdigest()


def token_mark(token: str) -> str:
    """What a session keeps of the token it was opened with: a changed token ends it."""
    return _derive(token, "corral-console-session")


def _sessions(request: Request) -> ConsoleSessions:
    deps = request.app.state.deps
    return ConsoleSessions(deps.redis, deps.settings.prefix)


def open_session(request: Request) -> str:
    """A new session's id for the cookie (the caller has shown the token)."""
    return _sessions(request).open(token_mark(expected_token(request)), SESSION_MAX_AGE_S)


def close_session(request: Request) -> None:
    """End the session the request's cookie names (sign-out)."""
    _sessions(request).close(request.cookies.get(COOKIE, ""))


def _session_id(request: Request) -> str | None:
    """The request's session id when it names an open session of the current token."""
    sid = request.cookies.get(COOKIE, "")
    if sid and _sessions(request).valid(sid, token_mark(expected_token(request))):
        return sid
    return None


def form_key(request: Request) -> str:
    """The value the console's forms carry (checked by :func:`check_form_key`): derived from
    the session id, or from the token for a caller signed in by its header."""
    sid = request.cookies.get(COOKIE, "")
    secret = sid if sid and _session_id(request) else expected_token(request)
    return _derive(secret, "corral-console-form")


def expected_token(request: Request) -> str:
    token: str | None = request.app.state.api_token
    if token is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the API has no token configured (set CORRAL_API_TOKEN or start it with `corral up`)",
        )
    return token


def signed_in(request: Request) -> bool:
    token = expected_token(request)
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return hmac.compare_digest(header[7:].strip().encode(), token.encode())
    return _session_id(request) is not None


def require_session(request: Request) -> None:
    """A dependency of every console page: to the sign-in page when not signed in."""
    if not signed_in(request):
        target = quote(request.url.path, safe="/")
        raise HTTPException(
            status.HTTP_303_SEE_OTHER, headers={"Location": f"/console/login?next={target}"}
        )


def check_form_key(request: Request, given: str) -> None:
    if not hmac.compare_digest(given.encode(), form_key(request).encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the form is stale or not the console's")


def check_password(request: Request, given: str) -> bool:
    return hmac.compare_digest(given.encode(), expected_token(request).encode())
