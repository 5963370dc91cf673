"""Anthropic Messages requests as the conversation core's `ChatRequest`: system, messages and
their blocks, client tools, tool_choice and thinking, sampling (the adapter's first step)."""

from __future__ import annotations

import json
import logging
from typing import Any

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
from toolserve.errors import InvalidRequest, Unsupported
from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ChatRequest, ImageRef
from toolserve.types import (
    Message,
    SamplingParams,
    ToolCall,
    ToolSpec,
)

log = logging.getLogger(__name__)

# core errors name Anthropic's fields ("stop" -> "stop_sequences")
PARAM_NAMES = {"stop": "stop_sequences", "max_tokens": "max_tokens", "messages": "messages", "tools": "tools", "tool_choice": "tool_choice"}


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
