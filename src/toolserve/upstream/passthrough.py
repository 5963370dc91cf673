"""Passthrough mode: the upstream's own /v1/chat/completions (it renders and parses tools
itself, e.g. vLLM with --enable-auto-tool-choice); toolserve repairs the tool-call deltas
(upstream/repair.py) and renames the model. /v1/completions is forwarded in both modes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import httpx

from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.chat import tool_json
from toolserve.serving.conversation import ChatRequest, RemoteChat, Step
from toolserve.serving.pipeline import Finish
from toolserve.types import ContentDelta, Delta, Message, ReasoningDelta, ToolCallArgs, ToolCallStart, Usage
from toolserve.upstream.backend import UpstreamBackend
from toolserve.upstream.repair import StreamRepair, repair_response

Json = dict[str, Any]
T = TypeVar("T")


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    try:
        return Usage(int(raw.get("prompt_tokens") or 0), int(raw.get("completion_tokens") or 0), int(cached or 0))
    except (TypeError, ValueError):
        return None


class Relay:
    """The chunks of an open upstream stream. `aclose` ends the upstream request even when the
    client went away before the first chunk was read (an unstarted generator closes nothing)."""

    def __init__(self, chunks: AsyncIterator[Json], resp: httpx.Response):
        self._chunks, self._resp = chunks, resp

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> Json:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()  # type: ignore[attr-defined]
        await self._resp.aclose()


class Opened(Generic[T]):
    """Choice 0's upstream answer, opened before its stream (`RemoteChat.open`) and taken by
    choice 0 (other choices open their own); closed if nothing takes it within a minute (a
    client gone before its stream began), so that the upstream does not generate for no one."""

    GRACE = 60.0

    def __init__(self) -> None:
        self._held: T | None = None
        self._closing: asyncio.Task[None] | None = None

    def put(self, value: T, close: Callable[[T], Awaitable[None]]) -> None:
        self._held = value

        def expire() -> None:
            if self._held is value:
                self._held = None
                self._closing = asyncio.ensure_future(close(value))

        asyncio.get_running_loop().call_later(self.GRACE, expire)

    def take(self, i: int) -> T | None:
        """Choice `i`'s opened answer: choice 0's once, else None."""
        if i != 0:
            return None
        value, self._held = self._held, None
        return value


class Forwarding(UpstreamBackend):
    """Sends a client's body on with the model renamed, and renames it back in what returns."""

    def _ours(self, obj: Json) -> Json:
        if "model" in obj:
            obj = {**obj, "model": self.model_id}
        return obj

    def _observe_usage(self, obj: Json) -> None:
        usage = _usage(obj.get("usage"))
        if usage is not None:
            reasons = [c.get("finish_reason") for c in obj.get("choices") or [] if isinstance(c, dict)]
            self.observe(Finish(next((r for r in reasons if r), "stop"), usage))

    async def forward(self, path: str, body: Json) -> Json:
        """A non-streaming request: the upstream's body, model renamed (repaired for chat)."""
        resp = await self.client.open(path, self.upstream_body(body))
        data = await self.client.read_json(resp)
        if path.endswith("/chat/completions"):
            data = repair_response(data)
        self._observe_usage(data)
        return self._ours(data)

    async def forward_stream(self, path: str, body: Json) -> Relay:
        """A streaming request, opened now (so an upstream error is a proper status), read as
        the client reads the returned iterator."""
        resp = await self.client.open(path, self.upstream_body(body))
        return Relay(self._relay(resp, StreamRepair() if path.endswith("/chat/completions") else None), resp)

    async def _relay(self, resp: httpx.Response, repair: StreamRepair | None) -> AsyncIterator[Json]:
        try:
            async for chunk in self.client.sse(resp):
                self._observe_usage(chunk)
                for out in repair.feed(chunk) if repair is not None else [chunk]:
                    yield self._ours(out)
            for out in repair.finish() if repair is not None else []:
                yield self._ours(out)
        finally:
            await resp.aclose()


