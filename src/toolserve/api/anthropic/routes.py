"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API as an adapter
of the conversation core (Claude Code and the `anthropic` client talk to a local model).

One `Blocks` builder turns a conversation's deltas into content blocks and the stream events
that build them, so a streamed message accumulates to exactly the non-streamed one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.anthropic.schemas import (
    Base64Source,
    CountTokensRequest,
    FileSource,
    ImageBlock,
    MessageIn,
    MessagesRequest,
    OtherBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.errors import anthropic_error, error_of
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import InvalidRequest, ToolserveError, Unsupported
from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ChatRequest, ImageRef, Step, start_conversation
from toolserve.serving.entries import LocalModel
from toolserve.serving.pipeline import Finish
from toolserve.types import (
    Delta,
    Message,
    ReasoningDelta,
    SamplingParams,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolSpec,
    Usage,
)

router = APIRouter()
log = logging.getLogger(__name__)

# core errors name Anthropic's fields ("stop" -> "stop_sequences")
PARAM_NAMES = {"stop": "stop_sequences", "max_tokens": "max_tokens", "messages": "messages", "tools": "tools", "tool_choice": "tool_choice"}


# -- request -> ChatRequest ---------------------------------------------------------------------
def image_url(block: ImageBlock, where: str) -> str:
    src = block.source
    if isinstance(src, Base64Source):
        return f"data:{src.media_type};base64,{src.data}"
    if isinstance(src, FileSource):
        raise Unsupported(f"{where}: images from the Files API are not supported; send base64 or a URL.", param=where)
    return src.url


def refuse(block: Any, where: str, role: str) -> InvalidRequest:
    if isinstance(block, OtherBlock):
        return Unsupported(f"{where} is a '{block.type}' block, which this server does not take.", param=where)
    return InvalidRequest(f"{where}: '{block.type}' blocks cannot go in {role} messages.", param=where)


class Reader:
    """The request's messages as neutral ones, with the images they hold in prompt order."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.images: list[ImageRef] = []
        self.call_ids: set[str] = set()  # tool_use ids seen so far: a tool_result must answer one

    def text(self, parts: list[tuple[str, Any]], role: str) -> str:
        """(where, block) text blocks joined by newlines; an image becomes the media marker
        where it sits (as api/openai/convert.py does for OpenAI's image parts)."""
        out, last_text = "", False
        for here, part in parts:
            if isinstance(part, TextBlock):
                out += ("\n" if last_text else "") + part.text.replace(MEDIA_MARKER, "")
                last_text = True
            elif isinstance(part, ImageBlock) and role == "user":
                self.images.append(ImageRef(here, image_url(part, here)))
                out, last_text = out + MEDIA_MARKER, False
            else:
                raise refuse(part, here, role)
        return out

    def add(self, m: MessageIn, i: int) -> None:
        where = f"messages[{i}].content"
        if isinstance(m.content, str):
            self.messages.append(Message(role=m.role, content=m.content.replace(MEDIA_MARKER, "")))
        elif m.role == "assistant":
            self._assistant(m.content, where)
        else:
            self._user(m.role, m.content, where)

    def _user(self, role: str, blocks: list[Any], where: str) -> None:
        """Text and images make one message; each tool_result its own tool message, in order."""
        run: list[tuple[str, Any]] = []
        for j, b in enumerate(blocks):
            if isinstance(b, ToolResultBlock) and role == "user":
                if run:
                    self.messages.append(Message(role=role, content=self.text(run, role)))
                    run = []
                self._tool_result(b, f"{where}[{j}]")
            else:
                run.append((f"{where}[{j}]", b))
        if run or not blocks:
            self.messages.append(Message(role=role, content=self.text(run, role)))

    def _tool_result(self, b: ToolResultBlock, here: str) -> None:
        if b.tool_use_id not in self.call_ids:
            msg = f"{here}: tool_result answers tool_use id '{b.tool_use_id}', which no earlier assistant message holds."
            raise InvalidRequest(msg, param=f"{here}.tool_use_id")
        if isinstance(b.content, str):
            content = b.content.replace(MEDIA_MARKER, "")
        else:
            content = self.text([(f"{here}.content[{k}]", p) for k, p in enumerate(b.content or [])], "user")
        content = f"Error: {content}" if b.is_error else content
        self.messages.append(Message(role="tool", tool_call_id=b.tool_use_id, content=content))

    def _assistant(self, blocks: list[Any], where: str) -> None:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        for j, b in enumerate(blocks):
            if isinstance(b, TextBlock):
                texts.append(b.text.replace(MEDIA_MARKER, ""))
            elif isinstance(b, ThinkingBlock):
                thoughts.append(b.thinking)
            elif isinstance(b, ToolUseBlock):
                calls.append(ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input, ensure_ascii=False)))
                self.call_ids.add(b.id)
            elif not isinstance(b, RedactedThinkingBlock):  # redacted: nothing a local model can read
                raise refuse(b, f"{where}[{j}]", "assistant")
        content = "\n".join(texts) if texts or not calls else None
        reasoning = "\n".join(thoughts) or None
        self.messages.append(Message(role="assistant", content=content, tool_calls=tuple(calls), reasoning=reasoning))


