"""OpenAI request models (pydantic v2). Unknown fields are accepted and ignored, as OpenAI does."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator
from pydantic_core import PydanticCustomError

SURROGATE_ERROR = "unpaired_surrogate"
NONFINITE_ERROR = "non_finite_number"
# the custom errors of `_Request`'s check, and the `code` of their 400
REQUEST_TEXT_ERRORS = {SURROGATE_ERROR: "invalid_unicode", NONFINITE_ERROR: "invalid_value"}
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _escaped(text: str) -> str:
    """Text that holds lone surrogates, sendable back: each spelled as its escape."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def first_invalid(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first place in a request body (a key or a value, at any depth) that no JSON text may
    hold, as (error type, OpenAI's spelling of the param: 'messages[0].content'); None if none.
    - a string with an unpaired UTF-16 surrogate: JSON's `\\ud800` escape decodes to one, and
      such text cannot become UTF-8 for the model;
    - NaN or an infinity: Python's JSON reader takes `NaN`, `Infinity` and `1e400`, which no
      JSON writer may send back (they reached the streams as is: issue 31).
    Iterative, so a deeply nested body cannot exhaust the stack."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return SURROGATE_ERROR, where
        elif isinstance(item, float):
            if not math.isfinite(item):
                return NONFINITE_ERROR, where
        elif isinstance(item, dict):
            inner = []
            for k, v in item.items():
                at = f"{where}.{k}" if where else str(k)
                if isinstance(k, str) and _SURROGATE.search(k):
                    return SURROGATE_ERROR, _escaped(at)  # the place itself must be valid Unicode to be sent back
                inner.append((v, at))
            stack.extend(reversed(inner))  # depth first, in document order
        elif isinstance(item, list):
            stack.extend(reversed([(v, f"{where}[{i}]") for i, v in enumerate(item)]))
    return None


def surrogate_path(value: Any, path: str = "") -> str | None:
    """Where a string of `value` holds an unpaired UTF-16 surrogate (see `first_invalid`)."""
    found = first_invalid(value, path)
    return found[1] if found is not None and found[0] == SURROGATE_ERROR else None


_MESSAGES = {
    SURROGATE_ERROR: "Invalid value for '{param}': the text holds an unpaired UTF-16 surrogate (a lone \\ud800-\\udfff escape), which is not valid Unicode.",
    NONFINITE_ERROR: "Invalid value for '{param}': NaN and infinite numbers (NaN, Infinity, 1e400) are not valid JSON.",
}


class _Request(_Model):
    """A request body: every string in it valid Unicode (no lone surrogates), every number finite."""

    @model_validator(mode="before")
    @classmethod
    def _only_json(cls, data: Any) -> Any:
        found = first_invalid(data)
        if found is not None:
            kind, path = found
            raise PydanticCustomError(kind, _MESSAGES[kind], {"param": path})
        return data


class TextPart(_Model):
    type: Literal["text"]
    text: str


class ImageURL(_Model):
    url: str
    detail: str | None = None


class ImagePart(_Model):
    type: Literal["image_url"]
    image_url: ImageURL


class AudioPart(_Model):
    type: Literal["input_audio"]
    input_audio: dict[str, Any]


ContentPart = Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]


class FunctionCall(_Model):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(_Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Model):
    type: Literal["function"]
    function: FunctionDef


class ToolChoiceFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"]
    function: ToolChoiceFunction


class StreamOptions(_Model):
    include_usage: bool = False


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ToolserveOptions(BaseModel):
    """toolserve's own request extension, `"toolserve": {...}` (docs/chat-page.md, "Raw output").
    Unknown keys are errors: a misspelt option would otherwise do nothing, silently."""

    model_config = ConfigDict(extra="forbid")
    raw: StrictBool = False  # the exact generated text of each choice, in the response's `toolserve` block


class _Sampling(_Request):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    repeat_penalty: float | None = Field(default=None, gt=0.0, le=10.0)  # llama.cpp's spelling
    dry_multiplier: float | None = Field(default=None, ge=0.0, le=10.0)  # llama.cpp's DRY sampler; 0: off
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    n: int = Field(default=1, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # toolserve's: speculative decoding from the prompt for this request (None: the server's --speculative)
    speculative: StrictBool | None = None
    # toolserve's: false lets an answer that has become one span repeated run on (serving/loops.py)
    loop_guard: StrictBool = True


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0)
    response_format: ResponseFormat | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    include_reasoning: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    toolserve: ToolserveOptions | None = None

    @property
    def wants_raw(self) -> bool:
        """`"toolserve": {"raw": true}`: the response carries each choice's generated text."""
        return bool(self.toolserve and self.toolserve.raw)


PromptInput = (
    str
    | Annotated[list[str], Field(min_length=1)]
    | Annotated[list[int], Field(min_length=1)]
    | Annotated[list[Annotated[list[int], Field(min_length=1)]], Field(min_length=1)]
)


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs` on a completion, the kinds toolserve in raw mode sends an
    upstream: `grammar` (llguidance's Lark), `json` (a JSON schema) or `json_object`. One of
    them; other keys are errors, not ignored (a constraint that silently did nothing)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    grammar: str | None = Field(default=None, min_length=1)
    json_schema: dict[str, Any] | None = Field(default=None, alias="json")
    json_object: Literal[True] | None = None

    @model_validator(mode="after")
    def _one(self) -> StructuredOutputs:
        if sum(v is not None for v in (self.grammar, self.json_schema, self.json_object)) != 1:
            raise ValueError("give exactly one of grammar, json, json_object")
        return self


class CompletionRequest(_Sampling):
    prompt: PromptInput
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)
    response_format: ResponseFormat | None = None  # as in chat (vLLM and SGLang take it here too)
    structured_outputs: StructuredOutputs | None = None  # as vLLM takes it


class TokenizeRequest(_Request):
    model: str | None = None
    prompt: str | None = None
    content: str | None = None  # llama.cpp's spelling
    messages: list[ChatMessage] | None = None
    tools: list[ToolDef] | None = None  # rendered into the prompt as a chat request's are
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


class EmbeddingRequest(_Request):
    """POST /v1/embeddings: text, texts, token ids or lists of token ids."""

    model: str | None = None
    input: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None
