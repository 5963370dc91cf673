"""OpenAI Responses API request models (pydantic v2), mirroring the `openai` package's
`types/responses/*_param.py`. Input items, their content parts, tools, tool choices and text
formats are unions discriminated on `type`; a type this server does not know lands in the
union's `Other*` model, which keeps only the type, so that the conversion can skip it
(SKIPPED_ITEMS, tools it cannot run) or refuse it by name and place. Every other field is
typed, so a wrong type anywhere is a 400 naming its path ('input[2].summary') before any work.
Unknown fields are accepted and ignored; the parts the response echoes (tools, tool_choice,
text, reasoning) keep theirs, to be sent back as they came."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from toolserve.api.openai.schemas import _Model, _Request


def _by_type(other: str, default: str | None = None, **tags: str) -> Any:
    """A discriminator on an object's `type`: its known types by tag, anything else (a type
    this server does not know, a `type` that is no string, a value that is no object) `other`.
    `default` is the type of an object without one. Tags are class names, which error params
    leave out ('input[2].summary')."""

    def tag(value: Any) -> str:
        kind = value.get("type", default) if isinstance(value, dict) else getattr(value, "type", None)
        return tags.get(kind, other) if isinstance(kind, str) else other

    return Discriminator(tag)


# a string, or a list (or object) of parts: errors then speak of the branch the value took
_STR_OR_LIST = Discriminator(lambda v: "str" if isinstance(v, str) else "list")
_STR_OR_DICT = Discriminator(lambda v: "str" if isinstance(v, str) else "dict")


class _Echoed(_Model):
    """A part of the request that the response echoes: its unknown fields are kept."""

    model_config = ConfigDict(extra="allow")


# --- content parts


class TextPart(_Model):
    """input_text, an assistant's earlier output_text, and the other text parts."""

    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str


class RefusalPart(_Model):
    type: Literal["refusal"]
    refusal: str


class ImagePart(_Model):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class OtherPart(_Model):
    """A part this server does not take (input_file, input_audio, ...)."""

    type: str


Part = Annotated[
    Annotated[TextPart, Tag("TextPart")]
    | Annotated[RefusalPart, Tag("RefusalPart")]
    | Annotated[ImagePart, Tag("ImagePart")]
    | Annotated[OtherPart, Tag("OtherPart")],
    _by_type(
        "OtherPart", input_text="TextPart", output_text="TextPart", text="TextPart", summary_text="TextPart",
        reasoning_text="TextPart", refusal="RefusalPart", input_image="ImagePart",
    ),
]
Content = Annotated[Annotated[str, Tag("str")] | Annotated[list[Part], Tag("list")], _STR_OR_LIST]


# --- input items


class MessageItem(_Model):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Content = ""


class FunctionCallItem(_Model):
    type: Literal["function_call"]
    call_id: str | None = None  # OpenAI's is required; older clients sent only `id`
    id: str | None = None
    name: str
    namespace: str | None = None
    arguments: str | dict[str, Any] = "{}"  # a JSON text; an object is taken as in chat


class CustomCallItem(_Model):
    type: Literal["custom_tool_call"]
    call_id: str | None = None
    id: str | None = None
    name: str
    namespace: str | None = None
    input: str = ""


class CallOutputItem(_Model):
    """function_call_output or custom_tool_call_output: the answer to an earlier call."""

    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str | None = None  # required: refused with the other reference checks, by name
    output: Content


class SummaryText(_Model):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningText(_Model):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(_Model):
    type: Literal["reasoning"]
    summary: list[SummaryText] | None = None
    content: list[ReasoningText] | None = None


class McpListedTool(_Model):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=dict)
    annotations: dict[str, Any] | None = None


class McpListToolsItem(_Model):
    """An earlier `mcp_list_tools` output sent back: its server is not listed again."""

    type: Literal["mcp_list_tools"]
    id: str | None = None
    server_label: str
    tools: list[McpListedTool]
    error: str | None = None


class McpCallItem(_Model):
    """An earlier `mcp_call` sent back: a call and its result in the history."""

    type: Literal["mcp_call"]
    id: str
    server_label: str
    name: str
    arguments: str = "{}"
    output: str | None = None
    error: Any = None


class McpApprovalRequestItem(_Model):
    type: Literal["mcp_approval_request"]
    id: str
    server_label: str
    name: str
    arguments: str = "{}"


class McpApprovalResponseItem(_Model):
    type: Literal["mcp_approval_response"]
    approval_request_id: str
    approve: bool
    id: str | None = None
    reason: str | None = None


class OtherItem(_Model):
    """An item this server skips (SKIPPED_ITEMS) or does not take."""

    type: str


Item = Annotated[
    Annotated[MessageItem, Tag("MessageItem")]
    | Annotated[FunctionCallItem, Tag("FunctionCallItem")]
    | Annotated[CustomCallItem, Tag("CustomCallItem")]
    | Annotated[CallOutputItem, Tag("CallOutputItem")]
    | Annotated[ReasoningItem, Tag("ReasoningItem")]
    | Annotated[McpListToolsItem, Tag("McpListToolsItem")]
    | Annotated[McpCallItem, Tag("McpCallItem")]
    | Annotated[McpApprovalRequestItem, Tag("McpApprovalRequestItem")]
    | Annotated[McpApprovalResponseItem, Tag("McpApprovalResponseItem")]
    | Annotated[OtherItem, Tag("OtherItem")],
    _by_type(
        "OtherItem", default="message", message="MessageItem", function_call="FunctionCallItem",
        custom_tool_call="CustomCallItem", function_call_output="CallOutputItem",
        custom_tool_call_output="CallOutputItem", reasoning="ReasoningItem", mcp_list_tools="McpListToolsItem",
        mcp_call="McpCallItem", mcp_approval_request="McpApprovalRequestItem",
        mcp_approval_response="McpApprovalResponseItem",
    ),
]


