"""POST /v1/completions: raw prompts (a string, a list of them, or token ids)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.forward import forward
from toolserve.api.openai import convert
from toolserve.api.openai.chat import add_usage, prompt_once, usage_json
from toolserve.api.openai.schemas import CompletionRequest
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import InvalidRequest
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import fill_sampling
from toolserve.serving.entries import LocalModel
from toolserve.serving.pipeline import Finish, Pipeline, Ticket, choice_params
from toolserve.types import TokenLogprob, Usage
from toolserve.upstream.passthrough import Forwarding

router = APIRouter()


def _prompts(pipe: Pipeline, req: CompletionRequest) -> list[tuple[str, list[int]]]:
    """(echo text, tokens) for each prompt in the request; with a `suffix`, the model's
    fill-in-the-middle prompt of each (serving/fim.py)."""
    raw = req.prompt
    if isinstance(raw, str):
        items: list[str | list[int]] = [raw]
    elif raw and isinstance(raw[0], int):
        items = [raw]  # type: ignore[list-item]
    else:
        items = list(raw)  # type: ignore[arg-type]
    n_vocab = pipe.engine.info.n_vocab
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str) and req.suffix:  # fill-in-the-middle: the answer goes between prompt and suffix
            out.append((item, pipe.fim_prompt(prefix=item, suffix=req.suffix, param="suffix").tokens))
        elif req.suffix:
            raise InvalidRequest("suffix (fill-in-the-middle) needs text prompts, not token ids.", param="prompt")
        elif isinstance(item, str):
            out.append((item, pipe.tokenize_prompt(item)))
        else:
            if any(t >= n_vocab or t < 0 for t in item):
                raise InvalidRequest(f"prompt[{i}] holds a token id outside the vocabulary.", param="prompt")
            out.append((pipe.engine.detokenize(item).decode("utf-8", "replace"), list(item)))
    return out


class LogprobText:
    """Builds the legacy completions `logprobs` object incrementally."""

    def __init__(self, pipe: Pipeline, offset: int):
        self.pipe, self.offset = pipe, offset

    def block(self, lps: list[TokenLogprob]) -> dict[str, Any]:
        tokens, offsets = [], []
        for lp in lps:
            text = self.pipe.engine.token_piece(lp.token_id).decode("utf-8", "replace")
            tokens.append(text)
            offsets.append(self.offset)
            self.offset += len(text)
        piece = self.pipe.engine.token_piece
        return {
            "tokens": tokens,
            "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{piece(t).decode("utf-8", "replace"): v for t, v in lp.top} for lp in lps],
            "text_offset": offsets,
        }


class CompletionRun:
    ticket: Ticket

    def __init__(self, pipe: Pipeline, req: CompletionRequest):
        convert.check_completion_features(req)
        convert.check_request_caps(req, pipe.limits)
        info = pipe.engine.info
        self.prompts = _prompts(pipe, req)
        # an explicit null: up to the end of the context (as llama.cpp and vLLM read it)
        max_tokens = req.max_tokens if req.max_tokens is not None else info.n_ctx
        base = convert.sampling(req, max_tokens=max_tokens, n_vocab=info.n_vocab, logprobs=req.logprobs)
        base = fill_sampling(base, pipe.sampling_fill(prose=False), convert.sampling_sent(req))  # a raw prompt continued
        schema = convert.response_schema(req)
        so = req.structured_outputs
        if so is not None and schema is not None:
            raise InvalidRequest("Give response_format or structured_outputs, not both.", param="structured_outputs")
        if so is not None and so.grammar is not None:  # the grammar starts at the first generated token
            base = dataclasses.replace(base, constraint=pipe.constrainer.factory(so.grammar, param="structured_outputs.grammar"))
        elif so is not None:
            schema = ("json_object", None) if so.json_object else ("json_schema", so.json_schema)
        if schema is not None:
            base = dataclasses.replace(base, constraint=pipe.constraint("", ChatOptions(), schema))
        self.params = [pipe.fit(tokens, base, param="prompt") for _, tokens in self.prompts]
        self.stops = convert.stops(req)
        self.pipe, self.req = pipe, req
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    @classmethod
    async def start(cls, pipe: Pipeline, req: CompletionRequest) -> CompletionRun:
        """The request prepared off the event loop (tokenizing long prompts takes a while), then
        admitted: a refused or invalid request holds no place."""
        run = await asyncio.to_thread(cls, pipe, req)
        run.ticket = pipe.admit()
        return run

    def body(self, choices: list[dict[str, Any]], usage: Usage | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.pipe.model_id,
            "system_fingerprint": self.pipe.fingerprint,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage_json(usage)
        return out

    async def _choices(self) -> AsyncIterator[tuple[int, str, list[TokenLogprob], str | None, Usage | None]]:
        """(index, text, logprobs, finish_reason, usage) events for every prompt x n."""
        for p, ((echo, tokens), params) in enumerate(zip(self.prompts, self.params, strict=False)):
            for j in range(self.req.n):
                index = p * self.req.n + j
                if self.req.echo:
                    yield index, echo, [], None, None
                async for item in self.pipe.generate(tokens, choice_params(params, j), self.stops):
                    if isinstance(item, Finish):
                        usage = prompt_once(item.usage, j)
                        yield index, "", [], item.finish_reason, usage
                    else:
                        yield index, item.text, item.logprobs, None, None

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        total: Usage | None = None
        include_usage = bool(self.req.stream_options and self.req.stream_options.include_usage)
        offsets: dict[int, LogprobText] = {}
        async for index, text, lps, finish, usage in self._choices():
            lp = None
            if self.req.logprobs is not None:
                lp = offsets.setdefault(index, LogprobText(self.pipe, 0)).block(lps)
            if usage is not None:
                total = add_usage(total, usage)
            yield self.body([{"index": index, "text": text, "logprobs": lp, "finish_reason": finish}])
        if include_usage and total is not None:
            yield self.body([], total)

    async def complete(self) -> dict[str, Any]:
        texts: dict[int, list[str]] = {}
        lps: dict[int, list[TokenLogprob]] = {}
        finishes: dict[int, str] = {}
        total: Usage | None = None
        async for index, text, lp, finish, usage in self._choices():
            texts.setdefault(index, []).append(text)
            lps.setdefault(index, []).extend(lp)
            if finish is not None:
                finishes[index] = finish
            if usage is not None:
                total = add_usage(total, usage)
        choices = []
        for index in sorted(texts):
            logprobs = LogprobText(self.pipe, 0).block(lps[index]) if self.req.logprobs is not None else None
            choices.append(
                {"index": index, "text": "".join(texts[index]), "logprobs": logprobs, "finish_reason": finishes.get(index, "stop")}
            )
        return self.body(choices, total)


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request, registry: RegistryDep) -> Response:
    model = registry.resolve(req.model)
    if not isinstance(model, LocalModel):  # both upstream modes: the upstream's own completions
        assert isinstance(model, Forwarding)
        return await forward(request, model, "/v1/completions", req)
    pipe = await registry.pipeline(model)
    run = await CompletionRun.start(pipe, req)
    for text, _ in run.prompts:
        log_prompt(request, text)
    if req.stream:
        return sse_response(run.stream(), on_close=run.ticket.release)
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        run.ticket.release()
