"""Talking to MCP servers through the official SDK (`mcp`): listing tools and calling them.

A remote server (Streamable HTTP or SSE) gets a fresh connection per operation: nothing is
held between requests, and a request's headers live only as long as its calls. A stdio server
of the config is started on first use and kept (its tools may hold state, and starting a
process per call is slow); it is started again when it has died, and stopped with the server.

Every operation is bounded by `McpPolicy.timeout`. A failure never escapes as an exception of
the SDK: listing raises `McpFailure`, a call returns an error result, each with a message of
ours that names neither the URL (it may carry a token in its query) nor a header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolserve.config import ConfigError
from toolserve.errors import ToolserveError
from toolserve.mcp.config import McpServer, load_mcp_config

log = logging.getLogger(__name__)
MAX_PAGES = 20  # tools/list pages read at most: a server whose cursor never ends cannot hang a request

# the SDK's HTTP client logs each request's URL at info level and the SDK some failures with
# their URL: a query string or a header may carry a token, so they stay quiet
for _name in ("httpx2", "httpcore2", "mcp", "mcp_types"):
    logging.getLogger(_name).setLevel(logging.ERROR)


@dataclass(frozen=True)
class McpPolicy:
    """`toolserve serve` flags for MCP."""

    allow_urls: bool = False  # --allow-mcp: connect to MCP servers a request names by URL
    allow_private: bool = False  # --allow-private-urls: also loopback and private addresses
    timeout: float = 30.0  # --mcp-timeout: seconds for one operation (connect, list or call)
    max_output: int = 100_000  # --mcp-max-output: characters of a call's output the model gets


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema,
                "annotations": self.annotations}


class McpFailure(Exception):
    """An operation that failed, as the Responses API reports it (`McpToolCallError`)."""

    def __init__(self, kind: str, code: int, message: str):
        super().__init__(message)
        self.kind, self.code, self.message = kind, code, message

    def as_error(self) -> dict[str, Any]:
        return {"type": self.kind, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class CallResult:
    """A call's `output` (text for the model and the client) or its `error` (the Responses
    API's `McpToolCallError`); `text` is what the model reads either way."""

    output: str | None
    error: dict[str, Any] | None
    text: str


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside task-group exception groups."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def failure_of(exc: BaseException, label: str, timeout: float) -> McpFailure:
    """Our description of an SDK or transport failure: no URL, no header."""
    import httpx2
    from mcp.shared.exceptions import MCPError

    exc = _leaf(exc)
    where = f"the MCP server '{label}'"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | httpx2.TimeoutException):
        return McpFailure("http_error", 504, f"{where} did not answer within {timeout:g} s")
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        return McpFailure("http_error", status, f"{where} answered HTTP {status}")
    if isinstance(exc, httpx2.TransportError | OSError):
        return McpFailure("http_error", 502, f"cannot reach {where} ({type(exc).__name__})")
    if isinstance(exc, MCPError):
        return McpFailure("mcp_protocol_error", exc.code, f"{where}: {exc.message[:500]}")
    return McpFailure("mcp_protocol_error", -32603, f"{where} failed ({type(exc).__name__})")


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind == "resource":
        res = block.resource
        return str(getattr(res, "text", None) or f"[resource {res.uri} ({getattr(res, 'mime_type', None) or 'binary'})]")
    if kind == "resource_link":
        return f"[resource {block.uri}]"
    return f"[{kind} ({getattr(block, 'mime_type', '')})]"  # image, audio: a local text model cannot read them


def result_text(content: list[Any], structured: Any) -> str:
    """A tool result as text: its content blocks, else its structured content as JSON."""
    if content:
        return "\n".join(_block_text(b) for b in content)
    return json.dumps(structured, ensure_ascii=False) if structured is not None else ""


def capped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output cut: {len(text) - limit} more characters]"


