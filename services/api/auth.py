"""Who may read and write: one shared bearer token (the admin token), compared in constant time.

The token comes from the settings (``CORRAL_API_TOKEN``) or else from ``<home>/api-token``,
the file ``corral up`` writes. Every route needs it but ``/healthz``, ``/metrics`` and the node
routes (which take a node's own token, :mod:`corral.services.api.nodes`). With no token
configured they all answer 503: an API without a token is never open by accident. The token is
never logged.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.services.settings import Settings

TOKEN_FILE = "api-token"

_bearer = HTTPBearer(
    auto_error=False, description="the token in CORRAL_API_TOKEN or <home>/api-token"
)


def configured_token(settings: Settings) -> str | None:
    """The token writes must carry, or None when none is configured."""
    if settings.api_token is not None and settings.api_token.get_secret_value():
        return str(settings.api_token.get_secret_value())
    path = settings.file(TOKEN_FILE)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return token or None


def require_token(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> None:
    """A dependency of every admin route: 503 if no token is configured, 401 if it is not
    sent (or another token is: a node's is refused here)."""
    expected: str | None = request.app.state.api_token
    if expected is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the API has no token configured, so it answers nothing but /healthz "
            "(set CORRAL_API_TOKEN or start it with `corral up`)",
        )
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or wrong API token (send Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
