"""The listening socket: connections accepted on it send small writes at once (TCP_NODELAY)."""

from __future__ import annotations

import asyncio
import socket

from toolserve.cli import _bind


def test_accepted_connections_have_nagle_off() -> None:
    async def run() -> int:
        sock = _bind("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        try:
            return await accepted
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    # with Nagle on, every small write after the first on a kept-alive connection (a response,
    # an SSE chunk) waited for the client's delayed ACK: about 40 ms each
    assert asyncio.run(run()) != 0