class _Kept:
    """A stdio server, running while the server does: its client lives in a task of its own
    (the SDK's transport is a task group, which must be left by the task that entered it)."""

    def __init__(self, server: McpServer):
        self.server = server
        self.client: Any = None
        self.task: asyncio.Task[None] | None = None
        self.stop = asyncio.Event()
        self.lock = asyncio.Lock()

    async def get(self, timeout: float) -> Any:
        async with self.lock:
            if self.client is not None and self.task is not None and not self.task.done():
                return self.client
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.stop = asyncio.Event()
            self.task = asyncio.create_task(self._own(ready))
            try:
                self.client = await asyncio.wait_for(asyncio.shield(ready), timeout)
            except BaseException:
                await self.close()
                raise
            return self.client

    async def _own(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client, StdioServerParameters

        s = self.server
        assert s.command is not None
        params = StdioServerParameters(command=s.command, args=list(s.args), env=dict(s.env) or None, cwd=s.cwd)
        stop, client = self.stop, None
        try:
            async with Client(params, cache=None) as client:
                ready.set_result(client)
                await stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("mcp: the stdio server '%s' stopped (%s)", s.label, type(_leaf(exc)).__name__)
        finally:
            if self.client is client:  # not one started since
                self.client = None

    async def close(self) -> None:
        self.stop.set()
        task, self.task, self.client = self.task, None, None
        if task is not None:
            try:
                await asyncio.wait_for(task, 10)
            except (Exception, asyncio.CancelledError):
                task.cancel()


class McpClients:
    """The MCP servers of the config by label, and connections to any server a request names."""

    def __init__(self, servers: Mapping[str, McpServer], policy: McpPolicy):
        self.servers = dict(servers)
        self.policy = policy
        self._kept: dict[str, _Kept] = {}

    @contextlib.asynccontextmanager
    async def _client(self, server: McpServer) -> AsyncIterator[Any]:
        if server.transport == "stdio":
            kept = self._kept.get(server.label)
            if kept is None:
                kept = self._kept[server.label] = _Kept(server)
            yield await kept.get(self.policy.timeout)
            return
        import httpx2
        from mcp import Client
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert server.url is not None
        t = self.policy.timeout
        headers = dict(server.headers)
        transport: Any
        async with contextlib.AsyncExitStack() as stack:
            if server.transport == "sse":
                transport = sse_client(server.url, headers=headers, timeout=t, sse_read_timeout=t)
            else:
                http = await stack.enter_async_context(create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(t)))
                transport = streamable_http_client(server.url, http_client=http)
            yield await stack.enter_async_context(Client(transport, cache=None, read_timeout_seconds=t))

    async def _drop(self, server: McpServer, failure: McpFailure) -> None:
        """After a failure of the connection (not an error the server answered with), a stdio
        server is started again on next use."""
        kept = self._kept.get(server.label)
        answered = failure.kind == "mcp_protocol_error" and -32700 <= failure.code <= -32600
        if server.transport == "stdio" and kept is not None and not answered:
            await kept.close()

    async def list_tools(self, server: McpServer) -> list[ListedTool]:
        async def work() -> list[ListedTool]:
            tools: list[ListedTool] = []
            async with self._client(server) as client:
                cursor = None
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    for t in page.tools:
                        notes = t.annotations.model_dump(mode="json", exclude_none=True) if t.annotations else None
                        tools.append(ListedTool(t.name, t.description, dict(t.input_schema), notes or None))
                    cursor = page.next_cursor
                    if not cursor:
                        break
            return tools

        try:
            return await asyncio.wait_for(work(), self.policy.timeout)
        except Exception as exc:
            failure = failure_of(exc, server.label, self.policy.timeout)
            await self._drop(server, failure)
            raise failure from None

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> CallResult:
        async def work() -> Any:
            async with self._client(server) as client:
                return await client.call_tool(name, arguments)

        try:
            result = await asyncio.wait_for(work(), self.policy.timeout)
        except Exception as exc:
            failure = failure_of(exc, server.label, self.policy.timeout)
            await self._drop(server, failure)
            return CallResult(None, failure.as_error(), f"Error: {failure.message}")
        text = capped(result_text(result.content, result.structured_content), self.policy.max_output)
        if result.is_error:
            content = [b.model_dump(mode="json", exclude_none=True, by_alias=True) for b in result.content]
            return CallResult(None, {"type": "mcp_tool_execution_error", "content": content}, f"Error: {text}")
        return CallResult(text, None, text)

    async def close(self) -> None:
        for kept in self._kept.values():
            await kept.close()
        self._kept.clear()


def from_flags(config: str | None, policy: McpPolicy) -> McpClients:
    """`--mcp-config FILE` and the policy flags; a file that cannot be used stops the start."""
    try:
        servers = load_mcp_config(config) if config else {}
    except ConfigError as exc:
        raise ToolserveError(str(exc)) from None
    return McpClients(servers, policy)
