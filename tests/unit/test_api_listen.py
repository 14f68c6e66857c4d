"""The API's listening socket: connections accepted on it send small writes at once.

An answer goes out as two writes (headers, then body). With Nagle's algorithm on, the second
waits for the client's ACK of the first, which a client delays by up to 40 ms: every request
on a kept-alive connection after the first took 44 ms here. asyncio turns Nagle off only on a
socket that names TCP as its protocol, so the API's socket must be made that way."""

from __future__ import annotations

import asyncio
import socket

from corral.services.cli.requests_cmd import _listen


def test_connections_accepted_on_the_api_socket_have_nagle_off() -> None:
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def serve() -> None:
        listener = _listen("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        port = listener.getsockname()[1]
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(200):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()
        listener.close()

    asyncio.run(serve())
    assert seen == [1]


def test_the_api_socket_names_tcp_where_a_plain_one_says_0() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as plain, _listen("127.0.0.1", 0) as api:
        assert (plain.proto, api.proto) == (0, socket.IPPROTO_TCP)
