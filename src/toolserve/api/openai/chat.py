"""POST /v1/chat/completions."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.forward import forward
from toolserve.api.openai import convert
from toolserve.api.openai.schemas import ChatCompletionRequest
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import Unsupported
from toolserve.serving.conversation import Conversation, start_conversation
from toolserve.serving.loops import Loop
from toolserve.types import ContentDelta, Delta, ReasoningDelta, TokenLogprob, ToolCallStart, Usage
from toolserve.upstream.passthrough import Passthrough

router = APIRouter()


def usage_json(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def add_usage(a: Usage | None, b: Usage) -> Usage:
    if a is None:
        return b
    return Usage(
        a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens, a.cached_tokens + b.cached_tokens
    )


def prompt_once(u: Usage, choice: int) -> Usage:
    """n choices share one prompt: count it once, like OpenAI does."""
    return u if choice == 0 else Usage(0, u.completion_tokens, 0)


def logprob_entries(token_piece: Callable[[int], bytes], lps: list[TokenLogprob]) -> list[dict[str, Any]]:
    def one(token: int, logprob: float) -> dict[str, Any]:
        raw = token_piece(token)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    return [{**one(lp.token_id, lp.logprob), "top_logprobs": [one(t, v) for t, v in lp.top]} for lp in lps]


def delta_json(d: Delta) -> dict[str, Any]:
    """One typed delta as an OpenAI chunk `delta`."""
    if isinstance(d, ContentDelta):
        return {"content": d.text}
    if isinstance(d, ReasoningDelta):
        return {"reasoning_content": d.text, "reasoning": d.text}
    if isinstance(d, ToolCallStart):
        call = {"index": d.index, "id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}}
        return {"tool_calls": [call]}
    return {"tool_calls": [{"index": d.index, "function": {"arguments": d.fragment}}]}


class Message:
    """The non-streaming message, built from the same deltas a stream sends."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, d: Delta) -> None:
        if isinstance(d, ContentDelta):
            self.content.append(d.text)
        elif isinstance(d, ReasoningDelta):
            self.reasoning.append(d.text)
        elif isinstance(d, ToolCallStart):
            self.calls[d.index] = {"id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}}
        else:
            self.calls[d.index]["function"]["arguments"] += d.fragment

    def json(self) -> dict[str, Any]:
        content = "".join(self.content)
        out: dict[str, Any] = {"role": "assistant", "content": content or (None if self.calls else ""), "refusal": None}
        if self.reasoning:
            text = "".join(self.reasoning)
            out["reasoning_content"] = out["reasoning"] = text
        if self.calls:
            out["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return out


class ChatRun:
    """A Conversation rendered as OpenAI chat completions: chunks, or one whole response."""

    def __init__(self, conv: Conversation, req: ChatCompletionRequest):
        self.conv, self.req = conv, req
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def chunk(self, choices: list[dict[str, Any]], usage: Usage | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.conv.model_id,
            "system_fingerprint": self.conv.fingerprint,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage_json(usage)
        return out

    def toolserve_block(self, raw: dict[int, str | None]) -> dict[str, Any]:
        """`toolserve` of the response (asked for with `"toolserve": {"raw": true}`): each
        choice's generated text as the model wrote it, and the format that parsed it."""
        choices = [{"index": i, "raw_text": raw.get(i)} for i in range(self.req.n)]
        return {"tool_format": self.conv.tool_format, "choices": choices}

    def _logprobs(self, lps: list[TokenLogprob]) -> dict[str, Any] | None:
        if not self.req.logprobs:
            return None
        return {"content": logprob_entries(self.conv.token_piece, lps)}

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        total: Usage | None = None
        raw: dict[int, str | None] = {}
        include_usage = bool(self.req.stream_options and self.req.stream_options.include_usage)
        for i in range(self.req.n):
            role = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            yield self.chunk([role])
            async for step in self.conv.choice(i):
                if step.finish is not None:
                    total = add_usage(total, prompt_once(step.finish.usage, i))
                    raw[i] = step.finish.raw_text
                    end = self.chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": step.finish.finish_reason}])
                    if step.finish.loop is not None:
                        end["toolserve"] = {"loop_guard": [loop_json(i, step.finish.loop)]}
                    yield end
                    continue
                logprobs = self._logprobs(step.logprobs)
                for d in step.deltas or [ContentDelta("")]:
                    yield self.chunk([{"index": i, "delta": delta_json(d), "logprobs": logprobs, "finish_reason": None}])
                    logprobs = {"content": []} if self.req.logprobs else None
        last = self.chunk([], total) if include_usage and total is not None else None
        if self.req.wants_raw:  # on the last chunk: the usage chunk when there is one
            last = last or self.chunk([])
            last["toolserve"] = self.toolserve_block(raw)
        if last is not None:
            yield last

    async def complete(self) -> dict[str, Any]:
        choices = []
        total: Usage | None = None
        raw: dict[int, str | None] = {}
        loops: list[dict[str, Any]] = []
        for i in range(self.req.n):
            message, lps, finish = Message(), [], "stop"
            async for step in self.conv.choice(i):
                if step.finish is not None:
                    total, finish = add_usage(total, prompt_once(step.finish.usage, i)), step.finish.finish_reason
                    raw[i] = step.finish.raw_text
                    if step.finish.loop is not None:
                        loops.append(loop_json(i, step.finish.loop))
                for d in step.deltas:
                    message.add(d)
                lps.extend(step.logprobs)
            logprobs = self._logprobs(lps)
            choices.append({"index": i, "message": message.json(), "logprobs": logprobs, "finish_reason": finish})
        body = self.chunk(choices, total)
        body["object"] = "chat.completion"
        if self.req.wants_raw:
            body["toolserve"] = self.toolserve_block(raw)
        if loops:
            body.setdefault("toolserve", {})["loop_guard"] = loops
        return body


def loop_json(index: int, loop: Loop) -> dict[str, Any]:
    """Why choice `index` ended "length" before max_tokens: the loop guard's finding."""
    return {"index": index, "period_tokens": loop.period, "repeats": loop.repeats, "reason": loop.describe()}


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request, registry: RegistryDep) -> Response:
    model = registry.resolve(req.model)
    if isinstance(model, Passthrough):  # the upstream's own chat endpoint, the client's body, deltas repaired
        if req.wants_raw:
            raise Unsupported(
                f"'toolserve.raw' needs a model whose output toolserve reads; '{model.model_id}' is a passthrough "
                "upstream, whose server parses its own output (serve it with --upstream-mode raw).",
                param="toolserve.raw",
            )
        return await forward(request, model, "/v1/chat/completions", req)
    conv = await start_conversation(registry, convert.chat_request(req))
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    run = ChatRun(conv, req)
    if req.stream:
        return sse_response(run.stream(), on_close=conv.ticket.release)
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        conv.ticket.release()
