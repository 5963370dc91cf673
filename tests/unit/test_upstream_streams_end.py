"""An upstream's stream read to its end keeps its connection: a server that answers with
keep-alive (vLLM's uvicorn, toolserve) sees one connection for many streamed requests. Before,
the reader stopped at `data: [DONE]` and closed the response with its last chunk unread, and
httpx closed the connection with it: every streamed request (and every request in raw mode,
which always streams) opened a new one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.stub_http import read_request
from toolserve.config import UpstreamConfig
from toolserve.upstream import client as client_mod
from toolserve.upstream.client import UpstreamClient


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class KeepAlive:
    """An HTTP/1.1 server that streams `n` SSE events and [DONE] on every POST, keeps its
    connections open, and counts them. `tail`: what it sends after [DONE] (by default, the end
    of the body; None: a stream that never ends)."""

    def __init__(self, n: int = 3, tail: bytes | None = b"0\r\n\r\n"):
        self.n, self.tail, self.connections = n, tail, 0

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await read_request(r)
                w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                for k in range(self.n):
                    w.write(chunk(b"data: " + json.dumps({"k": k, "choices": []}).encode() + b"\n\n"))
                w.write(chunk(b"data: [DONE]\n\n"))
                await w.drain()
                if self.tail is None:
                    while True:  # on and on, never ending the body
                        w.write(chunk(b": ping\n\n"))
                        await w.drain()
                        await asyncio.sleep(0.01)
                w.write(self.tail)
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()


async def read_streams(server: KeepAlive, requests: int) -> list[list[Any]]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = UpstreamClient(UpstreamConfig(url=f"http://127.0.0.1:{port}"))
    try:
        got = []
        for _ in range(requests):
            resp = await client.open("/v1/chat/completions", {"stream": True})
            got.append([obj["k"] async for obj in client.sse(resp)])
        return got
    finally:
        await client.close()
        srv.close()


def test_streams_read_to_their_end_share_one_connection() -> None:
    server = KeepAlive()
    got = asyncio.run(read_streams(server, 5))
    assert got == [[0, 1, 2]] * 5
    assert server.connections == 1


def test_a_stream_that_goes_on_after_done_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that sends on after [DONE] does not hold the answer: it ends, its connection is
    dropped, and the next request gets a new one."""
    monkeypatch.setattr(client_mod, "DRAIN_TIMEOUT", 0.2, raising=False)
    server = KeepAlive(tail=None)
    got = asyncio.run(read_streams(server, 2))
    assert got == [[0, 1, 2]] * 2
    assert server.connections == 2
