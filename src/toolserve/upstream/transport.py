"""The upstream client's HTTP transport: aiohttp's connections, answering with httpx's responses
(upstream/client.py): `send` for the requests that carry a client's work, httpx's transport
interface for the rest (health probes, `/tokenize`).

httpx reads a response through httpcore, h11 and anyio, a few Python layers per chunk; aiohttp
parses HTTP in C. Behind this transport the front takes about 40% less CPU per streamed upstream
chunk and about a quarter less per request (bench/README.md, issue 42), CPU that a front sharing
its machine with vLLM takes from vLLM. Every aiohttp error becomes the httpx error that says what
happened (`_httpx_error`), so client.py's handling of errors is the same as over httpcore's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx

# seconds an idle connection is kept: under the 5 s after which uvicorn (vLLM, toolserve) and
# llama-server close theirs, so that a request is not sent on a connection the server is closing
KEEPALIVE = 4.0


def _httpx_error(exc: BaseException) -> httpx.HTTPError | None:
    """The httpx error for an aiohttp one (None: not an HTTP error). Most specific first:
    aiohttp's connect timeout is a server timeout, and both are asyncio's TimeoutError."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(text)
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return httpx.ReadTimeout(text)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unreachable, DNS, TLS handshake
        return httpx.ConnectError(text)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return httpx.RemoteProtocolError(text)  # closed early, a body cut short, not HTTP
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(text)
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return httpx.ReadError(text)
    return None


@contextlib.contextmanager
def _as_httpx() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = _httpx_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


class _Body(httpx.AsyncByteStream):
    """A response's body as it arrives; closing it before its end closes the connection (the
    upstream sees the client go), after its end leaves the connection for the next request."""

    def __init__(self, resp: aiohttp.ClientResponse):
        self._resp = resp

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx():
            async for chunk in self._resp.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to one upstream, no proxy from the environment, no connection limit, bodies as
    they are sent (httpx decodes a compressed one)."""

    def __init__(self, verify: bool | ssl.SSLContext = True):
        self._ssl = verify
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on the event loop that uses it
            connector = aiohttp.TCPConnector(limit=0, ssl=self._ssl, keepalive_timeout=KEEPALIVE)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.send(request.method, str(request.url), request.headers.multi_items(), await request.aread() or None,
                               request.extensions.get("timeout", {}))
        resp.request = request
        return resp

    async def send(self, method: str, url: str, headers: list[tuple[str, str]], data: bytes | None,
                   timeout: dict[str, float | None]) -> httpx.Response:
        """A request sent as it is, its response once its headers arrived (the body is read from
        it): what httpx's client adds on the way (its URL and header models, auth, redirects,
        cookies) cost a fifth of the front's CPU on a request, so the requests that carry a
        client's work come here directly (UpstreamClient.open)."""
        with _as_httpx():
            resp = await self._client().request(
                method,
                url,
                headers=headers,
                data=data,
                allow_redirects=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=timeout.get("pool"), sock_connect=timeout.get("connect"),
                                              sock_read=timeout.get("read")),
            )
        return httpx.Response(
            resp.status,
            headers=resp.raw_headers,
            stream=_Body(resp),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (resp.reason or "").encode()},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
