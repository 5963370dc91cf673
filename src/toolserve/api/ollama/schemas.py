"""Ollama's request bodies (pydantic v2), field by field as its Go server reads them
(api/types.go) and the official `ollama` Python client sends them. Unknown fields and options
are accepted and ignored, as Ollama does; every body passes `_Request`'s check (no lone
surrogates, no NaN or infinities)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from toolserve.api.openai.schemas import _Model, _Request

Number = float | StrictInt
# keep_alive: seconds (a number; negative: forever) or a Go duration ("5m", "1h30m", "-1s")
KeepAlive = Number | StrictStr
# think: on, off, or a level ("low", "medium", "high", "max")
Think = StrictBool | Literal["low", "medium", "high", "max"]


class Options(_Model):
    """The `options` toolserve applies; Ollama's load-time options (num_gpu, num_thread,
    use_mmap, ...) and the samplers it does not have (mirostat, typical_p, ...) are ignored."""

    temperature: Annotated[float, Field(ge=0.0)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    seed: StrictInt | None = None  # negative: a random seed (Ollama's -1)
    stop: StrictStr | list[StrictStr] | None = None
    num_predict: StrictInt | None = None  # <= 0: until the context is full
    repeat_penalty: Annotated[float, Field(gt=0.0, le=10.0)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    num_ctx: StrictInt | None = None  # <= 0: unset; more than the model was loaded with: a 400


class FunctionCall(_Model):
    name: StrictStr
    arguments: dict[str, Any] = Field(default_factory=dict)  # an object, never a JSON text (Ollama's wire)
    index: StrictInt | None = None


class ToolCall(_Model):
    id: StrictStr | None = None
    function: FunctionCall


class Message(_Model):
    role: Literal["system", "user", "assistant", "tool"]
    content: StrictStr = ""
    thinking: StrictStr | None = None
    images: list[StrictStr] | None = None  # base64, no data: prefix
    tool_calls: list[ToolCall] | None = None
    tool_name: StrictStr | None = None
    tool_call_id: StrictStr | None = None


class FunctionDef(_Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,128}$")]
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Model):
    type: Literal["function"] = "function"
    function: FunctionDef


class _Generation(_Request):
    model: StrictStr | None = None  # none or empty: the default model (Ollama's is required)
    stream: StrictBool = True  # Ollama streams unless told not to
    format: Literal["", "json"] | dict[str, Any] | None = None
    options: Options | None = None
    keep_alive: KeepAlive | None = None
    think: Think | None = None


class ChatRequest(_Generation):
    """POST /api/chat. No messages: load the model (or with keep_alive 0, unload it)."""

    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] | None = None


class GenerateRequest(_Generation):
    """POST /api/generate. No prompt (and no suffix): load the model (keep_alive 0: unload)."""

    prompt: StrictStr = ""
    suffix: StrictStr | None = None  # fill-in-the-middle: the text after the answer ("" as none, as Ollama reads it)
    system: StrictStr | None = None
    template: StrictStr | None = None  # a Go template: refused (toolserve renders Jinja templates)
    context: list[StrictInt] | None = None  # Ollama's deprecated token memory: refused unless empty
    raw: StrictBool = False
    images: list[StrictStr] | None = None


class EmbedRequest(_Request):
    """POST /api/embed."""

    model: StrictStr | None = None
    input: StrictStr | list[StrictStr] = Field(default_factory=list)
    truncate: StrictBool = True  # Ollama's default: an input over the model's limit is cut to it
    dimensions: StrictInt | None = None
    options: Options | None = None
    keep_alive: KeepAlive | None = None


class EmbeddingsRequest(_Request):
    """POST /api/embeddings (Ollama's older, one-text endpoint)."""

    model: StrictStr | None = None
    prompt: StrictStr = ""
    options: Options | None = None
    keep_alive: KeepAlive | None = None


class ShowRequest(_Request):
    """POST /api/show (`name`: the older spelling of `model`)."""

    model: StrictStr | None = None
    name: StrictStr | None = None
    verbose: StrictBool = False