# --- tools


class FunctionTool(_Echoed):
    type: Literal["function"] = "function"  # may be left out inside a namespace
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomTool(_Echoed):
    """A freeform tool: the model's whole input is one string."""

    type: Literal["custom"]
    name: str = Field(min_length=1)
    description: str | None = None
    format: dict[str, Any] | None = None  # text or a grammar: not enforced


class ToolFilter(_Echoed):
    """Tools of an MCP server by name, and/or those annotated read-only."""

    tool_names: list[str] | None = None
    read_only: bool | None = None


class ApprovalFilter(_Echoed):
    always: ToolFilter | None = None
    never: ToolFilter | None = None


class McpTool(_Echoed):
    """A remote MCP server (`server_url`), or one of --mcp-config named by `server_label`."""

    type: Literal["mcp"]
    server_label: str = Field(min_length=1)
    server_url: str | None = None
    connector_id: str | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    allowed_tools: list[str] | ToolFilter | None = None
    require_approval: Literal["always", "never"] | ApprovalFilter | None = None
    server_description: str | None = None


class OtherTool(_Echoed):
    """A tool this server cannot run (web_search, code_interpreter, ...): dropped."""

    type: str


InnerTool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")] | Annotated[CustomTool, Tag("CustomTool")] | Annotated[OtherTool, Tag("OtherTool")],
    _by_type("OtherTool", default="function", function="FunctionTool", custom="CustomTool"),
]


class NamespaceTool(_Echoed):
    type: Literal["namespace"]
    name: str = Field(min_length=1)
    description: str | None = None
    tools: list[InnerTool]


Tool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")]
    | Annotated[CustomTool, Tag("CustomTool")]
    | Annotated[NamespaceTool, Tag("NamespaceTool")]
    | Annotated[McpTool, Tag("McpTool")]
    | Annotated[OtherTool, Tag("OtherTool")],
    _by_type("OtherTool", function="FunctionTool", custom="CustomTool", namespace="NamespaceTool", mcp="McpTool"),
]


class NamedChoice(_Echoed):
    """{"type": "function" | "custom", "name": ...}: that tool must be called."""

    type: Literal["function", "custom"]
    name: str
    namespace: str | None = Field(default=None, min_length=1)


class AllowedToolsChoice(_Echoed):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class McpChoice(_Echoed):
    """A tool of an MCP server must be called (`name`), or any of its tools."""

    type: Literal["mcp"]
    server_label: str
    name: str | None = None


class OtherChoice(_Echoed):
    """The choice of a hosted tool (file_search, ...), whose tool is dropped."""

    type: str


ChoiceObject = Annotated[
    Annotated[NamedChoice, Tag("NamedChoice")]
    | Annotated[AllowedToolsChoice, Tag("AllowedToolsChoice")]
    | Annotated[McpChoice, Tag("McpChoice")]
    | Annotated[OtherChoice, Tag("OtherChoice")],
    _by_type("OtherChoice", function="NamedChoice", custom="NamedChoice", allowed_tools="AllowedToolsChoice", mcp="McpChoice"),
]
ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("str")] | Annotated[ChoiceObject, Tag("dict")], _STR_OR_DICT
]


# --- text format and reasoning


class PlainFormat(_Echoed):
    type: Literal["text", "json_object"]


class JsonSchemaFormat(_Echoed):
    type: Literal["json_schema"]
    name: str | None = None  # OpenAI's is required; nothing here reads it
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class OtherFormat(_Echoed):
    type: str


Format = Annotated[
    Annotated[PlainFormat, Tag("PlainFormat")]
    | Annotated[JsonSchemaFormat, Tag("JsonSchemaFormat")]
    | Annotated[OtherFormat, Tag("OtherFormat")],
    _by_type("OtherFormat", text="PlainFormat", json_object="PlainFormat", json_schema="JsonSchemaFormat"),
]


class TextConfig(_Echoed):
    format: Format | None = None
    verbosity: str | None = None


class ReasoningConfig(_Echoed):
    effort: str | None = None  # none, minimal, low, medium, high, xhigh, ...: the template's switch
    summary: str | None = None
    generate_summary: str | None = None


class ResponsesRequest(_Request):
    model: str | None = None
    input: Annotated[Annotated[str, Tag("str")] | Annotated[list[Item], Tag("list")], _STR_OR_LIST] = ""
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    background: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # OpenAI's, typed so that a wrong type is refused as there, though nothing here reads them
    include: list[str] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    top_logprobs: int | None = Field(default=None, ge=0)
    # toolserve's extensions, as on chat completions
    seed: int | None = None
    stop: str | list[str] | None = None
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None  # as in chat

    def echoed(self, field: Literal["tools", "tool_choice", "text", "reasoning"]) -> Any:
        """The client's value of `field`, as JSON, for the response to echo."""
        value = getattr(self, field)
        if isinstance(value, list):
            return [v.model_dump(mode="json", exclude_unset=True, by_alias=True) for v in value]
        return value.model_dump(mode="json", exclude_unset=True, by_alias=True) if isinstance(value, _Model) else value
