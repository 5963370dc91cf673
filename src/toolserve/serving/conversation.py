"""A chat conversation, free of any wire protocol: one neutral request in, neutral steps out.

The API's adapters (OpenAI chat completions, OpenAI Responses, Anthropic Messages) each turn
their request into a `ChatRequest` and render the `Step`s of a `Conversation` into their own
events; everything between (caps, images, the prompt, the constraint, generation, parsing,
the request's output policy) happens here, once, for a local model or an upstream one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from toolserve.errors import InvalidRequest, ToolserveError, Unsupported
from toolserve.formats.base import Format
from toolserve.serving.chat import ChatOptions, OutputShaper
from toolserve.serving.entries import LocalModel
from toolserve.serving.pipeline import EncodedImage, Finish, Limits, Piece, Pipeline, Ticket, choice_params
from toolserve.serving.registry import ModelRegistry
from toolserve.types import ContentDelta, Delta, Message, SamplingParams, TokenLogprob

ResponseSchema = tuple[str, dict[str, Any] | None]  # ("json_object", None) or ("json_schema", schema)


@dataclass(frozen=True)
class ImageRef:
    """An image of the request: where the client put it (for errors) and its URL or data URI.
    Its message's text holds the media marker where it sits."""

    where: str
    url: str


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[Message, ...]
    model: str | None = None
    options: ChatOptions = field(default_factory=ChatOptions)
    images: tuple[ImageRef, ...] = ()
    response_schema: ResponseSchema | None = None
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_tokens=0))  # max_tokens: see below
    max_tokens: int | None = None  # None: what the context leaves
    stops: tuple[str, ...] = ()
    n: int = 1
    # the protocol's names for the neutral fields in error params ("messages" -> "input", ...)
    param_names: Mapping[str, str] = field(default_factory=dict)
    # the sampling fields the client set; the others may take the server's defaults
    sampling_set: frozenset[str] = frozenset()
    # the context this request may use (Ollama's num_ctx), at most the model's; None: the model's
    context_limit: int | None = None


def with_defaults(req: ChatRequest, defaults: Mapping[str, float]) -> ChatRequest:
    """Sampling defaults for the fields the client left out: a local model's own
    (`Pipeline.sampling_defaults`: flags, its source, its GGUF), an upstream's flags."""
    params = fill_sampling(req.sampling, defaults, req.sampling_set)
    return req if params is req.sampling else dataclasses.replace(req, sampling=params)


PENALTIES = frozenset({"repetition_penalty", "presence_penalty", "frequency_penalty"})


def fill_sampling(params: SamplingParams, defaults: Mapping[str, float], sent: frozenset[str]) -> SamplingParams:
    """`params` with `defaults` in the fields the client did not send; penalties that are all
    the server's count the answer only (SamplingParams.penalize_prompt)."""
    fill = {k: v for k, v in defaults.items() if k not in sent}
    if not fill:
        return params
    typed: dict[str, object] = {k: int(v) if k == "top_k" else float(v) for k, v in fill.items()}
    if PENALTIES & fill.keys() and not PENALTIES & sent:
        typed["penalize_prompt"] = False
    return dataclasses.replace(params, **typed)  # type: ignore[arg-type]


def context_size(pipe: Pipeline, limit: int | None, param: str) -> int:
    """The context a request may use: the model's, or less where the request asks for less
    (Ollama's num_ctx); more than the model was loaded with is a 400, never a silent cut."""
    n_ctx = pipe.engine.info.n_ctx
    if limit is None:
        return n_ctx
    if limit > n_ctx:
        raise InvalidRequest(
            f"The request asks for a context of {limit} tokens, but '{pipe.model_id}' was loaded with {n_ctx}; "
            f"start the server with --ctx-size {limit} (models.yaml: ctx_size) for a longer one.",
            param=param,
        )
    return limit


@dataclass(frozen=True)
class Step:
    """What one choice produced next: typed deltas, the logprobs of the tokens behind them,
    and, last, its Finish (reason "tool_calls" when calls were returned)."""

    deltas: list[Delta]
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish: Finish | None = None


