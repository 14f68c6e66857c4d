"""The API's HTTP server: uvicorn, with guards its defaults lack.

uvicorn times out an idle kept-alive connection, but not a client that sends one header line
every ten seconds, nor a body that trickles: a thousand such clients held a thousand
connections for minutes (issue #27). :class:`GuardedHttpProtocol` gives every request a
deadline for its headers (from its first byte) and then one for its body, and closes the
connection with ``408 Request Timeout`` past either; a header section larger than
:data:`MAX_HEADER_BYTES` is answered ``400`` and the connection closed; ``limit_concurrency``
answers 503 past a number of connections and requests in flight.

The protocol is uvicorn's httptools one (llhttp, a C parser): a request that does nothing
(``/healthz``) cost the API about a quarter less CPU than with the pure-Python h11 parser
(docs/benchmarks.md, "The API's HTTP floor").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    import uvicorn

    from corral.services.settings import Settings

MAX_HEADER_BYTES = 16 * 1024  # a request line and headers larger than this: 400
_TOO_SLOW = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a header deadline and a body deadline per request, and a
    bound on the bytes of a header section."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0
    max_header_bytes = MAX_HEADER_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None  # "headers" | "body"
        self._guarded_cycle: Any = None  # the cycle whose body the body deadline guards
        self._header_bytes = 0  # of the header section still coming in

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers", self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm("headers", self.header_timeout_s)  # a new request on a kept connection
        super().data_received(data)
        if self.transport.is_closing():
            return  # a malformed request, answered 400 by the parser's side
        self._advance()
        # Counted once the parser had the bytes: a chunk that completed the headers may carry
        # a body too, which is not the header section's. The parser keeps what it has of an
        # unfinished section, so that is bounded by the limit and one read.
        if self._waiting_for != "headers":
            self._header_bytes = 0
            return
        self._header_bytes += len(data)
        if self._header_bytes > self.max_header_bytes:
            self._disarm()
            self.logger.warning("closing a connection: its request's headers are too large")
            self.send_400_response("Request headers too large.")

    def on_response_complete(self) -> None:
        self._disarm()
        super().on_response_complete()

    def _advance(self) -> None:
        """Headers in: the body's deadline starts; the body in: no deadline until the next."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        if self._waiting_for == "headers" or cycle is not self._guarded_cycle:
            self._guarded_cycle = cycle
            if cycle.more_body:
                self._arm("body", self.body_timeout_s)
            else:
                self._disarm()
        elif self._waiting_for == "body" and not cycle.more_body:
            self._disarm()

    def _arm(self, what: str, after_s: float) -> None:
        self._disarm()
        self._waiting_for = what
        self._deadline = self.loop.call_later(after_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._waiting_for = None

    def _too_slow(self) -> None:
        what, self._deadline, self._waiting_for = self._waiting_for, None, None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if what == "body" and cycle is not None:
            cycle.disconnected = True  # the route reading it sees the client gone
        self.logger.warning("closing a connection: the request's %s came too slowly", what)
        # Answered only where no answer has begun (an idle connection, headers or a body
        # still coming in while the route has not started its response).
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(_TOO_SLOW)
        self.transport.close()


def server_config(app: Any, settings: Settings, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config for the API with the settings' guards."""
    import uvicorn

    protocol = type(
        "CorralHttpProtocol",
        (GuardedHttpProtocol,),
        {
            "header_timeout_s": settings.api_header_timeout_s,
            "body_timeout_s": settings.api_body_timeout_s,
        },
    )
    return uvicorn.Config(
        app,
        http=protocol,
        limit_concurrency=settings.api_max_concurrency,
        timeout_keep_alive=settings.api_keep_alive_s,
        **kwargs,
    )
