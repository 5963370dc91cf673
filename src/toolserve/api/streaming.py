"""SSE and NDJSON framing and client-disconnect handling shared by the routes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from toolserve.api.errors import error_of, unexpected_error
from toolserve.errors import ClientGone, ToolserveError

log = logging.getLogger(__name__)
T = TypeVar("T")


def sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'), allow_nan=False)}\n\n"  # standard JSON only


def sse_event(obj: dict[str, Any]) -> str:
    """A named SSE event (the Responses and Messages APIs): its name is the object's `type`."""
    return f"event: {obj['type']}\n{sse(obj)}"


def sse_response(
    chunks: AsyncIterator[dict[str, Any]],
    on_close: Callable[[], None] | None = None,
    *,
    named: bool = False,
    error: Callable[[ToolserveError], dict[str, Any]] = error_of,
    done: bool = True,
) -> StreamingResponse:
    """Frame chunks as SSE; chat completions (unnamed events) end with [DONE] (unless `done`
    is false: llama-server's own /infill stream has none). A failure mid-stream becomes an
    error event (`error` shapes it). `on_close` runs once the stream is over, and again (it
    must be idempotent) after the response, which covers a client that left before the
    stream began."""
    frame = sse_event if named else sse
    tail = "data: [DONE]\n\n" if done and not named else None
    return _framed(chunks, frame, tail, "text/event-stream", on_close, error)


def ndjson(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


def ndjson_response(
    chunks: AsyncIterator[dict[str, Any]],
    on_close: Callable[[], None] | None = None,
    *,
    error: Callable[[ToolserveError], dict[str, Any]] = error_of,
) -> StreamingResponse:
    """Frame chunks as newline-delimited JSON (Ollama's streams): one object a line, a failure
    mid-stream as one more line holding the error (`error` shapes it)."""
    return _framed(chunks, ndjson, None, "application/x-ndjson", on_close, error)


def _framed(
    chunks: AsyncIterator[dict[str, Any]],
    frame: Callable[[dict[str, Any]], str],
    tail: str | None,
    media_type: str,
    on_close: Callable[[], None] | None,
    error: Callable[[ToolserveError], dict[str, Any]],
) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield frame(chunk)
        except ToolserveError as exc:
            yield frame(error(exc))
        except Exception as exc:  # headers are sent already: report in-band, never drop the stream
            yield frame(error(unexpected_error(exc)))
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
            if on_close is not None:
                on_close()
        if tail is not None:
            yield tail

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    background = BackgroundTask(on_close) if on_close is not None else None
    return StreamingResponse(body(), media_type=media_type, headers=headers, background=background)


async def unless_disconnected(request: Request, work: Awaitable[T], poll: float = 0.2) -> T:
    """Await `work`, cancelling it if the client goes away first (its generation stops)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
