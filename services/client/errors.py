"""What can go wrong talking to Corral's API, as exceptions a program can catch.

The ``corral`` command maps each to its exit code (``corral.services.cli.api_access``):

================================  ==========================================================
exception                         exit code of the CLI
================================  ==========================================================
:class:`NoApiAddress`             2: nothing says where the API is (your setup)
:class:`ApiUnreachable`           1: nothing answered there
:class:`Unauthorized` (401)       2: the token was refused
:class:`NotFound` (404)           2: no such request, pool or cluster
:class:`InvalidTask` (422)        2: the document is invalid; ``issues`` name field and line
:class:`Impossible` (422)         2: nothing could ever be planned; ``reasons`` say why
:class:`Conflict` (409)           2, or 1 where the answer is "not now" (a pool in use)
other :class:`ApiError`           2 for another 4xx, 1 for a 5xx (the store unreachable, ...)
:class:`WaitTimeout`              3: the request was still on its way when the time was up
================================  ==========================================================

No message ever carries the API token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.client.views import RequestView


class ClientError(Exception):
    """Anything the client raises on purpose."""


class NoApiAddress(ClientError, LookupError):
    """Neither CORRAL_API_URL nor <home>/api-url says where the API is (or it is malformed)."""


class ApiUnreachable(ClientError, ConnectionError):
    """Nothing answered at the API's address (refused, timed out, reset)."""


class ApiError(ClientError):
    """The API answered with an error status; ``detail`` is its JSON ``detail`` (or text)."""

    def __init__(self, status_code: int, detail: Any) -> None:
        self.status_code = status_code
        self.detail = detail
        super().__init__(f"HTTP {status_code}: {describe_detail(detail)}")


class Unauthorized(ApiError):
    """401: a write without the API's token, or with another one."""


class NotFound(ApiError):
    """404: no request, instance, pool or cluster by that name."""


class Conflict(ApiError):
    """409: the name is taken, or the thing is in use."""


class InvalidTask(ApiError):
    """422: the document is invalid. ``issues``: ``{"file", "line", "field", "message"}`` each."""

    @property
    def issues(self) -> list[dict[str, Any]]:
        return list(self.detail.get("issues") or [])


class Impossible(ApiError):
    """422: nothing could ever be planned for the task here. ``reasons`` say why."""

    @property
    def reasons(self) -> list[str]:
        return [str(r) for r in self.detail.get("reasons") or []]


class WaitTimeout(ClientError, TimeoutError):
    """``wait`` gave up: the request neither ran nor ended in time. ``request`` is its last
    view."""

    def __init__(self, request: RequestView, timeout_s: float) -> None:
        self.request = request
        self.timeout_s = timeout_s
        super().__init__(f"request {request.id} still {request.state} after {timeout_s:g} s")


def api_error(status_code: int, detail: Any) -> ApiError:
    """The exception for an error status and its detail."""
    if status_code == 422 and isinstance(detail, dict):
        if detail.get("issues"):
            return InvalidTask(status_code, detail)
        if "reasons" in detail and detail.get("error") == "impossible":
            return Impossible(status_code, detail)
    kind = {401: Unauthorized, 404: NotFound, 409: Conflict}.get(status_code, ApiError)
    return kind(status_code, detail)


def describe_detail(detail: Any) -> str:
    """An API error's ``detail`` in one line."""
    if isinstance(detail, dict):
        if detail.get("reasons"):
            return f"{detail.get('error', 'refused')}: " + "; ".join(map(str, detail["reasons"]))
        if detail.get("issues"):
            return f"{detail.get('error', 'invalid')} ({len(detail['issues'])} issues)"
        return str(detail.get("error") or detail)
    if isinstance(detail, list):  # FastAPI's own validation errors
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)
