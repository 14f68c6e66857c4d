"""The CLI's access to the HTTP API: one client (``corral.services.client``, the public one)
per command, and its exceptions turned into one line and the exit code every command uses
(the table in ``corral.services.client.errors``). Imports stay light (the CLI's startup)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import typer

from corral.services.cli.output import (
    EXIT_INPUT,
    EXIT_NEGATIVE,
    err,
    fail,
    fail_input,
    print_json,
)

if TYPE_CHECKING:
    from corral.services.client import ApiError, Client

__all__ = ["api_client", "complete_request_id", "fail", "fail_api"]  # fail: output.py's


@contextmanager
def api_client(as_json: bool, source: str | None = None) -> Iterator[Client]:
    """A client of the configured API; its failures become one line and an exit code."""
    from corral.services.client import ApiError, ApiUnreachable, Client, NoApiAddress

    try:
        with Client.from_settings() as client:
            yield client
    except NoApiAddress as exc:
        fail(str(exc), EXIT_INPUT, as_json)
    except ApiUnreachable as exc:
        fail(str(exc), EXIT_NEGATIVE, as_json)
    except ApiError as exc:
        fail_api(exc, as_json, source)
    except Exception as exc:
        # A file the client read or packed (a workdir, a mount). Only code that has loaded
        # configio raises its ConfigError, so a command that read no file need not load it.
        configio = sys.modules.get("corral.shared.configio")
        if configio is None or not isinstance(exc, configio.ConfigError):
            raise
        fail_input(exc, as_json)


def complete_request_id(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of a request id: the newest requests' ids (with their name and
    state), asked of the API; nothing when it does not answer within a second."""
    from corral.services.client import Client, ClientError

    try:
        with Client.from_settings(timeout_s=1.0) as client:
            views = client.list_requests(limit=200)
    except (ClientError, OSError, ValueError):
        return []
    return [(v.id, f"{v.name or '-'} {v.state}") for v in views if v.id.startswith(incomplete)]


def _token_hint() -> str:
    """Which token the API refused, named by where it was read, and what to do."""
    from corral.services.client.contexts import ContextError
    from corral.services.client.rest import token_and_source
    from corral.services.client_settings import client_settings

    try:
        token, source = token_and_source(client_settings())
    except ContextError as exc:
        return f"the API refused the token; the config file is broken: {exc}"
    if token is None:
        return (
            f"no API token was sent (none in CORRAL_API_TOKEN or {source}); set one, "
            "or run the command where `corral up` wrote its token"
        )
    if source == "CORRAL_API_TOKEN":
        return "the API refused the token in CORRAL_API_TOKEN (unset it or set the right one)"
    return f"the API refused the token read from {source} (revoked, or of another installation)"


def fail_api(exc: ApiError, as_json: bool, source: str | None = None) -> NoReturn:
    """An error status from the API as an exit code: refusals of the input are 2."""
    from corral.services.client import Impossible, InvalidTask, Unauthorized
    from corral.services.client.errors import describe_detail
    from corral.shared.configio import ConfigError, Issue

    if isinstance(exc, Unauthorized):
        fail(f"unauthorized: {_token_hint()}", EXIT_INPUT, as_json)
    if isinstance(exc, InvalidTask):
        issues = [
            Issue(
                source or i.get("file") or "input",
                i.get("line"),
                i.get("field") or "",
                i.get("message", ""),
            )
            for i in exc.issues
        ]
        fail_input(ConfigError(issues), as_json)
    if isinstance(exc, Impossible):
        reasons = exc.reasons or ["no candidate can be planned"]
        if as_json:
            print_json({"error": "impossible", "reasons": reasons})
        for reason in reasons:
            err.print(f"impossible: {reason}", markup=False)
        raise typer.Exit(EXIT_INPUT)
    code = EXIT_INPUT if 400 <= exc.status_code < 500 else EXIT_NEGATIVE
    fail(f"{describe_detail(exc.detail)} (HTTP {exc.status_code})", code, as_json)