def _content(m: Message, images: list[str]) -> str | list[Json] | None:
    """A message's text, with its images (media markers) as image_url parts again."""
    if m.content is None or MEDIA_MARKER not in m.content:
        return m.content
    parts: list[Json] = []
    for k, text in enumerate(m.content.split(MEDIA_MARKER)):
        if k:
            parts.append({"type": "image_url", "image_url": {"url": images.pop(0)}})
        if text:
            parts.append({"type": "text", "text": text})
    return parts


def chat_body(req: ChatRequest) -> Json:
    """A neutral chat request as an OpenAI chat completions body (streamed, with usage)."""
    images = [im.url for im in req.images]
    messages = []
    for m in req.messages:
        d: Json = {"role": m.role, "content": _content(m, images)}
        if m.tool_calls:
            d["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
        if m.reasoning:
            d["reasoning_content"] = m.reasoning
        messages.append(d)
    p, opts = req.sampling, req.options
    body: Json = {"messages": messages, "stream": True, "stream_options": {"include_usage": True},
                  "temperature": p.temperature, "top_p": p.top_p}
    if opts.tools:
        body["tools"] = [tool_json(t) for t in opts.tools]
        choice = opts.tool_choice
        body["tool_choice"] = {"type": "function", "function": {"name": opts.tool_name}} if choice == "function" else choice
        body["parallel_tool_calls"] = opts.parallel_tool_calls
    if req.response_schema is not None:
        schema = req.response_schema[1]
        body["response_format"] = (
            {"type": "json_object"} if schema is None else {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
        )
    if opts.template_kwargs:
        body["chat_template_kwargs"] = opts.template_kwargs  # vLLM, SGLang, llama.cpp, toolserve
    optional = {"max_tokens": req.max_tokens, "stop": list(req.stops) or None, "seed": p.seed, "top_k": p.top_k or None,
                "min_p": p.min_p or None, "presence_penalty": p.presence_penalty or None,
                "frequency_penalty": p.frequency_penalty or None, "logit_bias": {str(k): v for k, v in p.logit_bias.items()} or None}
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def chunk_deltas(chunk: Json, started: set[int]) -> tuple[list[Delta], str | None]:
    """The typed deltas of a repaired chat chunk (its first choice) and its finish_reason."""
    out: list[Delta] = []
    choices = [c for c in chunk.get("choices") or [] if isinstance(c, dict)]
    if not choices:
        return out, None
    delta = choices[0].get("delta") or {}
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        out.append(ReasoningDelta(reasoning))
    if isinstance(delta.get("content"), str) and delta["content"]:
        out.append(ContentDelta(delta["content"]))
    for call in delta.get("tool_calls") or []:
        index, fn = int(call.get("index", 0)), call.get("function") or {}
        if index not in started:
            started.add(index)
            out.append(ToolCallStart(index, str(call.get("id") or f"call_{index}"), str(fn.get("name") or "")))
        if fn.get("arguments"):
            out.append(ToolCallArgs(index, str(fn["arguments"])))
    return out, choices[0].get("finish_reason")


class Passthrough(Forwarding):
    mode = "passthrough"

    def start_chat(self, req: ChatRequest) -> RemoteChat:
        """For the protocols other than chat completions: the request as a chat body to the
        upstream's chat endpoint, its repaired deltas back as steps."""
        body = chat_body(req)
        opened: Opened[Relay] = Opened()

        def seeded(i: int) -> Json:
            return body if req.sampling.seed is None else {**body, "seed": req.sampling.seed + i}

        async def open_first() -> None:
            opened.put(await self.forward_stream("/v1/chat/completions", seeded(0)), Relay.aclose)

        async def steps(i: int) -> AsyncIterator[Step]:
            relay = opened.take(i) or await self.forward_stream("/v1/chat/completions", seeded(i))
            started: set[int] = set()
            reason, usage = "stop", Usage(0, 0)
            try:
                async for chunk in relay:
                    usage = _usage(chunk.get("usage")) or usage
                    deltas, finish = chunk_deltas(chunk, started)
                    reason = finish or reason
                    if not req.options.include_reasoning:
                        deltas = [d for d in deltas if not isinstance(d, ReasoningDelta)]
                    if deltas:
                        yield Step(deltas)
            finally:
                await relay.aclose()
            if started and reason != "length":
                reason = "tool_calls"
            yield Step([], [], Finish(reason, usage))

        return RemoteChat(None, steps, open_first)
