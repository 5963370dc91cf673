"""OpenAI Responses API requests -> the neutral ChatRequest.

Input items become chat messages: a `function_call` joins the assistant message before it, a
`reasoning` item becomes the reasoning of the next assistant message, `*_output` items become
tool messages. Tools toolserve cannot run (web search, file search, code interpreter, computer
use, image generation, hosted shells) are dropped with one log line; a `custom` (freeform)
tool is offered as a function with one string parameter `input` and answered as a
`custom_tool_call`; the functions of a `namespace` are offered as `NAMESPACE__NAME`. `mcp`
tools are listed and run by `responses_mcp.py`, which passes their functions in; MCP items
sent back (`mcp_call`, `mcp_approval_request`) are history, and each `mcp_approval_response`
leaves a tool message for its call's result, filled in once the call has run.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from toolserve.api.openai.convert import UNKNOWN_VOCAB, _logit_bias
from toolserve.api.responses.schemas import (
    AllowedToolsChoice,
    CallOutputItem,
    Content,
    CustomCallItem,
    CustomTool,
    FunctionCallItem,
    FunctionTool,
    ImagePart,
    JsonSchemaFormat,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpChoice,
    McpListToolsItem,
    McpTool,
    MessageItem,
    NamedChoice,
    NamespaceTool,
    OtherItem,
    PlainFormat,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    TextConfig,
    TextPart,
    Tool,
    ToolChoice,
)
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
    "image_generation_call", "code_interpreter_call", "tool_search_call", "tool_search_output", "compaction",
}
PARAMS = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format", "n": "n", "stop": "stop"}


@dataclass(frozen=True)
class McpName:
    """A tool of an MCP server as the model calls it."""

    label: str  # the server's label
    name: str  # the tool's name on that server
    approval: bool = False  # a call waits for an mcp_approval_response


@dataclass(frozen=True)
class Approval:
    """An `mcp_approval_response` of the input, and where its call's result goes."""

    request_id: str
    approve: bool
    at: int  # index of its tool message in the conversation


class ToolNames:
    """The tools as the model sees them, and back: custom tools, namespaced functions and the
    tools of MCP servers; and the MCP items of the input."""

    def __init__(self) -> None:
        self.custom: set[str] = set()
        self.namespaced: dict[str, tuple[str, str]] = {}  # flat name -> (namespace, name)
        self.mcp: dict[str, McpName] = {}  # flat name -> its server and name
        self.approvals: list[Approval] = []
        self.approval_requests: dict[str, McpApprovalRequestItem] = {}  # sent back in the input, by id

    def origin(self, flat: str) -> tuple[str, str | None, bool]:
        """(name, namespace, is_custom) of a tool the model called by its flat name."""
        if flat in self.namespaced:
            ns, name = self.namespaced[flat]
            return name, ns, False
        return flat, None, flat in self.custom

    def flat(self, name: str, namespace: str | None) -> str:
        return f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name


def _spec(t: FunctionTool, name: str) -> ToolSpec:
    params = t.parameters or {"type": "object", "properties": {}}
    return ToolSpec(name=name, description=t.description or "", parameters=params, strict=bool(t.strict))


def tools_of(tools: list[Tool], names: ToolNames) -> tuple[ToolSpec, ...]:
    out: list[ToolSpec] = []
    dropped: list[str] = []
    for t in tools:
        if isinstance(t, FunctionTool):
            out.append(_spec(t, t.name))
        elif isinstance(t, CustomTool):
            names.custom.add(t.name)
            out.append(ToolSpec(name=t.name, description=t.description or "", parameters=CUSTOM_SCHEMA))
        elif isinstance(t, McpTool):
            continue  # listed by responses_mcp.py, which passes their functions in
        elif isinstance(t, NamespaceTool):
            for inner in t.tools:
                if isinstance(inner, FunctionTool):
                    flat = names.flat(inner.name, t.name)
                    names.namespaced[flat] = (t.name, inner.name)
                    out.append(_spec(inner, flat))
                else:
                    dropped.append(f"{inner.type} (in a namespace)")
        else:
            dropped.append(t.type)
    if dropped:
        log.info("responses: tools of type %s dropped: toolserve cannot run them", ", ".join(sorted(set(dropped))))
    seen = [t.name for t in out]
    if len(set(seen)) != len(seen):
        raise InvalidRequest("tools holds two tools with the same name.", param="tools")
    return tuple(out)


