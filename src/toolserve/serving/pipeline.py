"""The request pipeline shared by the HTTP API and the CLI.

render prompt -> tokens -> engine -> UTF-8 safe text -> stop strings -> pieces of output.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolserve.constrain.matcher import Constrainer
from toolserve.engine.base import Engine, Generation, Lora, MediaSpan
from toolserve.errors import (
    ContextLengthExceeded,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    RequestTimeout,
    ShuttingDown,
    Unsupported,
)
from toolserve.formats.base import Format
from toolserve.formats.template import MEDIA_MARKER, ChatTemplate
from toolserve.models.sampling import FIELDS, Default, fill, model_defaults
from toolserve.serving.chat import ChatOptions, ChatRenderer, OutputShaper, constraint_for
from toolserve.serving.fim import Budget, ExtraChunk, FimPrompt, layout, require
from toolserve.serving.loops import Loop, LoopGuard
from toolserve.serving.media import ImagePolicy, load_image
from toolserve.serving.text import StopMatcher, Utf8Stream
from toolserve.types import Message, SamplingParams, TokenConstraint, TokenLogprob, Usage

log = logging.getLogger(__name__)
EncodedImage = list[int | MediaSpan]  # an image as the engine takes it: its tokens around one MediaSpan


@dataclass
class Piece:
    """Text released to the client, with the logprobs of the tokens that produced it."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class Finish:
    finish_reason: str
    usage: Usage
    ttft: float | None = None  # seconds from submission to the first token
    decode_time: float = 0.0  # seconds from the first token to the last
    stop_sequence: str | None = None  # the request's stop string that ended it, if one did
    # everything the model generated, as text: special tokens, a stop string and the
    # end-of-generation token included (None where the text is not seen: a passthrough upstream)
    raw_text: str | None = None
    loop: Loop | None = None  # the loop the guard ended the answer at (finish_reason "length")


# what `serve` may set defaults for (Limits.sampling_defaults), as may a model (models/sampling.py)
SAMPLING_DEFAULTS = FIELDS


@dataclass(frozen=True)
class Limits:
    """Named caps of the serving pipeline (CLI flags of `toolserve serve`)."""

    max_queue: int = 16  # generations allowed to wait behind the running ones; then 429
    request_timeout: float | None = None  # seconds a request may take in all; None: no limit
    # caps on a request's shape; past one, a 400 names the field
    max_n: int = 16  # choices per request
    max_messages: int = 2048
    max_tools: int = 128
    max_stops: int = 16
    max_top_logprobs: int = 20  # chat top_logprobs, completions logprobs
    max_images: int = 16  # image parts per request (each may be fetched and decoded)
    images: ImagePolicy = field(default_factory=ImagePolicy)  # where images may come from, and how big they may be
    # sampling for requests that set none of it (agents such as Codex and Claude Code send no
    # temperature): field name -> value, e.g. {"temperature": 0.0}
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    loop_guard: bool = True  # end answers that have become one span repeated (serving/loops.py); off: --no-loop-guard


class Admits(Protocol):
    in_flight: int
    last_used: float  # time.monotonic() when a request last started or ended


class Ticket:
    """A request's place; releasing it (once, or more: harmless) ends the request's claim."""

    def __init__(self, owner: Admits):
        self._owner: Admits | None = owner
        owner.last_used = time.monotonic()

    def release(self) -> None:
        if self._owner is not None:
            self._owner.in_flight -= 1
            self._owner.last_used = time.monotonic()
            self._owner = None


def choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """Choice `index` of n: a seeded request gets seed+index so that choices differ."""
    if params.seed is None or index == 0:
        return params
    return dataclasses.replace(params, seed=params.seed + index)


