"""A ceiling on request bodies, enforced before any route reads one.

A body larger than ``max_body_bytes`` is refused with 413 whether it announces its length
(``Content-Length``) or streams it (chunked): the stream is counted as it is read and cut off
at the ceiling, so nothing larger is ever held in memory. Pure ASGI: it wraps the app.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024  # a task or pool file is kilobytes; a log chunk 256 KiB


class BodyTooLarge(Exception):
    """The body went past the ceiling while it was read."""


class BodyLimit:
    """ASGI middleware: 413 for a body over ``max_body_bytes``."""

    def __init__(self, app: App, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        detail = f"the request body is over {self.max_body_bytes} bytes"
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