def system_messages(system: str | list[TextBlock] | None) -> list[Message]:
    """The system prompt as a first system message (none when empty)."""
    if isinstance(system, list):
        system = "\n".join(b.text for b in system)
    return [Message(role="system", content=system.replace(MEDIA_MARKER, ""))] if system else []


def client_tools(req: CountTokensRequest) -> tuple[ToolSpec, ...]:
    """The request's own tools; Anthropic's server tools (web search, code execution, ...),
    which Anthropic runs itself and a local model cannot, are dropped."""
    specs, dropped = [], []
    for i, t in enumerate(req.tools or ()):
        if t.type not in (None, "custom"):
            dropped.append(t.name)
        elif t.input_schema is None:
            raise InvalidRequest(f"tool '{t.name}' needs an input_schema.", param=f"tools[{i}].input_schema")
        else:
            specs.append(ToolSpec(name=t.name, description=t.description or "", parameters=t.input_schema))
    if dropped:
        log.info("dropped %d server tool(s) the model cannot run: %s", len(dropped), ", ".join(dropped))
    names = [t.name for t in specs]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools holds two tools with the same name.", param="tools")
    return tuple(specs)


def chat_options(req: CountTokensRequest) -> ChatOptions:
    """Tools and tool_choice, checked against each other; thinking as the template's switch."""
    tools = client_tools(req)
    tc = req.tool_choice
    kind = tc.type if tc else "auto"
    if tc is not None and kind == "tool" and tc.name not in {t.name for t in tools}:
        raise InvalidRequest(f"tool_choice names tool '{tc.name}', which is not in tools.", param="tool_choice.name")
    if kind == "any" and not tools:
        raise InvalidRequest("tool_choice 'any' needs at least one tool in tools.", param="tool_choice")
    kwargs: dict[str, Any] = {}
    if req.thinking is not None and req.thinking.type in ("enabled", "disabled"):  # adaptive: the template's default
        kwargs["enable_thinking"] = req.thinking.type == "enabled"
    return ChatOptions(
        tools=tools,
        tool_choice={"auto": "auto", "any": "required", "tool": "function", "none": "none"}[kind],
        tool_name=tc.name if tc is not None and kind == "tool" else None,
        parallel_tool_calls=not (tc is not None and tc.disable_parallel_tool_use),
        template_kwargs=kwargs,
    )


