"""POST /v1/chat/completions."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api import convert
from toolserve.api.deps import PipelineDep
from toolserve.api.schemas import ChatCompletionRequest
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.serving.pipeline import Finish, Pipeline, choice_params
from toolserve.types import TokenLogprob, Usage

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


def logprob_entries(pipe: Pipeline, lps: list[TokenLogprob]) -> list[dict[str, Any]]:
    def one(token: int, logprob: float) -> dict[str, Any]:
        raw = pipe.engine.token_piece(token)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    return [
        {**one(lp.token_id, lp.logprob), "top_logprobs": [one(t, v) for t, v in lp.top]} for lp in lps
    ]


class ChatRun:
    """One chat request after validation: a prompt and the parameters of each choice."""

    def __init__(self, pipe: Pipeline, req: ChatCompletionRequest):
        pipe.check_model(req.model)
        convert.check_chat_features(req)
        prompt_text = pipe.render_chat(convert.to_messages(req.messages), req.chat_template_kwargs)
        self.prompt = pipe.tokenize_prompt(prompt_text)
        info = pipe.engine.info
        max_tokens = req.max_completion_tokens or req.max_tokens or info.n_ctx
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
        base = convert.sampling(req, max_tokens=max_tokens, n_vocab=info.n_vocab, logprobs=logprobs)
        self.params = pipe.fit(self.prompt, base, param="messages")
        self.stops = convert.stops(req)
        self.pipe, self.req = pipe, req
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def chunk(self, choices: list[dict[str, Any]], usage: Usage | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.pipe.model_id,
            "system_fingerprint": self.pipe.fingerprint,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage_json(usage)
        return out

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        total: Usage | None = None
        include_usage = bool(self.req.stream_options and self.req.stream_options.include_usage)
        for i in range(self.req.n):
            role = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            yield self.chunk([role])
            async for item in self.pipe.generate(self.prompt, choice_params(self.params, i), self.stops):
                if isinstance(item, Finish):
                    total = add_usage(total, prompt_once(item.usage, i))
                    yield self.chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": item.finish_reason}])
                    continue
                logprobs = {"content": logprob_entries(self.pipe, item.logprobs)} if self.req.logprobs else None
                yield self.chunk([{"index": i, "delta": {"content": item.text}, "logprobs": logprobs, "finish_reason": None}])
        if include_usage and total is not None:
            yield self.chunk([], total)

    async def complete(self) -> dict[str, Any]:
        choices = []
        total: Usage | None = None
        for i in range(self.req.n):
            text, lps, finish = [], [], "stop"
            async for item in self.pipe.generate(self.prompt, choice_params(self.params, i), self.stops):
                if isinstance(item, Finish):
                    total, finish = add_usage(total, prompt_once(item.usage, i)), item.finish_reason
                else:
                    text.append(item.text)
                    lps.extend(item.logprobs)
            message = {"role": "assistant", "content": "".join(text), "refusal": None}
            logprobs = {"content": logprob_entries(self.pipe, lps)} if self.req.logprobs else None
            choices.append({"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish})
        body = self.chunk(choices, total)
        body["object"] = "chat.completion"
        return body


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request, pipe: PipelineDep) -> Response:
    run = ChatRun(pipe, req)
    if req.stream:
        return sse_response(run.stream())
    return JSONResponse(await unless_disconnected(request, run.complete()))