def check_caps(req: ChatRequest, limits: Limits) -> None:
    """The server's caps on a request's shape (`toolserve serve --max-n` and friends)."""
    check_counts(
        limits, req.param_names, messages=len(req.messages), tools=len(req.options.tools), images=len(req.images),
        n=req.n, stops=len(req.stops), top_logprobs=req.sampling.logprobs,
    )


def check_counts(
    limits: Limits, names: Mapping[str, str], *, messages: int = 0, tools: int = 0, images: int = 0, n: int = 1,
    stops: int = 0, top_logprobs: int | None = None,
) -> None:
    counted = [
        ("messages", messages, limits.max_messages),
        ("tools", tools, limits.max_tools),
        ("images", images, limits.max_images),
        ("n", n, limits.max_n),
        ("stop", stops, limits.max_stops),
    ]
    if top_logprobs is not None:
        counted.append(("top_logprobs", top_logprobs, limits.max_top_logprobs))
    for name, value, cap in counted:
        if value > cap:
            shown = name if name == "images" else names.get(name, name)
            param = names.get("messages", "messages") if name == "images" else shown
            raise InvalidRequest(f"'{shown}' is {value}, over this server's limit of {cap}.", param=param)


@contextlib.contextmanager
def protocol_params(names: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside name the protocol's field: 'messages[2]' becomes 'input[2]'."""
    try:
        yield
    except ToolserveError as exc:
        if exc.param and names:
            cut = min((i for i in (exc.param.find("."), exc.param.find("[")) if i >= 0), default=len(exc.param))
            head = exc.param[:cut]
            exc.param = names.get(head, head) + exc.param[cut:]
        raise


async def shape(pieces: AsyncIterator[Piece | Finish], shaper: OutputShaper) -> AsyncIterator[Step]:
    """Generated text through the family's parser: the Steps of one choice."""
    pending: list[TokenLogprob] = []
    async for item in pieces:
        if isinstance(item, Finish):
            tail = shaper.finish()
            if tail or pending:
                yield Step(tail, pending)
            # cut off by max_tokens stays "length" (a call may be unfinished); else calls say so
            reason = "tool_calls" if shaper.calls and item.finish_reason != "length" else item.finish_reason
            yield Step([], [], dataclasses.replace(item, finish_reason=reason))
            return
        pending.extend(item.logprobs)
        deltas = shaper.feed(item.text)
        if deltas:
            yield Step(deltas, pending)
            pending = []


async def text_steps(pieces: AsyncIterator[Piece | Finish]) -> AsyncIterator[Step]:
    """Generated text taken as it is (a raw prompt, fill-in-the-middle): content Steps."""
    async for item in pieces:
        if isinstance(item, Finish):
            yield Step([], [], item)
        elif item.text or item.logprobs:
            yield Step([ContentDelta(item.text)], item.logprobs)


@dataclass
class RemoteChat:
    """A chat request continued by an upstream: its rendered prompt (None where the upstream
    renders it), each choice's steps, and `open`, which sends choice 0's request now, so that
    the upstream's refusal (its 4xx) reaches the client as a status before a stream begins."""

    prompt_text: str | None
    choice: Callable[[int], AsyncIterator[Step]]
    open: Callable[[], Awaitable[None]] | None = None


@runtime_checkable
class ChatBackend(Protocol):
    """A model served by another server, as a conversation needs it (toolserve.upstream)."""

    limits: Limits
    fingerprint: str

    @property
    def model_id(self) -> str | None: ...

    def admit(self) -> Ticket: ...

    def start_chat(self, req: ChatRequest) -> RemoteChat:
        """Check the request against what the upstream can do, and prepare its choices."""
        ...


class Conversation:
    """One chat request, checked and prepared: the prompt, each choice's parameters, and a
    place in the model's queue (`ticket`, released by the caller when the request is over)."""

    def __init__(self, model: Pipeline | ChatBackend, req: ChatRequest, images: Sequence[EncodedImage] = ()):
        self.req = req
        self.model = model
        self._remote: RemoteChat | None = None
        with protocol_params(req.param_names):
            if isinstance(model, Pipeline):
                self.prompt_text: str | None = model.render_chat(req.messages, req.options)
                self._prepare_local(model, self.prompt_text, images)
            else:
                if req.images:
                    where = req.images[0].where
                    raise Unsupported(f"{where} is an image, but '{model.model_id}' accepts text only here.", param=where)
                self._remote = model.start_chat(req)
                self.prompt_text = self._remote.prompt_text
        self.model_id = str(model.model_id)
        self.fingerprint = model.fingerprint
        fmt = getattr(model, "fmt", None)  # a local model or a raw upstream parses in a format; passthrough has none
        self.tool_format: str | None = fmt.FORMAT_ID if isinstance(fmt, Format) else None
        self.ticket: Ticket  # start_conversation admits it once prepared: a refused or invalid request holds no place

    def _prepare_local(self, pipe: Pipeline, prompt_text: str, images: Sequence[EncodedImage]) -> None:
        req = self.req
        self.prompt, self.media = pipe.tokenize_chat(prompt_text, images)
        info = pipe.engine.info
        for token in req.sampling.logit_bias:
            if not 0 <= token < info.n_vocab:
                raise InvalidRequest(f"logit_bias token {token} is outside the vocabulary (0..{info.n_vocab - 1}).", param="logit_bias")
        n_ctx = context_size(pipe, req.context_limit, req.param_names.get("context_limit", "context_limit"))
        constraint = pipe.constraint(prompt_text, req.options, req.response_schema)
        base = dataclasses.replace(req.sampling, max_tokens=req.max_tokens or n_ctx, constraint=constraint)
        self.params = pipe.fit(self.prompt, base, param="messages", n_ctx=n_ctx)

    def token_piece(self, token: int) -> bytes:
        assert isinstance(self.model, Pipeline)  # upstream models give no logprobs
        return self.model.engine.token_piece(token)

    async def send(self) -> None:
        """An upstream's conversation: choice 0's request sent now (`RemoteChat.open`)."""
        if self._remote is not None and self._remote.open is not None:
            await self._remote.open()

    def choice(self, i: int) -> AsyncIterator[Step]:
        """The steps of choice i (of n), a Finish last."""
        if self._remote is not None:
            return self._remote.choice(i)
        pipe = self.model
        assert isinstance(pipe, Pipeline) and self.prompt_text is not None
        opts = self.req.options
        # under required or a named function our grammar allows nothing but calls
        shaper = pipe.shaper(self.prompt_text, opts, calls_only=opts.calls_allowed and opts.tool_choice in ("required", "function"))
        pieces = pipe.generate(self.prompt, choice_params(self.params, i), self.req.stops, self.media, stop_when=lambda: shaper.stopped)
        return shape(pieces, shaper)


async def start_conversation(registry: ModelRegistry, req: ChatRequest) -> Conversation:
    """The model the request names, checked against the request (caps first, then images are
    fetched and decoded), and the request prepared on it."""
    with protocol_params(req.param_names):
        entry = registry.resolve(req.model)
        if isinstance(entry, LocalModel):
            async with registry.hold(entry) as pipe:  # not unloaded while the images are prepared
                check_caps(req, pipe.limits)  # before any image is fetched or decoded
                images = await pipe.encode_images([(im.where, im.url) for im in req.images])
                # rendering and tokenizing a long conversation takes a while: not on the event loop
                prose = not req.options.calls_allowed and req.response_schema is None
                conv = await asyncio.to_thread(Conversation, pipe, with_defaults(req, pipe.sampling_fill(prose=prose)), images)
                conv.ticket = pipe.admit()
                return conv
        if not isinstance(entry, ChatBackend):
            raise Unsupported(f"'{entry.model_id}' cannot serve chat requests.", param="model")
        check_caps(req, entry.limits)
        conv = Conversation(entry, with_defaults(req, entry.limits.sampling_defaults))
        conv.ticket = entry.admit()
        try:
            await conv.send()
        except BaseException:
            conv.ticket.release()
            raise
        return conv