def chat_request(req: CountTokensRequest) -> ChatRequest:
    """A Messages (or count_tokens) request as the neutral request."""
    reader = Reader()
    for i, m in enumerate(req.messages):
        reader.add(m, i)
    fmt = req.output_config.format if req.output_config else None
    sampling = SamplingParams(max_tokens=0)
    stops: tuple[str, ...] = ()
    if isinstance(req, MessagesRequest):
        t, p = req.temperature, req.top_p
        sampling = SamplingParams(max_tokens=0, temperature=1.0 if t is None else t, top_p=1.0 if p is None else p, top_k=req.top_k or 0)
        stops = tuple(req.stop_sequences or ())
    return ChatRequest(
        messages=(*system_messages(req.system), *reader.messages),
        model=req.model,
        options=chat_options(req),
        images=tuple(reader.images),
        response_schema=("json_schema", fmt.schema_) if fmt else None,
        sampling=sampling,
        max_tokens=req.max_tokens if isinstance(req, MessagesRequest) else None,
        stops=stops,
        param_names=PARAM_NAMES,
        sampling_set=frozenset(k for k in ("temperature", "top_p", "top_k") if getattr(req, k, None) is not None),
    )


# -- Steps -> content blocks and stream events ------------------------------------------------
def signature(thinking: str) -> str:
    """A thinking block's signature: the SHA-256 (hex) of its text. Clients such as Claude Code
    want a non-empty one to send back; nothing here checks it, since history's thinking is
    taken as the client sends it (a local model has no secret to sign with)."""
    return hashlib.sha256(thinking.encode()).hexdigest()


def tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


class Blocks:
    """An answer's content blocks, built from its deltas in the order the model made them. Each
    `add` returns the stream events it causes; a new block starts whenever the kind of delta
    changes (reasoning -> text -> tool call k)."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []  # as streamed; a tool_use keeps its JSON text in "_json"
        self._open: int | None = None  # index of the block that deltas go to
        self._calls: dict[int, int] = {}  # call index -> its block's index

    def add(self, d: Delta) -> list[dict[str, Any]]:
        if isinstance(d, ToolCallStart):
            block = {"type": "tool_use", "id": tool_use_id(d.id), "name": d.name, "input": {}}
            self._calls[d.index] = len(self.blocks)
            return [*self.close(), self._start(block)]
        if isinstance(d, ToolCallArgs):
            index = self._calls[d.index]  # the parsers send a call's arguments right after its start
            self.blocks[index]["_json"] += d.fragment
            return [self._delta(index, {"type": "input_json_delta", "partial_json": d.fragment})]
        if not d.text:
            return []  # an empty piece makes no block
        kind = "thinking" if isinstance(d, ReasoningDelta) else "text"  # the block's field and its delta's
        events = []
        if self._open is None or self.blocks[self._open]["type"] != kind:
            events = [*self.close(), self._start({"type": kind, kind: "", "signature": ""} if kind == "thinking" else {"type": kind, kind: ""})]
        self.blocks[-1][kind] += d.text
        return [*events, self._delta(len(self.blocks) - 1, {"type": f"{kind}_delta", kind: d.text})]

    def _start(self, block: dict[str, Any]) -> dict[str, Any]:
        self.blocks.append({**block, "_json": ""} if block["type"] == "tool_use" else dict(block))
        self._open = len(self.blocks) - 1
        return {"type": "content_block_start", "index": self._open, "content_block": block}

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": delta}

    def close(self) -> list[dict[str, Any]]:
        """The events that end the open block (a thinking block gets its signature first)."""
        index, self._open = self._open, None
        if index is None:
            return []
        block = self.blocks[index]
        if block["type"] != "thinking":
            return [{"type": "content_block_stop", "index": index}]
        block["signature"] = signature(block["thinking"])
        return [self._delta(index, {"type": "signature_delta", "signature": block["signature"]}), {"type": "content_block_stop", "index": index}]

    def content(self) -> list[dict[str, Any]]:
        """The blocks of the whole message: a call's input as the object its JSON text holds."""
        return [_finished(b) for b in self.blocks]


def _finished(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] != "tool_use":
        return block
    out = {k: v for k, v in block.items() if k != "_json"}
    try:  # the parsers close a call cut by max_tokens into valid JSON; anything else reads as {}
        value = json.loads(block["_json"]) if block["_json"] else {}
    except json.JSONDecodeError:
        value = {}
    out["input"] = value if isinstance(value, dict) else {}
    return out


