"""Anthropic Messages API request models (pydantic v2), mirroring the `anthropic` package's
param types. Unknown fields (cache_control, metadata, service_tier, container, ...) are
accepted and ignored, as for the OpenAI models."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from toolserve.api.openai.schemas import _Model, _Request


class TextBlock(_Model):
    type: Literal["text"]
    text: str


class Base64Source(_Model):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(_Model):
    type: Literal["url"]
    url: str


class FileSource(_Model):
    type: Literal["file"]
    file_id: str


class ImageBlock(_Model):
    type: Literal["image"]
    source: Annotated[Base64Source | URLSource | FileSource, Field(discriminator="type")]


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class OtherBlock(_Model):
    """A block of a type this server does not take (document, search_result, server tool
    blocks, ...): kept as its type so that the error can name it and where it is."""

    type: str


def _by_type(**tags: str) -> Any:
    """A discriminator on a block's `type`: its known types by tag, anything else "OtherBlock".
    Tags are class names, which error params leave out ('messages[0].content[1].text')."""

    def tag(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return tags.get(str(kind), "OtherBlock")

    return Discriminator(tag)


# a string, or a list of blocks: errors then speak of the branch the value took
_STR_OR_LIST = Discriminator(lambda v: "str" if isinstance(v, str) else "list")


ResultPart = Annotated[
    Annotated[TextBlock, Tag("TextBlock")] | Annotated[ImageBlock, Tag("ImageBlock")] | Annotated[OtherBlock, Tag("OtherBlock")],
    _by_type(text="TextBlock", image="ImageBlock"),
]


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: str
    content: Annotated[Annotated[str, Tag("str")] | Annotated[list[ResultPart], Tag("list")], _STR_OR_LIST] | None = None
    is_error: bool = False


class ThinkingBlock(_Model):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None  # ours or Claude's: never checked, the text is taken as it is


class RedactedThinkingBlock(_Model):
    type: Literal["redacted_thinking"]
    data: str = ""


Block = Annotated[
    Annotated[TextBlock, Tag("TextBlock")]
    | Annotated[ImageBlock, Tag("ImageBlock")]
    | Annotated[ToolUseBlock, Tag("ToolUseBlock")]
    | Annotated[ToolResultBlock, Tag("ToolResultBlock")]
    | Annotated[ThinkingBlock, Tag("ThinkingBlock")]
    | Annotated[RedactedThinkingBlock, Tag("RedactedThinkingBlock")]
    | Annotated[OtherBlock, Tag("OtherBlock")],
    _by_type(
        text="TextBlock", image="ImageBlock", tool_use="ToolUseBlock", tool_result="ToolResultBlock",
        thinking="ThinkingBlock", redacted_thinking="RedactedThinkingBlock",
    ),
]


class MessageIn(_Model):
    role: Literal["user", "assistant", "system"]  # "system": the SDK's SystemMessageParam
    content: Annotated[Annotated[str, Tag("str")] | Annotated[list[Block], Tag("list")], _STR_OR_LIST]


class Tool(_Model):
    """A client tool (type absent or "custom"), or one of Anthropic's server tools
    (bash_20250124, web_search_*, ...), which carry a `type` and no input_schema."""

    type: str | None = None
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,128}$")]
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(_Model):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class Thinking(_Model):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = None  # no budget is enforced: max_tokens bounds the whole answer


class OutputFormat(_Model):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Model):
    format: OutputFormat | None = None  # effort and the rest: ignored


class CountTokensRequest(_Request):
    """POST /v1/messages/count_tokens: a Messages request without max_tokens."""

    model: str | None = None
    messages: Annotated[list[MessageIn], Field(min_length=1)]
    system: Annotated[Annotated[str, Tag("str")] | Annotated[list[TextBlock], Tag("list")], _STR_OR_LIST] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
