"""A ceiling on request bodies, enforced before any route reads one.

A body larger than ``max_body_bytes`` is refused with 413 whether it announces its length
(``Content-Length``, refused before a byte is read) or streams it (chunked: read here, up to
the ceiling, before any route sees it), so nothing larger is ever held in memory and no route
answers before the body was judged. Pure ASGI: it wraps the app.
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


class BodyLimit:
    """ASGI middleware: 413 for a body over ``max_body_bytes``."""

    def __init__(
        self,
        app: App,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        larger: dict[str, int] | None = None,
    ) -> None:
        """``larger``: path prefixes with a ceiling of their own (task bundles)."""
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.larger = dict(larger or {})

    def _ceiling(self, scope: Scope) -> int:
        path = str(scope.get("path", ""))
        return next(
            (cap for prefix, cap in self.larger.items() if path.startswith(prefix)),
            self.max_body_bytes,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ceiling = self._ceiling(scope)
        declared = _content_length(scope)
        if declared is not None and declared > ceiling:
            await self._refuse(send, ceiling)
            return
        if declared is None and scope.get("method") not in ("GET", "HEAD"):
            # A streamed body: read it here (up to the ceiling) before any route sees it.
            messages = await self._read_stream(receive, ceiling)
            if messages is None:
                await self._refuse(send, ceiling)
                return
            receive = _replay(messages, receive)
        await self.app(scope, receive, send)

    async def _read_stream(self, receive: Receive, ceiling: int) -> list[Message] | None:
        """The body's messages, or None once it went past the ceiling."""
        messages, seen = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages  # the client went away: let the app see it
            seen += len(message.get("body", b""))
            if seen > ceiling:
                return None
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, send: Send, ceiling: int) -> None:
        detail = f"the request body is over {ceiling} bytes"
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out the messages already read, then the client's own."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
