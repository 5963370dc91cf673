"""Ollama's requests -> the neutral request of serving/ (pure functions: no model, no HTTP).

What Ollama's fields become: `messages` with base64 `images` (media markers before the text, as
Ollama places them), `tool_calls` whose arguments are objects, `tool` messages answering a call
by `tool_call_id` or `tool_name`; `format` ("json" or a schema) as the response schema the
grammar enforces; `think` as the template's thinking switch; `options` as sampling settings,
with Ollama's own defaults for the ones a client leaves out.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from toolserve.api.ollama import schemas as oll
from toolserve.errors import InvalidRequest
from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ChatRequest, ImageRef, ResponseSchema
from toolserve.types import Message, SamplingParams, ToolCall, ToolSpec

# Ollama's sampling defaults (api/types.go DefaultOptions) for fields a request leaves out;
# the server's own (`serve --temperature ...`) come first where it sets them
OLLAMA_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0}
# core errors name Ollama's fields
PARAM_NAMES = {"stop": "options.stop", "max_tokens": "options.num_predict", "context_limit": "options.num_ctx"}

_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_seconds(value: float | int | str | None) -> float | None:
    """`keep_alive` in seconds: None when not given, math.inf for a negative one (forever), as
    Ollama reads it (a number of seconds, or a Go duration such as "5m" or "1h30m")."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return math.inf if value < 0 else float(value)
    text = value.strip()
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    if body == "0":
        return 0.0
    parts = _DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise InvalidRequest(
            f"keep_alive '{value[:40]}' is not a duration: give seconds (a number) or a Go duration such as \"5m\" or \"1h30m\".",
            param="keep_alive",
        )
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    return math.inf if sign < 0 else seconds


def response_schema(fmt: str | dict[str, Any] | None) -> ResponseSchema | None:
    """`format`: "json" for any JSON object, a JSON schema for that schema, "" or none for text."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return "json_object", None
    assert isinstance(fmt, dict)
    return "json_schema", fmt


def think_options(think: bool | str | None) -> tuple[dict[str, Any], bool]:
    """The template switches and whether reasoning is returned (`thinking`), for `think`.
    Not given: the template's own default, reasoning returned (Ollama thinks by default on a
    model that can); false: thinking off, and nothing returned of what the model thinks anyway."""
    if think is None:
        return {}, True
    if think is False:
        return {"enable_thinking": False}, False
    if think is True:
        return {"enable_thinking": True}, True
    # a level: the template's reasoning_effort (gpt-oss takes low/medium/high: max is high, as Ollama does)
    return {"enable_thinking": True, "reasoning_effort": "high" if think == "max" else think}, True


def sampling(options: oll.Options | None) -> tuple[SamplingParams, tuple[str, ...], int | None, frozenset[str]]:
    """(sampling settings, stop strings, max tokens, the sampling fields the client set) of
    `options`; a field left out takes Ollama's default (or the server's, applied later)."""
    o = options or oll.Options()
    given = {k for k in ("temperature", "top_p", "top_k", "min_p") if getattr(o, k) is not None}
    values = {k: getattr(o, k) if k in given else OLLAMA_SAMPLING[k] for k in OLLAMA_SAMPLING}
    params = SamplingParams(
        max_tokens=0,
        temperature=float(values["temperature"]),
        top_p=float(values["top_p"]),
        top_k=int(values["top_k"]),
        min_p=float(values["min_p"]),
        repetition_penalty=o.repeat_penalty if o.repeat_penalty is not None else 1.0,
        presence_penalty=o.presence_penalty or 0.0,
        frequency_penalty=o.frequency_penalty or 0.0,
        seed=o.seed if o.seed is not None and o.seed >= 0 else None,
    )
    stops = (o.stop,) if isinstance(o.stop, str) else tuple(o.stop or ())
    max_tokens = o.num_predict if o.num_predict is not None and o.num_predict > 0 else None
    return params, stops, max_tokens, frozenset(given)


def context_limit(options: oll.Options | None) -> int | None:
    """`num_ctx` when set (> 0): the context this request may use."""
    n = options.num_ctx if options is not None else None
    return n if n is not None and n > 0 else None


def image_url(data: str) -> str:
    """An Ollama image (base64, no header) as the data URI the image policy takes; Pillow
    reads the actual type from the bytes."""
    return f"data:image/*;base64,{data.strip()}"


class History:
    """Ollama's messages as neutral ones, with their images in prompt order."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.images: list[ImageRef] = []
        self._open: list[ToolCall] = []  # calls made and not answered yet, oldest first

    def add(self, m: oll.Message, i: int, images_at: str | None = None) -> None:
        """Message `i`; `images_at`: where its images are in the request, if not in the message."""
        content = m.content.replace(MEDIA_MARKER, "")
        if m.images:
            where = images_at or f"messages[{i}].images"
            if m.role != "user":
                raise InvalidRequest(f"{where}: images go in user messages only.", param=where)
            for j, data in enumerate(m.images):
                self.images.append(ImageRef(f"{where}[{j}]", image_url(data)))
            content = MEDIA_MARKER * len(m.images) + content  # Ollama puts a message's images before its text
        if m.role == "assistant":
            self._assistant(m, content, i)
        elif m.role == "tool":
            self.messages.append(Message(role="tool", content=content, name=m.tool_name, tool_call_id=self._answered(m)))
        else:
            self.messages.append(Message(role=m.role, content=content))

    def _assistant(self, m: oll.Message, content: str, i: int) -> None:
        calls = tuple(
            ToolCall(id=c.id or f"call_{i}_{k}", name=c.function.name, arguments=json.dumps(c.function.arguments, ensure_ascii=False))
            for k, c in enumerate(m.tool_calls or ())
        )
        self._open.extend(calls)
        text = content if content or not calls else None
        self.messages.append(Message(role="assistant", content=text, tool_calls=calls, reasoning=m.thinking or None))

    def _answered(self, m: oll.Message) -> str | None:
        """The id of the call a tool message answers: its own `tool_call_id`, else the oldest
        open call of its `tool_name`, else the oldest open call (Ollama pairs them by order)."""
        match = next((c for c in self._open if c.id == m.tool_call_id), None) if m.tool_call_id else None
        if match is None and m.tool_name:
            match = next((c for c in self._open if c.name == m.tool_name), None)
        if match is None and not m.tool_call_id and self._open:
            match = self._open[0]
        if match is not None:
            self._open.remove(match)
            return match.id
        return m.tool_call_id


