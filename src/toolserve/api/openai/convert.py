"""OpenAI chat completions (and completions) requests -> the neutral request of serving/."""

from __future__ import annotations

import json
from typing import Any

from toolserve.api.openai.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    ImagePart,
    TextPart,
    _Sampling,
)
from toolserve.errors import InvalidRequest, Unsupported
from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ChatRequest, ImageRef, check_counts
from toolserve.serving.pipeline import SAMPLING_DEFAULTS, Limits
from toolserve.types import Message, SamplingParams, ToolCall, ToolSpec

UNKNOWN_VOCAB = 2**31  # the model's vocabulary is checked later, by the model (or its upstream)


def chat_request(req: ChatCompletionRequest) -> ChatRequest:
    """A chat completions request as the neutral request."""
    check_chat_features(req)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    return ChatRequest(
        messages=tuple(to_messages(req.messages)),
        model=req.model,
        options=chat_options(req),
        images=tuple(ImageRef(where, url) for where, url in image_sources(req.messages)),
        response_schema=response_schema(req),
        sampling=sampling(req, max_tokens=0, n_vocab=UNKNOWN_VOCAB, logprobs=logprobs),
        max_tokens=req.max_completion_tokens or req.max_tokens,
        stops=tuple(stops(req)),
        n=req.n,
        sampling_set=sampling_sent(req),
    )


def sampling_sent(req: _Sampling) -> frozenset[str]:
    """The sampling fields the client set (the others take the model's defaults); llama.cpp's
    `repeat_penalty` is `repetition_penalty`."""
    sent = {k for k in SAMPLING_DEFAULTS if getattr(req, k, None) is not None}
    return frozenset(sent | ({"repetition_penalty"} if req.repeat_penalty is not None else set()))


def check_request_caps(req: ChatCompletionRequest | CompletionRequest, limits: Limits) -> None:
    """The caps on a request as the client wrote it (also one that is forwarded untouched)."""
    if isinstance(req, ChatCompletionRequest):
        check_counts(limits, {}, messages=len(req.messages), tools=len(req.tools or []), images=len(image_sources(req.messages)),
                     n=req.n, stops=len(stops(req)), top_logprobs=req.top_logprobs)
    else:
        check_counts(limits, {"top_logprobs": "logprobs"}, n=req.n, stops=len(stops(req)), top_logprobs=req.logprobs)
        prompts = prompt_count(req.prompt)
        if prompts * req.n > limits.max_n:  # each prompt gets n choices: the cap is on choices
            raise InvalidRequest(
                f"{prompts} prompts with n={req.n} make {prompts * req.n} choices, over this server's limit of "
                f"{limits.max_n} choices per request.",
                param="prompt",
            )


def prompt_count(prompt: str | list[str] | list[int] | list[list[int]]) -> int:
    """How many prompts a completions request's `prompt` holds (a list of token ids is one)."""
    return 1 if isinstance(prompt, str) or isinstance(prompt[0], int) else len(prompt)


def flatten_content(message: ChatMessage, index: int) -> str | None:
    """Join text parts; an image part becomes the media marker (the model, once known, says
    whether it takes images). Text never carries a marker of its own."""
    content = message.content
    if content is None or isinstance(content, str):
        return content if content is None else content.replace(MEDIA_MARKER, "")
    out = ""
    last_text = False
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if isinstance(part, TextPart):
            out += ("\n" if last_text else "") + part.text.replace(MEDIA_MARKER, "")
            last_text = True  # text parts are joined by newlines; images sit where they are
        elif isinstance(part, ImagePart):
            if message.role != "user":
                raise InvalidRequest(f"{where}: images go in user messages only.", param=where)
            out += MEDIA_MARKER
            last_text = False
        else:
            raise Unsupported(f"{where} is of type '{part.type}', which this server does not take.", param=where)
    return out


