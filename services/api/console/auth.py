"""Who may see the console: the API's admin token, as a bearer header or as a session cookie.

A browser signs in once at ``/console/login`` with the token; the cookie it gets holds an HMAC
of the token (never the token itself), so it is worth nothing once the token changes. It is
HttpOnly, SameSite=Strict and scoped to ``/console``. The actions (cancel, terminate) also
carry a form field derived the same way, so a page of another site cannot post them.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote

from fastapi import HTTPException, Request, status

COOKIE = "corral_console"
SESSION_MAX_AGE_S = 12 * 3600


def _derive(token: str, purpose: str) -> str:
    return hmac.new(token.encode("utf-8"), purpose.encode(), hashlib.sha256).hexdigest()


def session_value(token: str) -> str:
    return _derive(token, "corral-console-session")


def form_key(token: str) -> str:
    """The value the console's forms carry (checked by :func:`check_form_key`)."""
    return _derive(token, "corral-console-form")


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
    cookie = request.cookies.get(COOKIE, "")
    return hmac.compare_digest(cookie.encode(), session_value(token).encode())


def require_session(request: Request) -> None:
    """A dependency of every console page: to the sign-in page when not signed in."""
    if not signed_in(request):
        target = quote(request.url.path, safe="/")
        raise HTTPException(
            status.HTTP_303_SEE_OTHER, headers={"Location": f"/console/login?next={target}"}
        )


def check_form_key(request: Request, given: str) -> None:
    if not hmac.compare_digest(given.encode(), form_key(expected_token(request)).encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the form is stale or not the console's")


def check_password(request: Request, given: str) -> bool:
    return hmac.compare_digest(given.encode(), expected_token(request).encode())
