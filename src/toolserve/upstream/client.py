"""Talking to an upstream OpenAI-compatible server: one client per upstream server (a client's
requests straight to the aiohttp transport, health probes and `/tokenize` through httpx's
client), its health, and what can go wrong mapped to our errors.

- Health: `/health` (or `/v1/models` where `/health` is a 404) at start, then every
  `health_interval` seconds while up and every second while down. A connection that cannot be
  made during a request marks the upstream down at once. While down, requests fail fast
  (503 `upstream_unavailable`); the first good check serves them again.
- Retries: only a connection that could not be made (nothing was sent) is tried again, twice,
  then the upstream is down. Nothing is re-sent once the request may have reached the upstream.
- The timeout is the longest wait for the upstream's next bytes: its first byte (for a
  non-streaming request, the whole generation), or the next chunk of a stream (504).
- The upstream's 4xx answers reach the client with their status and message; its 5xx become a
  502 carrying its message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, overload
from urllib.parse import urlsplit, urlunsplit

import httpx

from toolserve.config import UpstreamConfig
from toolserve.errors import (
    ShuttingDown,
    ToolserveError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from toolserve.upstream.transport import AiohttpTransport

log = logging.getLogger(__name__)

CONNECT_RETRY_DELAYS = (0.25, 0.5)  # seconds before the 2nd and 3rd attempt to connect
PROBE_TIMEOUT = 5.0  # seconds a health probe may take
DOWN_INTERVAL = 1.0  # seconds between health checks while the upstream is down
DRAIN_TIMEOUT = 1.0  # seconds a stream's end may take to arrive after its [DONE] before it is cut


_EOL = re.compile(rb"\r\n|\r|\n")
MAX_SSE_LINE = 16 << 20  # bytes an upstream's event line may hold (a whole answer's JSON is far less)


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of an SSE stream, ended by CRLF, LF or CR as the SSE spec says, cut as bytes (no
    UTF-8 character holds those bytes). httpx's `aiter_lines` cuts where `str.splitlines` does,
    so a U+2028, U+2029 or U+0085 that a model wrote, which JSON leaves unescaped, broke an
    event's JSON in two; it also decodes each chunk through two more layers. A line is joined
    once, when its end arrives, and one longer than MAX_SSE_LINE is an error."""
    pending: list[bytes] = []  # the start of a line whose end has not arrived
    size = 0
    after_cr = False  # the last chunk ended in CR: an LF that starts the next one ends no line
    async for chunk in chunks:
        if after_cr and chunk[:1] == b"\n":
            chunk, after_cr = chunk[1:], False
        if not chunk:
            continue  # an empty chunk changes nothing, not even a CR just read
        after_cr = chunk[-1:] == b"\r"
        if b"\n" not in chunk and b"\r" not in chunk:
            pending.append(chunk)
            size += len(chunk)
            if size > MAX_SSE_LINE:
                raise UpstreamError(f"The upstream server sent an event line longer than {MAX_SSE_LINE >> 20} MiB.")
            continue
        *lines, rest = _EOL.split(b"".join([*pending, chunk]) if pending else chunk)
        pending, size = ([rest], len(rest)) if rest else ([], 0)
        for line in lines:
            yield line.decode("utf-8", "replace")
    if pending:
        yield b"".join(pending).decode("utf-8", "replace")


def root_url(url: str) -> str:
    """The server root: 'http://h:8000/v1/' -> 'http://h:8000'."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def safe_url(url: str) -> str:
    """The URL without user:password, for logs and listings."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    kinds: dict[type[BaseException], str] = {
        httpx.ConnectError: "cannot connect",
        httpx.ConnectTimeout: "connection timed out",
        httpx.ReadTimeout: "no answer in time",
        httpx.RemoteProtocolError: "the connection broke",
        httpx.ReadError: "the connection broke",
    }
    kind = kinds.get(type(exc), type(exc).__name__)
    return f"{kind} ({text})" if text else kind


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _mend(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_mend(k): _mend(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mend(v) for v in value]
    return value


def loads(data: str | bytes) -> Any:
    """An upstream's JSON, with lone surrogates (a `\\ud800` escape pairing with nothing)
    replaced by U+FFFD: our answers are UTF-8, which cannot hold them."""
    obj = json.loads(data)
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    return _mend(obj) if _ESCAPED_SURROGATE.search(text) else obj


def error_from_body(status: int, body: bytes, headers: httpx.Headers | None = None) -> UpstreamError:
    """An upstream's error answer as our error: OpenAI's shape, vLLM's older flat shape,
    FastAPI's `detail`, or plain text."""
    message, type_, param, code = "", None, None, None
    try:
        data: Any = loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            message = str(err.get("message") or "")
            type_, param, code = err.get("type"), err.get("param"), err.get("code")
        elif isinstance(err, str):
            message = err
        elif "message" in data:  # vLLM before 0.6: {"object": "error", "message", "type", "code"}
            message, type_, code = str(data["message"]), data.get("type"), data.get("code")
        elif "detail" in data:  # FastAPI
            detail = data["detail"]
            message = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)[:500]
    if not message:
        message = body.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    extra = {k: headers[k] for k in ("retry-after",) if headers is not None and k in headers}
    if status >= 500:
        return UpstreamError(f"The upstream server failed (HTTP {status}): {message}", status=502, headers=extra or None)
    return UpstreamError(
        message,
        status=status,
        type_=type_ if isinstance(type_, str) else None,
        param=param if isinstance(param, str) else None,
        code=code if isinstance(code, str) else None,
        headers=extra or None,
    )


