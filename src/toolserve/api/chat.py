"""POST /v1/chat/completions."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api import convert
from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.forward import forward
from toolserve.api.schemas import ChatCompletionRequest
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.serving.chat import ChatOptions
from toolserve.serving.pipeline import EncodedImage, Finish, Piece, Pipeline, choice_params
from toolserve.serving.registry import LocalModel
from toolserve.types import ContentDelta, Delta, ReasoningDelta, TokenLogprob, ToolCallStart, Usage
from toolserve.upstream.passthrough import Forwarding
from toolserve.upstream.raw import Choice, RawUpstream

router = APIRouter()

UNKNOWN_VOCAB = 2**31  # an upstream's vocabulary: the token ids in logit_bias are its to check


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


def remote_choices(up: RawUpstream, prompt_text: str, opts: ChatOptions, req: ChatCompletionRequest) -> Choice:
    """The choices of a chat request continued by a raw-mode upstream."""
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    base = convert.sampling(req, max_tokens=1, n_vocab=UNKNOWN_VOCAB, logprobs=logprobs)
    max_tokens = req.max_completion_tokens or req.max_tokens  # None: the upstream's room
    return up.prepare(prompt_text, opts, base, convert.stops(req), convert.response_schema(req), max_tokens)


class ChatRun:
    """One chat request after validation: a prompt and the parameters of each choice. The model
    is a local Pipeline, or a raw-mode upstream that continues the rendered prompt remotely;
    either way the same shaper, chunks and message come out. The route has checked the caps."""

    def __init__(self, pipe: Pipeline | RawUpstream, req: ChatCompletionRequest, images: list[EncodedImage] | None = None):
        convert.check_chat_features(req)
        self.opts = convert.chat_options(req)
        self.remote: Choice | None = None
        if isinstance(pipe, RawUpstream):
            self.prompt_text = pipe.render_chat(convert.to_messages(req.messages), self.opts)
            self.remote = remote_choices(pipe, self.prompt_text, self.opts, req)
        else:
            self.prompt_text = pipe.render_chat(convert.to_messages(req.messages, pipe.engine.info.vision), self.opts)
            self.prompt, self.media = pipe.tokenize_chat(self.prompt_text, images or [])
            info = pipe.engine.info
            max_tokens = req.max_completion_tokens or req.max_tokens or info.n_ctx
            logprobs = (req.top_logprobs or 0) if req.logprobs else None
            base = convert.sampling(req, max_tokens=max_tokens, n_vocab=info.n_vocab, logprobs=logprobs)
            constraint = pipe.constraint(self.prompt_text, self.opts, convert.response_schema(req))
            self.params = pipe.fit(self.prompt, dataclasses.replace(base, constraint=constraint), param="messages")
        self.stops = convert.stops(req)
        self.pipe, self.req = pipe, req
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.ticket = pipe.admit()  # last: a refused or invalid request holds no place

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

    def _generate(self, i: int) -> AsyncIterator[Piece | Finish]:
        if self.remote is not None:
            return self.remote(i)
        assert isinstance(self.pipe, Pipeline)
        return self.pipe.generate(self.prompt, choice_params(self.params, i), self.stops, self.media)

    def _logprobs(self, lps: list[TokenLogprob]) -> dict[str, Any] | None:
        if not self.req.logprobs:
            return None
        assert isinstance(self.pipe, Pipeline)  # raw upstreams refuse logprobs
        return {"content": logprob_entries(self.pipe, lps)}

    async def _choice(self, i: int) -> AsyncIterator[tuple[list[Delta], list[TokenLogprob], Finish | None]]:
        """Deltas of choice i with the logprobs of the tokens that produced them; a Finish last."""
        shaper = self.pipe.shaper(self.prompt_text, self.opts)
        pending: list[TokenLogprob] = []
        async for item in self._generate(i):
            if isinstance(item, Finish):
                tail = shaper.finish()
                if tail or pending:
                    yield tail, pending, None
                # cut off by max_tokens stays "length" (a call may be unfinished); else calls say so
                reason = "tool_calls" if shaper.calls and item.finish_reason != "length" else item.finish_reason
                yield [], [], Finish(reason, item.usage)
                return
            pending.extend(item.logprobs)
            deltas = shaper.feed(item.text)
            if deltas:
                yield deltas, pending, None
                pending = []

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        total: Usage | None = None
        include_usage = bool(self.req.stream_options and self.req.stream_options.include_usage)
        for i in range(self.req.n):
            role = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            yield self.chunk([role])
            async for deltas, lps, finish in self._choice(i):
                if finish is not None:
                    total = add_usage(total, prompt_once(finish.usage, i))
                    yield self.chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": finish.finish_reason}])
                    continue
                logprobs = self._logprobs(lps)
                for d in deltas or [ContentDelta("")]:
                    yield self.chunk([{"index": i, "delta": delta_json(d), "logprobs": logprobs, "finish_reason": None}])
                    logprobs = {"content": []} if self.req.logprobs else None
        if include_usage and total is not None:
            yield self.chunk([], total)

    async def complete(self) -> dict[str, Any]:
        choices = []
        total: Usage | None = None
        for i in range(self.req.n):
            message, lps, finish = Message(), [], "stop"
            async for deltas, step_lps, fin in self._choice(i):
                if fin is not None:
                    total, finish = add_usage(total, prompt_once(fin.usage, i)), fin.finish_reason
                for d in deltas:
                    message.add(d)
                lps.extend(step_lps)
            logprobs = self._logprobs(lps)
            choices.append({"index": i, "message": message.json(), "logprobs": logprobs, "finish_reason": finish})
        body = self.chunk(choices, total)
        body["object"] = "chat.completion"
        return body


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request, registry: RegistryDep) -> Response:
    model = registry.resolve(req.model)
    if isinstance(model, RawUpstream):
        convert.check_caps(req, model.limits)
        run = ChatRun(model, req)
    elif isinstance(model, LocalModel):
        async with registry.hold(model) as pipe:  # not unloaded while the images are prepared
            convert.check_caps(req, pipe.limits)  # before any image is fetched or decoded
            images = await pipe.encode_images(convert.image_sources(req.messages))
            run = ChatRun(pipe, req, images)
    else:  # passthrough: the upstream's own chat endpoint, its deltas repaired
        assert isinstance(model, Forwarding)
        return await forward(request, model, "/v1/chat/completions", req)
    log_prompt(request, run.prompt_text)
    if req.stream:
        return sse_response(run.stream(), on_close=run.ticket.release)
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        run.ticket.release()
