"""OpenAI Responses API requests -> the neutral ChatRequest.

Input items become chat messages: a `function_call` joins the assistant message before it, a
`reasoning` item becomes the reasoning of the next assistant message, `*_output` items become
tool messages. Tools toolserve cannot run (web search, file search, code interpreter, computer
use, image generation, MCP, hosted shells) are dropped with one log line; a `custom` (freeform)
tool is offered as a function with one string parameter `input` and answered as a
`custom_tool_call`; the functions of a `namespace` are offered as `NAMESPACE__NAME`.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import Field

from toolserve.api.convert import UNKNOWN_VOCAB, _logit_bias
from toolserve.api.schemas import _Request
from toolserve.errors import InvalidRequest, Unsupported
from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ChatRequest, ImageRef, ResponseSchema
from toolserve.serving.pipeline import SAMPLING_DEFAULTS
from toolserve.types import Message, SamplingParams, ToolCall, ToolSpec

log = logging.getLogger(__name__)

NAMESPACE_SEP = "__"
CUSTOM_SCHEMA = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's whole input, as free text."}},
    "required": ["input"],
}
# item types of the Responses API that carry nothing a local model can use as history
SKIPPED_ITEMS = {
    "item_reference", "web_search_call", "file_search_call", "computer_call", "computer_call_output",
    "image_generation_call", "code_interpreter_call", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "mcp_call", "tool_search_call", "tool_search_output", "compaction",
}
PARAMS = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format", "n": "n", "stop": "stop"}


class ResponsesRequest(_Request):
    model: str | None = None
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    background: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # toolserve's extensions, as on chat completions
    seed: int | None = None
    stop: str | list[str] | None = None
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None


class ToolNames:
    """The tools as the model sees them, and back: custom tools and namespaced functions."""

    def __init__(self) -> None:
        self.custom: set[str] = set()
        self.namespaced: dict[str, tuple[str, str]] = {}  # flat name -> (namespace, name)

    def origin(self, flat: str) -> tuple[str, str | None, bool]:
        """(name, namespace, is_custom) of a tool the model called by its flat name."""
        if flat in self.namespaced:
            ns, name = self.namespaced[flat]
            return name, ns, False
        return flat, None, flat in self.custom

    def flat(self, name: str, namespace: str | None) -> str:
        return f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name


def _spec(where: str, t: dict[str, Any], name: str) -> ToolSpec:
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where} needs a 'name'.", param=where)
    params = t.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise InvalidRequest(f"{where}.parameters must be a JSON schema object.", param=f"{where}.parameters")
    return ToolSpec(name=name, description=str(t.get("description") or ""), parameters=params, strict=bool(t.get("strict")))


def tools_of(raw: list[dict[str, Any]], names: ToolNames) -> tuple[ToolSpec, ...]:
    out: list[ToolSpec] = []
    dropped: list[str] = []
    for i, t in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise InvalidRequest(f"{where} must be an object.", param=where)
        kind = t.get("type")
        if kind == "function":
            out.append(_spec(where, t, t.get("name", "")))
        elif kind == "custom":
            names.custom.add(str(t.get("name")))
            desc = str(t.get("description") or "")
            out.append(ToolSpec(name=str(t.get("name")), description=desc, parameters=CUSTOM_SCHEMA))
        elif kind == "namespace":
            ns = str(t.get("name") or "")
            for j, inner in enumerate(t.get("tools") or []):
                if isinstance(inner, dict) and inner.get("type", "function") == "function":
                    flat = names.flat(str(inner.get("name")), ns)
                    names.namespaced[flat] = (ns, str(inner.get("name")))
                    out.append(_spec(f"{where}.tools[{j}]", inner, flat))
        else:
            dropped.append(str(kind))
    if dropped:
        log.info("responses: tools of type %s dropped: toolserve cannot run them", ", ".join(sorted(set(dropped))))
    seen = [t.name for t in out]
    if len(set(seen)) != len(seen):
        raise InvalidRequest("tools holds two tools with the same name.", param="tools")
    return tuple(out)


def tool_choice_of(raw: str | dict[str, Any] | None, tools: tuple[ToolSpec, ...], names: ToolNames) -> tuple[str, str | None]:
    if raw is None or raw == "auto":
        return "auto", None
    if raw in ("none", "required"):
        if raw == "required" and not tools:
            raise InvalidRequest("tool_choice 'required' needs at least one tool in tools.", param="tool_choice")
        return str(raw), None
    if isinstance(raw, dict) and raw.get("type") in ("function", "custom"):
        name = names.flat(str(raw.get("name")), raw.get("namespace"))
        if name not in {t.name for t in tools}:
            raise InvalidRequest(f"tool_choice names '{name}', which is not in tools.", param="tool_choice")
        return "function", name
    if isinstance(raw, dict) and raw.get("type") == "allowed_tools":
        return ("required" if raw.get("mode") == "required" else "auto"), None
    raise InvalidRequest(f"tool_choice {json.dumps(raw)[:100]} is not one this server takes.", param="tool_choice")


def response_schema_of(text: dict[str, Any] | None) -> ResponseSchema | None:
    fmt = (text or {}).get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return "json_object", None
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("text.format json_schema needs 'schema' (an object).", param="text.format.schema")
        return "json_schema", schema
    raise InvalidRequest(f"text.format type {kind!r} is not one of text, json_object, json_schema.", param="text.format")


def _text(content: Any, where: str, role: str, images: list[ImageRef]) -> str:
    if isinstance(content, str):
        return content.replace(MEDIA_MARKER, "")
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of parts.", param=f"{where}.content")
    out, last_text = "", False
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal"):
            text = str(part.get("text", part.get("refusal", "")))
            out += ("\n" if last_text else "") + text.replace(MEDIA_MARKER, "")
            last_text = True
        elif kind == "input_image":
            if role != "user":
                raise InvalidRequest(f"{at}: images go in user messages only.", param=at)
            url = part.get("image_url") or ""
            if not url:
                raise Unsupported(f"{at}: only images given as image_url (a data URI or URL) are taken.", param=at)
            images.append(ImageRef(at, str(url)))
            out += MEDIA_MARKER
            last_text = False
        else:
            raise Unsupported(f"{at} is of type {kind!r}, which this server does not take.", param=at)
    return out


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    return _text(output, where, "tool", [])


def messages_of(req: ResponsesRequest, names: ToolNames, history: tuple[Message, ...] = ()) -> tuple[list[Message], list[ImageRef]]:
    """The conversation: stored history (previous_response_id), instructions, then input."""
    out: list[Message] = list(history)
    images: list[ImageRef] = []
    items = [{"type": "message", "role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    reasoning: str | None = None
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object.", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise InvalidRequest(f"{where}.role must be user, system, developer or assistant.", param=f"{where}.role")
            text = _text(item.get("content", ""), where, str(role), images)
            if role == "assistant":
                out.append(Message(role="assistant", content=text, reasoning=reasoning))
                reasoning = None
            else:
                out.append(Message(role=str(role), content=text))
        elif kind in ("function_call", "custom_tool_call"):
            call_id = str(item.get("call_id") or item.get("id") or f"call_{i}")
            name = names.flat(str(item.get("name") or ""), item.get("namespace"))
            args = item.get("arguments", "{}") if kind == "function_call" else json.dumps({"input": item.get("input", "")})
            call = ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args))
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and reasoning is None:
                out[-1] = Message(role="assistant", content=last.content, tool_calls=(*last.tool_calls, call), reasoning=last.reasoning)
            else:
                out.append(Message(role="assistant", content=None, tool_calls=(call,), reasoning=reasoning))
                reasoning = None
        elif kind in ("function_call_output", "custom_tool_call_output"):
            answered = item.get("call_id")
            if not answered:
                raise InvalidRequest(f"{where} needs 'call_id'.", param=f"{where}.call_id")
            out.append(Message(role="tool", content=_output_text(item.get("output", ""), where), tool_call_id=str(answered)))
        elif kind == "reasoning":
            parts = [*(item.get("content") or []), *(item.get("summary") or [])] if not item.get("content") else item["content"]
            text = "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
            reasoning = (reasoning + "\n" + text) if reasoning else (text or None)
        elif kind in SKIPPED_ITEMS:
            continue
        else:
            raise InvalidRequest(f"{where} is of type {kind!r}, which this server does not take.", param=f"{where}.type")
    if not out:
        raise InvalidRequest("input is empty.", param="input")
    return out, images


def chat_request(req: ResponsesRequest, history: tuple[Message, ...] = ()) -> tuple[ChatRequest, ToolNames, list[Message]]:
    """The neutral request, the tools' names, and the conversation so far without this
    request's instructions (what a later previous_response_id continues)."""
    if req.background:
        raise Unsupported("background responses are not supported; send the request without 'background'.", param="background")
    names = ToolNames()
    tools = tools_of(req.tools or [], names)
    choice, name = tool_choice_of(req.tool_choice, tools, names)
    kwargs: dict[str, Any] = {}
    effort = (req.reasoning or {}).get("effort")
    if isinstance(effort, str):  # the template's thinking switch, where it has one (Qwen 3, gpt-oss, ...)
        kwargs = {"enable_thinking": effort not in ("none", "minimal"), "reasoning_effort": effort}
    options = ChatOptions(
        tools=tools, tool_choice=choice, tool_name=name,
        parallel_tool_calls=req.parallel_tool_calls is not False, template_kwargs=kwargs,
    )
    messages, images = messages_of(req, names, history)
    # instructions apply to this request only (a continuation sends its own)
    prompt = [Message(role="system", content=req.instructions), *messages] if req.instructions else messages
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    sampling = SamplingParams(
        max_tokens=0,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        min_p=req.min_p or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        seed=req.seed,
        logit_bias=_logit_bias(req.logit_bias, UNKNOWN_VOCAB),
    )
    neutral = ChatRequest(
        messages=tuple(prompt), model=req.model, options=options, images=tuple(images),
        response_schema=response_schema_of(req.text), sampling=sampling, max_tokens=req.max_output_tokens,
        stops=tuple(stops), param_names=PARAMS,
        sampling_set=frozenset(k for k in SAMPLING_DEFAULTS if getattr(req, k) is not None),
    )
    return neutral, names, messages