def _verify(value: bool | str) -> bool | ssl.SSLContext:
    if isinstance(value, str):
        return ssl.create_default_context(cafile=value)
    return value


class UpstreamClient:
    """HTTP to one upstream server, and whether it is up."""

    def __init__(self, cfg: UpstreamConfig, name: Callable[[], str] | None = None):
        self.url = root_url(cfg.url)
        self._name = name or (lambda: safe_url(cfg.url))  # our model id, for messages
        self.timeout = cfg.timeout
        self.interval = cfg.health_interval
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        timeout = httpx.Timeout(cfg.timeout, connect=min(cfg.timeout, 10.0))
        self.transport = AiohttpTransport(_verify(cfg.verify_tls))
        self.http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=self.transport,
            trust_env=False,  # never through a proxy from the environment (its transport would bypass ours)
        )
        # a client's requests (`open`) go to the transport as httpx would send them, without its client
        self._post_headers = [*self.http.headers.multi_items(), ("content-type", "application/json")]
        self._timeouts = timeout.as_dict()
        self.healthy: bool | None = None  # None: not checked yet (requests are tried)
        self.error: str | None = None
        self.checked_at: float | None = None
        self.models: list[dict[str, Any]] = []  # the upstream's /v1/models data
        self._task: asyncio.Task[None] | None = None
        self._open: set[httpx.Response] = set()  # responses being read, closed by abort_all
        self._aborted = False
        self._closing: set[asyncio.Future[None]] = set()
        self.on_down: Callable[[], None] | None = None  # told when it goes down (the pool forgets its prefixes)

    # -- health ----------------------------------------------------------------------------
    def _set(self, ok: bool, error: str | None) -> None:
        if ok and self.healthy is not True:
            log.info("upstream %s (%s) is up", self._name(), safe_url(self.url))
        elif not ok and self.healthy is not False:
            log.warning("upstream %s (%s) is down: %s", self._name(), safe_url(self.url), error)
            if self.on_down is not None:
                self.on_down()
        self.healthy, self.error, self.checked_at = ok, None if ok else error, time.time()

    def mark_down(self, error: str) -> None:
        self._set(False, error)

    async def check(self) -> bool:
        """Probe /health (or /v1/models), and refresh the upstream's model list."""
        try:
            r = await self.http.get("/health", timeout=PROBE_TIMEOUT)
            models = None
            if r.status_code == 404:  # llama-cpp-python's server, OpenAI itself: no /health
                r = await self.http.get("/v1/models", timeout=PROBE_TIMEOUT)
                models = r
            ok = 200 <= r.status_code < 300
            error = None if ok else f"its health check answered HTTP {r.status_code}"
            if ok and models is None:
                with contextlib.suppress(httpx.HTTPError):
                    models = await self.http.get("/v1/models", timeout=PROBE_TIMEOUT)
            if ok and models is not None and models.status_code == 200:
                with contextlib.suppress(ValueError, AttributeError):
                    data = models.json().get("data")
                    if isinstance(data, list):
                        self.models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        except httpx.HTTPError as exc:
            ok, error = False, describe(exc)
        self._set(ok, error)
        return ok

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval if self.healthy else min(DOWN_INTERVAL, self.interval))
            try:
                await self.check()
            except Exception:  # a health loop must not die
                log.exception("health check of upstream %s failed", self._name())

    async def start(self) -> None:
        await self.check()
        self._task = asyncio.create_task(self._watch())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.http.aclose()

    def unavailable(self) -> UpstreamUnavailable:
        why = self.error or "it has not answered yet"
        return UpstreamUnavailable(
            f"The model '{self._name()}' is unavailable: its upstream server cannot be reached ({why}). "
            f"toolserve checks it every {DOWN_INTERVAL:g} s and serves the model again as soon as it answers.",
        )

    def require(self) -> None:
        if self.healthy is False:
            raise self.unavailable()

    # -- requests --------------------------------------------------------------------------
    @overload
    async def open(self, path: str, body: dict[str, Any]) -> httpx.Response: ...
    @overload
    async def open(self, path: str, body: dict[str, Any], failover: bool) -> httpx.Response | None: ...

    async def open(self, path: str, body: dict[str, Any], failover: bool = False) -> httpx.Response | None:
        """POST and return the response once its headers arrived and its status is 2xx
        (the body is read by the caller: `read_json` or `sse`). Errors are ours. `failover`:
        another upstream can take the request, so one that cannot be connected to is marked
        down at once and None returned (no retries)."""
        self.require()
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()  # as httpx's `json=`
        resp = None
        for attempt in range(len(CONNECT_RETRY_DELAYS) + 1):
            try:
                resp = await self.transport.send("POST", self.url + path, self._post_headers, data, self._timeouts)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent: safe to try again
                if failover or attempt == len(CONNECT_RETRY_DELAYS):
                    self.mark_down(describe(exc))
                    if failover:
                        return None
                    raise self.unavailable() from None
                await asyncio.sleep(CONNECT_RETRY_DELAYS[attempt])
            except httpx.TimeoutException:
                raise self._timeout() from None
            except httpx.HTTPError as exc:
                raise UpstreamError(f"The upstream server failed: {describe(exc)}") from None
        assert resp is not None
        if log.isEnabledFor(logging.DEBUG):  # safe_url parses the URL: not on every request for nothing
            log.debug("upstream request: POST %s%s %d", safe_url(self.url), path, resp.status_code)
        if self.healthy is None:
            self._set(True, None)
        if resp.status_code >= 400:
            try:
                data = await resp.aread()
            except httpx.HTTPError:
                data = b""
            finally:
                await resp.aclose()
            raise error_from_body(resp.status_code, data, resp.headers)
        return resp

    def _timeout(self) -> UpstreamTimeout:
        return UpstreamTimeout(f"The upstream server of model '{self._name()}' sent nothing for {self.timeout:g} s (its timeout).")

    def _broken(self, exc: BaseException) -> ToolserveError:
        if self._aborted:
            return ShuttingDown("The server shut down before this request finished.")
        if isinstance(exc, httpx.TimeoutException):
            return self._timeout()
        return UpstreamError(f"The upstream server broke off the answer: {describe(exc)}")

    async def read_json(self, resp: httpx.Response) -> dict[str, Any]:
        self._open.add(resp)
        try:
            data = await resp.aread()
        except httpx.HTTPError as exc:
            raise self._broken(exc) from None
        finally:
            self._open.discard(resp)
            await resp.aclose()
        try:
            body = loads(data)
        except ValueError:
            raise UpstreamError("The upstream server answered with something that is not JSON.") from None
        if not isinstance(body, dict):
            raise UpstreamError("The upstream server answered with JSON that is not an object.")
        return body

    async def sse(self, resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of an SSE stream, up to `[DONE]`. An error event from the upstream
        is raised as our error; a stream cut short, or silent past the timeout, too."""
        self._open.add(resp)
        done = False
        lines = sse_lines(resp.aiter_bytes())  # decoded, if the upstream compressed it
        try:
            async for line in lines:
                if not line.startswith("data:"):
                    continue  # comments (pings), event names, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    await self._drain(lines)
                    break
                try:
                    obj = loads(data)
                except ValueError:
                    raise UpstreamError("The upstream server sent an event that is not JSON.") from None
                if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
                    err = obj["error"]
                    raise error_from_body(502, json.dumps({"error": err}).encode())
                if isinstance(obj, dict):
                    yield obj
        except httpx.HTTPError as exc:
            raise self._broken(exc) from None
        finally:
            self._open.discard(resp)
            await resp.aclose()
        if not done and self._aborted:
            raise ShuttingDown("The server shut down before this request finished.")

    @staticmethod
    async def _drain(lines: AsyncIterator[str]) -> None:
        """Read a stream on to its end after `[DONE]` (its last chunk, at once from a server that
        ends there): a response read to its end leaves its connection for the next request,
        one closed early takes it down, and every stream would open a new one."""
        async def to_end() -> None:
            async for _ in lines:
                pass

        with contextlib.suppress(asyncio.TimeoutError, httpx.HTTPError):  # asyncio's own before 3.11
            await asyncio.wait_for(to_end(), DRAIN_TIMEOUT)

    def abort_all(self) -> None:
        """End every answer being read (shutdown grace over): their readers get an error."""
        self._aborted = True
        for resp in list(self._open):
            task = asyncio.ensure_future(resp.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