def image_sources(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    """(where, url) of every image part, in the order the prompt holds them."""
    return [
        (f"messages[{i}].content[{j}]", part.image_url.url)
        for i, m in enumerate(messages)
        if not isinstance(m.content, str | None)
        for j, part in enumerate(m.content)
        if isinstance(part, ImagePart)
    ]


def to_messages(messages: list[ChatMessage]) -> list[Message]:
    """The chat as neutral messages. A tool message must answer a call an earlier assistant
    message made (OpenAI's 400 otherwise); one without a `tool_call_id` is taken as it comes."""
    out = []
    calls_made: set[str] = set()
    for i, m in enumerate(messages):
        content = flatten_content(m, i)
        if m.role in ("user", "system", "developer", "tool") and content is None:
            raise InvalidRequest(f"messages[{i}] ({m.role}) needs 'content'.", param=f"messages[{i}].content")
        if m.role == "tool" and not calls_made:
            msg = f"messages[{i}]: messages with role 'tool' must answer a tool call of an earlier assistant message, and none made one."
            raise InvalidRequest(msg, param=f"messages[{i}].role")
        if m.role == "tool" and m.tool_call_id is not None and m.tool_call_id not in calls_made:
            msg = f"messages[{i}]: tool_call_id '{m.tool_call_id[:100]}' answers no tool call of an earlier assistant message."
            raise InvalidRequest(msg, param=f"messages[{i}].tool_call_id")
        calls_made.update(c.id for c in m.tool_calls or () if c.id is not None)
        calls = tuple(
            ToolCall(
                id=c.id or f"call_{i}_{k}",
                name=c.function.name,
                arguments=c.function.arguments
                if isinstance(c.function.arguments, str)
                else json.dumps(c.function.arguments, ensure_ascii=False),
            )
            for k, c in enumerate(m.tool_calls or ())
        )
        out.append(
            Message(
                role=m.role,
                content=content,
                name=m.name,
                tool_calls=calls,
                tool_call_id=m.tool_call_id,
                reasoning=m.reasoning_content,
            )
        )
    return out


def _logit_bias(raw: dict[str, float] | None, n_vocab: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for key, bias in (raw or {}).items():
        try:
            token = int(key)
        except ValueError:
            raise InvalidRequest(f"logit_bias key '{key}' is not a token id.", param="logit_bias") from None
        if not 0 <= token < n_vocab:
            known = "" if n_vocab == UNKNOWN_VOCAB else f" (0..{n_vocab - 1})"
            raise InvalidRequest(f"logit_bias token {key[:40]} is outside the vocabulary{known}.", param="logit_bias")
        out[token] = bias
    return out


def sampling(req: _Sampling, *, max_tokens: int, n_vocab: int, logprobs: int | None) -> SamplingParams:
    repetition = req.repetition_penalty if req.repetition_penalty is not None else req.repeat_penalty
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        min_p=req.min_p or 0.0,
        repetition_penalty=1.0 if repetition is None else repetition,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        dry_multiplier=req.dry_multiplier or 0.0,
        seed=req.seed,
        logit_bias=_logit_bias(req.logit_bias, n_vocab),
        logprobs=logprobs,
        speculative=req.speculative,
        loop_guard=req.loop_guard,
    )


def stops(req: _Sampling) -> list[str]:
    if req.stop is None:
        return []
    return [req.stop] if isinstance(req.stop, str) else list(req.stop)


def chat_options(req: ChatCompletionRequest) -> ChatOptions:
    """Tools and tool_choice, checked against each other."""
    tools = tuple(
        ToolSpec(
            name=t.function.name,
            description=t.function.description or "",
            parameters=t.function.parameters or {"type": "object", "properties": {}},
            strict=bool(t.function.strict),
        )
        for t in req.tools or ()
    )
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools holds two functions with the same name.", param="tools")
    raw = req.tool_choice or "auto"
    name = None
    if isinstance(raw, str):
        choice: str = raw
    else:
        name = raw.function.name
        if name not in names:
            raise InvalidRequest(
                f"tool_choice names function '{name}', which is not in tools.", param="tool_choice"
            )
        choice = "function"
    if choice == "required" and not tools:
        raise InvalidRequest("tool_choice 'required' needs at least one tool in tools.", param="tool_choice")
    return ChatOptions(
        tools=tools,
        tool_choice=choice,
        tool_name=name,
        parallel_tool_calls=req.parallel_tool_calls,
        include_reasoning=req.include_reasoning,
        template_kwargs=dict(req.chat_template_kwargs or {}),
    )


def response_schema(req: ChatCompletionRequest | CompletionRequest) -> tuple[str, dict[str, Any] | None] | None:
    """('json_object', None) or ('json_schema', schema) for a JSON response_format."""
    rf = req.response_format
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        return "json_object", None
    schema = (rf.json_schema or {}).get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest(
            "response_format json_schema needs json_schema.schema (an object).", param="response_format.json_schema"
        )
    return "json_schema", schema


def check_chat_features(req: ChatCompletionRequest) -> None:
    """Refuse, clearly, what does not fit together."""
    if req.top_logprobs is not None and not req.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true.", param="top_logprobs")


def check_completion_features(req: CompletionRequest) -> None:
    if req.suffix and req.echo:
        raise InvalidRequest("echo is not compatible with suffix: the prompt is not the start of the answer.", param="echo")
    if req.best_of is not None and req.best_of != req.n:
        raise Unsupported("best_of different from n is not supported.", param="best_of")
