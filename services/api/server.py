"""The API's HTTP server: uvicorn, with guards its defaults lack.

uvicorn times out an idle kept-alive connection, but not a client that sends one header line
every ten seconds, nor a body that trickles: a thousand such clients held a thousand
connections for minutes (issue #27). :class:`GuardedH11Protocol` gives every request a
deadline for its headers (from its first byte) and then one for its body, and closes the
connection with ``408 Request Timeout`` past either; ``limit_concurrency`` answers 503 past a
number of connections and requests in flight.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    import uvicorn

    from corral.services.settings import Settings


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a body deadline per request."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None  # "headers" | "body"
        self._guarded_cycle: Any = None  # the cycle whose body the body deadline guards

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
        self._advance()

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
        if what == "body" and self.cycle is not None:
            self.cycle.disconnected = True  # the route reading it sees the client gone
        self.logger.warning("closing a connection: the request's %s came too slowly", what)
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                response = h11.Response(
                    status_code=408, headers=[(b"connection", b"close")], reason=b"Request Timeout"
                )
                self.transport.write(self.conn.send(response))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
            except h11.LocalProtocolError:
                pass
        self.transport.close()


def server_config(app: Any, settings: Settings, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config for the API with the settings' guards."""
    import uvicorn

    protocol = type(
        "CorralH11Protocol",
        (GuardedH11Protocol,),
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
        h11_max_incomplete_event_size=16 * 1024,  # headers larger than this: 400
        **kwargs,
    )
