"""The upstream client over aiohttp (upstream/transport.py) against servers that misbehave at
every point of an exchange: each failure reaches the client as our error (the 502, 503 or 504
that client.py makes of httpx's errors), never as an aiohttp exception that would be a 500; and
a response left before its end closes its connection (the upstream sees the client go), while
one read to its end leaves it for the next request."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import pytest

from tests.stub_http import read_request
from tests.unit.test_upstream_streams_end import chunk
from toolserve.config import UpstreamConfig
from toolserve.errors import ToolserveError, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from toolserve.upstream.client import UpstreamClient
from toolserve.upstream.transport import _httpx_error

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def answering(raw: bytes, then: str = "close") -> Handler:
    """A server that reads one request, writes `raw`, then closes or stalls."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            await read_request(r)
            w.write(raw)
            await w.drain()
            if then == "stall":
                await asyncio.sleep(30)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    return handle


def sse(*events: bytes) -> bytes:
    body = b"".join(chunk(e) for e in events)
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + body


EVENT = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'

# (what the server does, how the client reads, the error the client gets)
CASES = [
    ("not HTTP", answering(b"HELLO THERE\r\n\r\n"), "json", UpstreamError),
    ("closed before answering", answering(b""), "json", UpstreamError),
    ("a body cut short", answering(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"choices\""), "json", UpstreamError),
    ("a body that is not JSON", answering(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc"), "json", UpstreamError),
    ("headers, then nothing", answering(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n", then="stall"), "json", UpstreamTimeout),
    ("nothing at all", answering(b"", then="stall"), "json", UpstreamTimeout),
    ("a stream cut mid-chunk", answering(sse(EVENT)[:-12]), "sse", UpstreamError),
    ("a stream cut between events", answering(sse(EVENT)), "sse", UpstreamError),
    ("a stream that stalls", answering(sse(EVENT), then="stall"), "sse", UpstreamTimeout),
    ("a bad chunk size", answering(sse(EVENT) + b"zz\r\n"), "sse", UpstreamError),
    ("a 500 with no body", answering(b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n"), "json", UpstreamError),
]


async def exchange(handler: Handler, how: str) -> BaseException | None:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = UpstreamClient(UpstreamConfig(url=f"http://127.0.0.1:{port}", timeout=1.0))
    try:
        resp = await client.open("/v1/chat/completions", {"stream": how == "sse"})
        if how == "json":
            await client.read_json(resp)
        else:
            async for _ in client.sse(resp):
                pass
    except Exception as exc:
        return exc
    finally:
        await client.close()
        srv.close()
    return None


@pytest.mark.parametrize("what,handler,how,error", CASES, ids=[c[0] for c in CASES])
def test_a_misbehaving_upstream_is_our_error(what: str, handler: Handler, how: str, error: type[ToolserveError]) -> None:
    got = asyncio.run(exchange(handler, how))
    assert isinstance(got, error), f"{what}: {got!r}"


def test_a_refused_connection_marks_the_upstream_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once it is closed

    async def run() -> tuple[Any, bool | None]:
        client = UpstreamClient(UpstreamConfig(url=f"http://127.0.0.1:{port}"))
        try:
            got = await client.open("/v1/chat/completions", {}, failover=True)
            return got, client.healthy
        finally:
            await client.close()

    got, healthy = asyncio.run(run())
    assert got is None and healthy is False

    async def without_failover() -> BaseException | None:
        client = UpstreamClient(UpstreamConfig(url=f"http://127.0.0.1:{port}"))
        try:
            await client.open("/v1/chat/completions", {})
        except Exception as exc:
            return exc
        finally:
            await client.close()
        return None

    assert isinstance(asyncio.run(without_failover()), UpstreamUnavailable)


class Counting:
    """Answers every request on a connection with the same SSE stream, its first event at once
    and the rest 0.1 s later; counts connections and the ones the client closed."""

    def __init__(self) -> None:
        self.connections = 0
        self.closed = 0

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await read_request(r)
                stream = sse(EVENT, EVENT, b"data: [DONE]\n\n") + b"0\r\n\r\n"
                head = stream.index(EVENT) + len(EVENT) + 2
                w.write(stream[:head])  # the first event, then the rest a moment later
                await w.drain()
                await asyncio.sleep(0.1)
                w.write(stream[head:])
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed += 1
        finally:
            w.close()


def test_a_response_left_early_closes_its_connection_and_one_read_through_keeps_it() -> None:
    server = Counting()

    async def run() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        client = UpstreamClient(UpstreamConfig(url=f"http://127.0.0.1:{port}"))
        try:
            for _ in range(3):  # read through: one connection
                resp = await client.open("/v1/chat/completions", {"stream": True})
                assert len([o async for o in client.sse(resp)]) == 2
            assert (server.connections, server.closed) == (1, 0)
            resp = await client.open("/v1/chat/completions", {"stream": True})
            stream = client.sse(resp)
            await stream.__anext__()
            await stream.aclose()  # a client that hangs up after its first event
            for _ in range(50):
                if server.closed:
                    break
                await asyncio.sleep(0.02)
            assert server.closed == 1
            resp = await client.open("/v1/chat/completions", {"stream": True})  # a new connection
            assert len([o async for o in client.sse(resp)]) == 2
            assert server.connections == 2
        finally:
            await client.close()
            srv.close()

    asyncio.run(run())


@pytest.mark.parametrize("exc,expected", [
    (aiohttp.ConnectionTimeoutError("connect"), httpx.ConnectTimeout),
    (aiohttp.SocketTimeoutError("read"), httpx.ReadTimeout),
    (aiohttp.ServerTimeoutError("read"), httpx.ReadTimeout),
    (asyncio.TimeoutError(), httpx.ReadTimeout),
    (aiohttp.ServerDisconnectedError(), httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError("cut"), httpx.RemoteProtocolError),
    (aiohttp.InvalidURL("x"), httpx.UnsupportedProtocol),
    (aiohttp.ClientOSError(104, "reset"), httpx.ReadError),
    (ConnectionResetError(104, "reset"), httpx.ReadError),
    (ValueError("not ours"), type(None)),
])
def test_aiohttp_errors_become_the_httpx_errors_that_say_what_happened(exc: BaseException, expected: type) -> None:
    assert type(_httpx_error(exc)) is expected



@pytest.mark.parametrize(
    ("url", "key", "auth"),
    [
        ("http://127.0.0.1:{port}/v1", "sk-1", "Bearer sk-1"),
        ("http://user:pa%3Ass@127.0.0.1:{port}", None, "Basic dXNlcjpwYTpzcw=="),  # user:pa:ss
        ("http://127.0.0.1:{port}", None, None),
    ],
)
def test_what_a_request_sends_upstream(url: str, key: str | None, auth: str | None) -> None:
    """A client's request goes to the transport without httpx's client: its API key (or the
    URL's user and password), a JSON content type and httpx's compact JSON still reach the server."""
    seen: dict[str, Any] = {}

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        line, headers, body = await read_request(r)
        seen.update(line=line, headers=headers, body=body)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await w.drain()
        w.close()

    async def run() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = UpstreamClient(UpstreamConfig(url=url.format(port=srv.sockets[0].getsockname()[1]), api_key=key))
        try:
            assert await client.read_json(await client.open("/v1/chat/completions", {"model": "m", "text": "é"})) == {}
        finally:
            await client.close()
            srv.close()

    asyncio.run(run())
    assert seen["line"] == "POST /v1/chat/completions HTTP/1.1"
    assert seen["headers"].get("authorization") == auth
    assert seen["headers"]["content-type"] == "application/json"
    assert seen["body"] == '{"model":"m","text":"é"}'.encode()