def stop_reason(finish: Finish) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for how a choice ended."""
    if finish.finish_reason == "tool_calls":
        return "tool_use", None
    if finish.finish_reason == "length":
        return "max_tokens", None
    if finish.stop_sequence is not None:
        return "stop_sequence", finish.stop_sequence
    return "end_turn", None


def usage_json(u: Usage) -> dict[str, int]:
    """Anthropic counts cache reads apart: input_tokens + cache_read_input_tokens is the prompt
    (clients such as Claude Code add them up to know how full the context is)."""
    return {
        "input_tokens": u.prompt_tokens - u.cached_tokens,
        "output_tokens": u.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_tokens,
    }


class MessagesRun:
    """One choice's Steps rendered as a Message: its stream events, or the whole message, from
    the same `Blocks`."""

    def __init__(self, steps: AsyncIterator[Step], model: str, prompt_tokens: int):
        self.steps, self.model, self.prompt_tokens = steps, model, prompt_tokens
        self.id = f"msg_{uuid.uuid4().hex}"
        self.blocks = Blocks()
        self.finish = Finish("stop", Usage(prompt_tokens, 0))

    def message(self, content: list[dict[str, Any]], reason: tuple[str, str | None] | None, usage: Usage) -> dict[str, Any]:
        stop, sequence = reason or (None, None)
        return {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
            "stop_reason": stop, "stop_sequence": sequence, "usage": usage_json(usage),
        }

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The stream: message_start, ping, each block's start, deltas and stop, message_delta, message_stop."""
        yield {"type": "message_start", "message": self.message([], None, Usage(self.prompt_tokens, 0))}
        yield {"type": "ping"}
        async for step in self.steps:
            for d in step.deltas:
                for event in self.blocks.add(d):
                    yield event
            if step.finish is not None:
                self.finish = step.finish
        for event in self.blocks.close():
            yield event
        stop, sequence = stop_reason(self.finish)
        usage = {k: v for k, v in usage_json(self.finish.usage).items() if k != "cache_creation_input_tokens"}
        yield {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": sequence}, "usage": usage}
        yield {"type": "message_stop"}

    async def complete(self) -> dict[str, Any]:
        """The whole message: the stream's events, accumulated by the same builder."""
        async for _ in self.events():
            pass
        return self.message(self.blocks.content(), stop_reason(self.finish), self.finish.usage)


# -- routes -------------------------------------------------------------------------------------
def stream_error(exc: ToolserveError) -> dict[str, Any]:
    """A failure after the stream began: Anthropic's `error` event."""
    return anthropic_error(exc.status, error_of(exc)["error"]["message"])


@router.post("/v1/messages")
async def messages(req: MessagesRequest, request: Request, registry: RegistryDep) -> Response:
    conv = await start_conversation(registry, chat_request(req))
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    prompt = getattr(conv, "prompt", None)  # tokens of a local model's prompt; an upstream's are known at the end
    run = MessagesRun(conv.choice(0), req.model or conv.model_id, len(prompt) if prompt is not None else 0)
    if req.stream:
        return sse_response(run.events(), on_close=conv.ticket.release, named=True, error=stream_error)
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        conv.ticket.release()


@router.post("/v1/messages/count_tokens")
async def count_tokens(req: CountTokensRequest, registry: RegistryDep) -> dict[str, int]:
    """The prompt's tokens, rendered and tokenized exactly as a request would be (then the
    place in the queue that preparing it took is given back)."""
    neutral = chat_request(req)
    if not isinstance(registry.resolve(neutral.model), LocalModel):
        raise InvalidRequest("count_tokens needs a local model: an upstream's tokenizer is not known here.", param="model")
    conv = await start_conversation(registry, neutral)
    conv.ticket.release()
    return {"input_tokens": len(conv.prompt)}