def tool_choice_of(choice: ToolChoice | None, tools: tuple[ToolSpec, ...], names: ToolNames) -> tuple[str, str | None]:
    if choice is None or choice == "auto":
        return "auto", None
    if isinstance(choice, AllowedToolsChoice):
        choice = choice.mode
    if isinstance(choice, str):
        if choice == "required" and not tools:
            raise InvalidRequest("tool_choice 'required' needs at least one tool in tools.", param="tool_choice")
        return choice, None
    if isinstance(choice, NamedChoice):
        namespaces = {ns for ns, _ in names.namespaced.values()}
        if choice.namespace is not None and choice.namespace not in namespaces:
            msg = f"tool_choice names the namespace '{choice.namespace[:100]}', which offers no function in tools."
            raise InvalidRequest(msg, param="tool_choice")
        name = names.flat(choice.name, choice.namespace)
        if name not in {t.name for t in tools}:
            raise InvalidRequest(f"tool_choice names '{name[:100]}', which is not in tools.", param="tool_choice")
        return "function", name
    if isinstance(choice, McpChoice):
        offered = [flat for flat, m in names.mcp.items() if m.label == choice.server_label and choice.name in (None, m.name)]
        if not offered:
            what = f"a tool '{choice.name[:100]}' of" if choice.name else "any tool of"
            raise InvalidRequest(f"tool_choice names {what} the MCP server '{choice.server_label[:100]}', which is not offered.", param="tool_choice")
        return ("function", offered[0]) if choice.name else ("required", None)
    raise InvalidRequest(f"tool_choice of type '{choice.type}' is not one this server takes.", param="tool_choice")


def response_schema_of(text: TextConfig | None) -> ResponseSchema | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if isinstance(fmt, JsonSchemaFormat):
        return "json_schema", fmt.schema_
    if isinstance(fmt, PlainFormat):
        return "json_object", None
    raise InvalidRequest(f"text.format type {fmt.type!r} is not one of text, json_object, json_schema.", param="text.format")


def _text(content: Content, where: str, role: str, images: list[ImageRef]) -> str:
    if isinstance(content, str):
        return content.replace(MEDIA_MARKER, "")
    out, last_text = "", False
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if isinstance(part, ImagePart):
            if role != "user":
                raise InvalidRequest(f"{at}: images go in user messages only.", param=at)
            if not part.image_url:
                raise Unsupported(f"{at}: only images given as image_url (a data URI or URL) are taken.", param=at)
            images.append(ImageRef(at, part.image_url))
            out += MEDIA_MARKER
            last_text = False
        elif isinstance(part, TextPart | RefusalPart):
            text = part.text if isinstance(part, TextPart) else part.refusal
            out += ("\n" if last_text else "") + text.replace(MEDIA_MARKER, "")
            last_text = True
        else:
            raise Unsupported(f"{at} is of type {part.type!r}, which this server does not take.", param=at)
    return out


def _output_text(output: Content, where: str) -> str:
    if isinstance(output, str):
        return output
    return _text(output, where, "tool", [])


def _call(item: FunctionCallItem | CustomCallItem, i: int, names: ToolNames) -> ToolCall:
    call_id = item.call_id or item.id or f"call_{i}"
    name = names.flat(item.name, item.namespace)
    if isinstance(item, CustomCallItem):
        return ToolCall(call_id, name, json.dumps({"input": item.input}))
    args = item.arguments
    return ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args))


