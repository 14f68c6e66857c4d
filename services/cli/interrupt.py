"""Ctrl-C while a command follows a request (``launch``, ``logs --follow``): following stops,
the request does not. What is said, the second Ctrl-C's offer, and the exit code (130)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NoReturn

import typer

from corral.services.cli.output import EXIT_INTERRUPTED, err

if TYPE_CHECKING:
    from corral.services.client import Client


# A second Ctrl-C within this many seconds of the offer to stop the request asks whether to.
SECOND_INTERRUPT_S = 2.0


def interrupted(client: Client, request_id: str, *, down: bool, offer: bool) -> NoReturn:
    """Ctrl-C while following a request: following stops, the request does not. Say so, with
    the commands that follow it again and that stop it; ``down`` (--down-on-interrupt)
    terminates it instead. A second Ctrl-C, from the first until :data:`SECOND_INTERRUPT_S`
    after the offer is shown, asks whether to terminate it (counted from the offer: the
    request's state is asked for first, which a slow API may make take longer than that).
    Exit 130, as a shell reports a program ended by SIGINT."""
    if down:
        view = client.terminate(request_id)
        err.print(f"\ninterrupted: terminating request {request_id} ({view.state})", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    try:
        err.print(f"\ninterrupted: stopped following request {request_id}", markup=False)
        _say_it_keeps_going(client, request_id)
        if offer:
            err.print(
                f"Press Ctrl-C again within {SECOND_INTERRUPT_S:g} s to terminate it now.",
                markup=False,
            )
            time.sleep(SECOND_INTERRUPT_S)
    except KeyboardInterrupt:
        if offer:
            _offer_to_terminate(client, request_id)
    raise typer.Exit(EXIT_INTERRUPTED)


def _say_it_keeps_going(client: Client, request_id: str) -> None:
    from corral.services.client import ClientError

    try:
        state = client.status(request_id).state
    except (ClientError, OSError):  # the API gone too: say what we know
        state = "state unknown"
    err.print(
        f"request {request_id} keeps going ({state}).\n"
        f"  follow it again: corral logs {request_id} --follow  (or corral status {request_id})\n"
        f"  stop it:         corral terminate {request_id}",
        markup=False,
    )


def _offer_to_terminate(client: Client, request_id: str) -> None:
    """Ask (on the terminal, or standard input) whether to terminate; no answer is no."""
    try:
        answer = typer.confirm(f"Terminate request {request_id}?", default=False, err=True)
    except (typer.Abort, KeyboardInterrupt, EOFError):
        answer = False
    if answer:
        view = client.terminate(request_id)
        err.print(f"terminating request {request_id} ({view.state})", markup=False)
    else:
        err.print(f"request {request_id} keeps going", markup=False)