def tools_of(tools: list[oll.Tool] | None) -> tuple[ToolSpec, ...]:
    specs = tuple(
        ToolSpec(
            name=t.function.name,
            description=t.function.description or "",
            parameters=t.function.parameters or {"type": "object", "properties": {}},
        )
        for t in tools or ()
    )
    names = [t.name for t in specs]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools holds two functions with the same name.", param="tools")
    return specs


def neutral(
    req: oll.ChatRequest | oll.GenerateRequest, model: str | None, history: History, tools: tuple[ToolSpec, ...] = ()
) -> ChatRequest:
    kwargs, include_reasoning = think_options(req.think)
    params, stops, max_tokens, given = sampling(req.options)
    return ChatRequest(
        messages=tuple(history.messages),
        model=model,
        options=ChatOptions(tools=tools, template_kwargs=kwargs, include_reasoning=include_reasoning),
        images=tuple(history.images),
        response_schema=response_schema(req.format),
        sampling=params,
        max_tokens=max_tokens,
        stops=stops,
        param_names=PARAM_NAMES,
        sampling_set=given,
        context_limit=context_limit(req.options),
    )


def chat_request(req: oll.ChatRequest, model: str | None) -> ChatRequest:
    """/api/chat as the neutral request (`model`: the served id the name resolved to)."""
    history = History()
    for i, m in enumerate(req.messages):
        history.add(m, i)
    return neutral(req, model, history, tools_of(req.tools))


def generate_request(req: oll.GenerateRequest, model: str | None) -> ChatRequest:
    """/api/generate (neither raw nor with a suffix) as a chat of one user turn, after the
    `system` prompt if one is given, rendered by the model's chat template as Ollama does."""
    history = History()
    if req.system:
        history.add(oll.Message(role="system", content=req.system), 0)
    history.add(oll.Message(role="user", content=req.prompt, images=req.images), 0, images_at="images")
    return neutral(req, model, history)