def messages_of(req: ResponsesRequest, names: ToolNames, history: tuple[Message, ...] = ()) -> tuple[list[Message], list[ImageRef]]:
    """The conversation: stored history (previous_response_id), instructions, then input.
    An output must answer a call made before it, here or in the history, as OpenAI checks."""
    out: list[Message] = list(history)
    images: list[ImageRef] = []
    items = [MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else req.input
    calls_made = {c.id for m in history for c in m.tool_calls}
    referenced = False  # an item_reference may stand for a call this server cannot see
    reasoning: str | None = None
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if isinstance(item, MessageItem):
            text = _text(item.content, where, item.role, images)
            if item.role == "assistant":
                out.append(Message(role="assistant", content=text, reasoning=reasoning))
                reasoning = None
            else:
                out.append(Message(role=item.role, content=text))
        elif isinstance(item, FunctionCallItem | CustomCallItem):
            call = _call(item, i, names)
            calls_made.add(call.id)
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and reasoning is None:
                out[-1] = Message(role="assistant", content=last.content, tool_calls=(*last.tool_calls, call), reasoning=last.reasoning)
            else:
                out.append(Message(role="assistant", content=None, tool_calls=(call,), reasoning=reasoning))
                reasoning = None
        elif isinstance(item, CallOutputItem):
            if not item.call_id:
                raise InvalidRequest(f"{where} needs 'call_id'.", param=f"{where}.call_id")
            if item.call_id not in calls_made and not referenced:
                kind = "function" if item.type == "function_call_output" else "custom tool"
                msg = f"No tool call found for {kind} call output with call_id {item.call_id[:100]}."
                raise InvalidRequest(msg, param=f"{where}.call_id")
            out.append(Message(role="tool", content=_output_text(item.output, where), tool_call_id=item.call_id))
        elif isinstance(item, McpCallItem | McpApprovalRequestItem):
            call = ToolCall(item.id, item.name, item.arguments)
            calls_made.add(item.id)
            out.append(Message(role="assistant", content=None, tool_calls=(call,), reasoning=reasoning))
            reasoning = None
            if isinstance(item, McpCallItem):
                result = item.output if item.error is None else f"Error: {json.dumps(item.error)[:2000]}"
                out.append(Message(role="tool", content=result or "", tool_call_id=item.id))
            else:
                names.approval_requests[item.id] = item
        elif isinstance(item, McpApprovalResponseItem):
            # the call's result, once it has run (or the refusal) replaces this message
            names.approvals.append(Approval(item.approval_request_id, item.approve, len(out)))
            out.append(Message(role="tool", content="", tool_call_id=item.approval_request_id))
        elif isinstance(item, McpListToolsItem):
            pass  # read by responses_mcp.py: its server is not listed again
        elif isinstance(item, ReasoningItem):
            text = "\n".join(p.text for p in item.content or item.summary or [])
            reasoning = (reasoning + "\n" + text) if reasoning else (text or None)
        elif isinstance(item, OtherItem) and item.type in SKIPPED_ITEMS:
            referenced = referenced or item.type == "item_reference"
        else:
            raise InvalidRequest(f"{where} is of type {item.type!r}, which this server does not take.", param=f"{where}.type")
    if not out:
        raise InvalidRequest("input is empty.", param="input")
    return out, images


def chat_request(
    req: ResponsesRequest, history: tuple[Message, ...] = (), names: ToolNames | None = None, mcp_tools: tuple[ToolSpec, ...] = ()
) -> tuple[ChatRequest, ToolNames, list[Message]]:
    """The neutral request, the tools' names, and the conversation so far without this
    request's instructions (what a later previous_response_id continues). `names` and
    `mcp_tools`: the MCP servers' tools, listed by responses_mcp.py."""
    if req.background:
        raise Unsupported("background responses are not supported; send the request without 'background'.", param="background")
    names = names or ToolNames()
    tools = tools_of(req.tools or [], names) + mcp_tools
    if len({t.name for t in tools}) != len(tools):
        raise InvalidRequest("tools holds two tools with the same name (an MCP server's tool among them).", param="tools")
    choice, name = tool_choice_of(req.tool_choice, tools, names)
    kwargs: dict[str, Any] = {}
    effort = req.reasoning.effort if req.reasoning is not None else None
    if effort is not None:  # the template's thinking switch, where it has one (Qwen 3, gpt-oss, ...)
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
        sampling_set=frozenset(k for k in SAMPLING_DEFAULTS if getattr(req, k, None) is not None),
    )
    return neutral, names, messages