class Pipeline:
    """One loaded model with its template, serving requests."""

    def __init__(self, engine: Engine, template: ChatTemplate, model_id: str, fmt: Format, limits: Limits | None = None):
        self.engine = engine
        self.limits = limits or Limits()
        self.observers: list[Callable[[Finish], None]] = []  # e.g. metrics
        self._closing = False  # set by drain(): no new requests
        self._active: set[Generation] = set()  # generations a drain may have to end
        self.in_flight = 0  # admitted requests not yet over
        self.last_used = time.monotonic()  # for keep_alive: when a request last started or ended
        self.template = template
        self.model_id = model_id
        self.fmt = fmt
        self.renderer = ChatRenderer(template, fmt)
        self.constrainer = Constrainer(engine.grammar_tokenizer, engine.token_piece, engine.info.n_vocab)
        self.created = int(time.time())
        info = engine.info
        digest = hashlib.sha256(f"{info.path}:{info.size_bytes}:{template.source}".encode()).hexdigest()
        self.fingerprint = f"fp_{digest[:10]}"
        # LoRA: the adapters this id runs with (the engine's adapter set `adapter`); the other ids
        # served on the same engine (--lora-model: id -> (adapter set, adapter)); `base_id` is the
        # id whose engine a variant shares
        self.adapters: tuple[Lora, ...] = ()
        self.adapter = 0
        self.adapter_ids: dict[str, tuple[int, Lora]] = {}
        self.base_id: str | None = None
        self._family: list[Pipeline] = [self]  # the pipelines sharing this engine, this one first
        # what a request that sends none of a sampling field gets, and why (the loader sets it
        # from the flags, the model's source and its GGUF: models/sampling.py)
        self.sampling_defaults: dict[str, Default] = model_defaults({}, flags=self.limits.sampling_defaults)

    def variant(self, model_id: str) -> Pipeline:
        """The pipeline of adapter id `model_id` (one of `adapter_ids`) on this one's engine:
        shares the engine, the template and the parser; has its own id, counters and observers.
        Admission counts the requests of the whole family against the engine's slots."""
        for p in self._family:
            if p.model_id == model_id:
                return p
        index, spec = self.adapter_ids[model_id]
        v = copy.copy(self)
        v.model_id, v.adapter, v.adapters, v.adapter_ids, v.base_id = model_id, index, (spec,), {}, self.model_id
        v.observers, v._active, v.in_flight, v.last_used = [], set(), 0, time.monotonic()
        digest = hashlib.sha256(f"{self.fingerprint}:{spec.path}:{spec.scale}".encode()).hexdigest()
        v.fingerprint = f"fp_{digest[:10]}"
        self._family.append(v)
        return v

    def sampling_fill(self, *, prose: bool = True) -> dict[str, float]:
        """The sampling values a request that sends none of a field gets (besides the protocol's
        own); `prose=False` for tools, JSON and raw prompts (models/sampling.PROSE_ONLY)."""
        return fill(self.sampling_defaults, prose=prose)

    @property
    def family_in_flight(self) -> int:
        """Requests in flight on this engine, over every id it serves."""
        return sum(p.in_flight for p in self._family)

    # -- admission and shutdown ------------------------------------------------------------
    def admit(self) -> Ticket:
        """A place for one request, or a refusal when shutting down or when the queue is full.
        The caller releases the ticket when the request is over (twice is harmless)."""
        if self._closing:
            raise ShuttingDown("The server is shutting down; retry on another instance or later.")
        waiting = self.family_in_flight - self.engine.slots  # `slots` requests run, the others wait
        if waiting >= self.limits.max_queue:
            raise Overloaded(
                f"The server is busy: {waiting} requests are waiting (limit {self.limits.max_queue}). Retry later.",
                retry_after=max(1, waiting),
            )
        self.in_flight += 1
        return Ticket(self)

    def drain(self, grace: float) -> None:
        """Stop admitting (on every id of this engine); generations still running after `grace`
        seconds end with an error."""
        for p in self._family:
            p._closing = True
            asyncio.get_running_loop().call_later(grace, p._abort_all)

    def _abort_all(self) -> None:
        for gen in list(self._active):
            gen.fail(ShuttingDown("The server shut down before this request finished."))

    # -- request preparation -----------------------------------------------------------------
    def check_model(self, requested: str | None) -> None:
        if requested and requested != self.model_id:
            raise ModelNotFound(
                f"The model '{requested}' does not exist; this server serves '{self.model_id}'.",
                param="model",
            )

    def render_chat(self, messages: Sequence[Message], opts: ChatOptions | None = None) -> str:
        return self.renderer.render(messages, opts or ChatOptions())

    def constraint(
        self, prompt_text: str, opts: ChatOptions, response_schema: tuple[str, dict[str, Any] | None] | None
    ) -> Callable[[], TokenConstraint] | None:
        r = self.renderer
        return constraint_for(self.constrainer, self.fmt, opts, thinking_open=r.thinking_open(prompt_text),
                              reasoning=r.may_reason(prompt_text), response_schema=response_schema)

    def shaper(self, prompt_text: str, opts: ChatOptions, *, calls_only: bool = False) -> OutputShaper:
        return self.renderer.shaper(prompt_text, opts, calls_only=calls_only)

    def tokenize_prompt(self, text: str) -> list[int]:
        """Tokens of a rendered prompt; BOS is added unless the template already wrote it."""
        info = self.engine.info
        add_bos = info.add_bos and not (info.bos_token and text.startswith(info.bos_token))
        return self.engine.tokenize(text, add_bos=add_bos, special=True)

    def fim_prompt(
        self, *, prefix: str, suffix: str, prompt: str = "", extra: Sequence[ExtraChunk] = (), budget: Budget | None = None,
        param: str = "suffix", repository: bool = False,
    ) -> FimPrompt:
        """A fill-in-the-middle prompt (serving/fim.py; `repository`: its repo-level frame even
        without extra chunks, as llama-server's /infill); a 400 naming `param` for a model
        without FIM tokens."""
        fim = require(self.engine.info.fim, self.model_id, param)
        bos = self.engine.tokenize("", add_bos=True, special=False)  # [BOS] where the model adds one

        def plain(text: str) -> list[int]:
            return self.engine.tokenize(text, add_bos=False, special=False) if text else []

        return layout(
            fim, plain, prefix=prefix, suffix=suffix, prompt=prompt, extra=extra, bos=bos[0] if bos else None, budget=budget,
            repository=repository,
        )

    async def encode_images(self, sources: Sequence[tuple[str, str]]) -> list[EncodedImage]:
        """Fetch (where allowed), decode and tokenize each (where, url) image of a request."""
        if sources and not self.engine.info.vision:
            where = sources[0][0]
            raise Unsupported(f"{where} is an image, but this model accepts text only.", param=where)
        out = []
        for where, url in sources:
            image = await load_image(url, self.limits.images, where)
            try:
                out.append(await asyncio.to_thread(self.engine.tokenize_image, image))
            except InvalidRequest as exc:
                raise InvalidRequest(f"{where}: {exc.message}", param=where) from None
        return out

    def tokenize_chat(self, text: str, images: Sequence[EncodedImage] = ()) -> tuple[list[int], list[MediaSpan]]:
        """Tokens of a rendered chat prompt, with each media marker replaced by its image's tokens."""
        if not images:
            return self.tokenize_prompt(text), []
        pieces = text.split(MEDIA_MARKER)
        if len(pieces) - 1 != len(images):
            raise InvalidRequest(
                f"The chat template placed {len(pieces) - 1} of the request's {len(images)} images; "
                "send images in user messages that the template renders.",
                param="messages",
            )
        tokens = self.tokenize_prompt(pieces[0])  # BOS, if the model wants one, even before an image
        media: list[MediaSpan] = []
        for image, piece in zip(images, pieces[1:], strict=True):
            for item in image:
                if isinstance(item, MediaSpan):
                    media.append(dataclasses.replace(item, start=len(tokens)))
                    tokens.extend([item.key] * item.n_tokens)
                else:
                    tokens.append(item)
            if piece:
                tokens.extend(self.engine.tokenize(piece, add_bos=False, special=True))
        return tokens, media

    def fit(self, prompt: Sequence[int], params: SamplingParams, *, param: str, n_ctx: int | None = None) -> SamplingParams:
        """Refuse prompts that fill the context; clamp max_tokens to the room that is left.
        `n_ctx`: a smaller context than the model's, asked for by the request."""
        n_ctx = n_ctx or self.engine.info.n_ctx
        if not prompt:
            raise InvalidRequest("The prompt is empty.", param=param)
        if len(prompt) >= n_ctx:
            raise ContextLengthExceeded(
                f"This model's maximum context length is {n_ctx} tokens. However, your prompt "
                f"is {len(prompt)} tokens long, leaving no room for the answer.",
                param=param,
            )
        room = n_ctx - len(prompt)
        if params.max_tokens > room:
            params = dataclasses.replace(params, max_tokens=room)
        return params

    # -- generation -----------------------------------------------------------------------------
    async def generate(
        self, prompt: Sequence[int], params: SamplingParams, stops: Sequence[str] = (), media: Sequence[MediaSpan] = (),
        stop_when: Callable[[], bool] | None = None,
    ) -> AsyncIterator[Piece | Finish]:
        """Stream one choice: Pieces of safe text, then one Finish. `stop_when`, asked after each
        Piece, ends the choice ("stop") when what read the pieces has seen enough; the loop
        guard ends it ("length") where it has become a loop."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        timeout = self.limits.request_timeout
        own_deadline = started + timeout if timeout else None
        gen = self.engine.submit(prompt, params, media, self.adapter)
        utf8 = Utf8Stream()
        stopper = StopMatcher(stops)
        pending: list[TokenLogprob] = []
        raw: list[str] = []  # what the model wrote, before stop strings cut it
        produced = 0
        first = last = None
        finish = None
        eog = ""
        guard = LoopGuard() if self.limits.loop_guard and params.loop_guard else None
        looped = None

        self._active.add(gen)
        try:
            async for event in gen.events(lambda: own_deadline):
                last = loop.time()
                first = first if first is not None else last
                if event.is_eog:
                    eog = event.piece.decode("utf-8", "replace")  # its own bytes: never joined to a split character
                    finish = "stop"
                    break
                produced += 1
                if event.logprob is not None:
                    pending.append(event.logprob)
                decoded = utf8.feed(event.piece)
                raw.append(decoded)
                text = stopper.feed(decoded)
                if text:
                    yield Piece(text, pending)
                    pending = []
                if stopper.stopped or (stop_when is not None and stop_when()):
                    finish = "stop"
                    break
                if guard is not None and (looped := guard.feed(event.token_id)) is not None:
                    log.info("%s: answer ended by the loop guard: %s", self.model_id, looped.describe())
                    finish = "length"
                    break
            flushed = utf8.flush()
            raw.append(flushed)
            if not stopper.stopped:
                tail = stopper.feed(flushed)
                tail += "" if stopper.stopped else stopper.flush()
                if tail or pending:
                    yield Piece(tail, pending)
            if finish is None:
                finish = "stop" if stopper.stopped else (gen.finish_reason or "stop")
        except (TimeoutError, asyncio.TimeoutError):  # the same class from Python 3.11 on
            raise RequestTimeout(f"The request took longer than the {timeout:g} s limit.") from None
        finally:
            self._active.discard(gen)
            gen.cancel()  # a client that went away, a stop string or an error ends the engine's work
        usage = Usage(gen.prompt_tokens, produced, gen.cached_tokens)
        done = Finish(
            finish, usage, None if first is None else first - started, 0.0 if first is None else (last or first) - first,
            stopper.matched, "".join(raw) + eog, looped,
        )
        for observe in self.observers:
            observe(done)
        yield done
