"""Requests an upstream answers itself: the client's body goes on (model renamed), the answer
comes back as JSON or as SSE, with the status of the upstream's errors."""

from __future__ import annotations

import asyncio

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.openai import convert
from toolserve.api.openai.schemas import ChatCompletionRequest, CompletionRequest
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.upstream.passthrough import Forwarding


async def forward(request: Request, model: Forwarding, path: str, req: ChatCompletionRequest | CompletionRequest) -> Response:
    """The request was validated as `req` (our caps apply too); the body is sent as the client
    wrote it, so fields toolserve does not know (an upstream's extensions) still arrive."""
    convert.check_request_caps(req, model.limits)
    body = await request.json()
    body.pop("toolserve", None)  # toolserve's own options (api/schemas.ToolserveOptions) are not the upstream's
    body.pop("speculative", None)  # nor is its speculative decoding switch
    body.pop("loop_guard", None)  # nor its loop guard
    ticket = model.admit()
    if not req.stream:
        try:
            return JSONResponse(await unless_disconnected(request, model.forward(path, body)))
        finally:
            ticket.release()
    try:
        chunks = await model.forward_stream(path, body)
    except BaseException:
        ticket.release()
        raise
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []

    def start_close() -> None:
        if not closing:
            closing.append(loop.create_task(chunks.aclose()))

    def close() -> None:  # also when the client left before the stream began (maybe on a worker thread)
        ticket.release()
        loop.call_soon_threadsafe(start_close)

    return sse_response(chunks, on_close=close)
