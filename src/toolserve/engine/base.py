"""The Engine protocol: token ids in, token events out. No chat messages, no tools, no JSON."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolserve.types import ImageData, SamplingParams, TokenEvent


@dataclass(frozen=True)
class DeviceUse:
    """A device a model's layers are on."""

    name: str  # ggml's name, e.g. CUDA0
    description: str
    layers: int
    memory_mb: int  # taken by this model's load (free memory before minus after)
    free_mb: int  # after the load
    total_mb: int


@dataclass(frozen=True)
class Placement:
    """Where a model's layers are. llama.cpp offloads its repeating layers and the output layer
    (n_layers in all), the output layer first; the input embeddings stay in RAM."""

    gpu_layers: int
    n_layers: int
    devices: tuple[DeviceUse, ...] = ()
    kv_offload: bool = True  # the KV cache of offloaded layers is on their device
    gpu_backend: bool = False  # llama.cpp was built with a backend that can take layers
    chosen: str = ""  # how the count was decided, e.g. "auto: all fit", "--gpu-layers 20"

    def summary(self) -> str:
        if not self.gpu_layers:
            return f"all {self.n_layers} layers on the CPU ({self.chosen})"
        where = ", ".join(f"{d.name} ({d.description}) {d.layers} layers, {d.memory_mb} MiB" for d in self.devices if d.layers)
        return f"{self.gpu_layers} of {self.n_layers} layers on {where} ({self.chosen})"


@dataclass(frozen=True)
class FimTokens:
    """A code model's fill-in-the-middle tokens, as its GGUF declares them (llama.cpp's vocab
    finds them by name too: <|fim_prefix|>, <PRE>, <fim_prefix>, ...). `rep` and `sep` (a
    repository's name, a file's start) only where the model was trained with repository context."""

    pre: int
    suf: int
    mid: int
    rep: int | None = None
    sep: int | None = None


@dataclass(frozen=True)
class ModelInfo:
    path: str
    architecture: str
    n_ctx: int
    n_ctx_train: int
    n_vocab: int
    size_bytes: int
    bos_token: str
    eos_token: str
    add_bos: bool
    chat_template: str | None
    vision: bool = False  # a multimodal projector is loaded: prompts may hold images
    repack: bool = True  # llama.cpp may repack weights into extra buffer types (AMX, CPU_REPACK)
    placement: Placement | None = None
    fim: FimTokens | None = None  # None: the model cannot fill in the middle


@dataclass(frozen=True)
class Lora:
    """A LoRA adapter GGUF applied at `scale` (llama.cpp's adapter API; 0 leaves it out)."""

    path: str
    scale: float = 1.0


@dataclass(frozen=True)
class MediaSpan:
    """An image inside a prompt. The prompt's token list holds `n_tokens` copies of `key` (a
    negative id derived from the image's digest) from `start` on, so that prefix matching,
    and with it the prompt cache, treats a resent image like resent text."""

    start: int
    n_tokens: int
    n_pos: int  # context positions it takes (fewer than n_tokens with M-RoPE)
    key: int
    handle: Any = field(default=None, compare=False, repr=False)  # the engine's encoded input

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


def media_key(digest: str) -> int:
    """The stand-in token id of an image: negative, so no real token has it."""
    return -1 - int(digest[:7], 16)


@dataclass
class EngineStats:
    """Counters the engine keeps; read without locking (ints are updated atomically)."""

    requests: int = 0
    submitted: int = 0  # counted on the event loop
    finished: int = 0  # counted on the engine thread
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    active: int = 0  # generations running now (at most the engine's `slots`)
    shared_decodes: int = 0  # decodes on fewer threads while other local engines were busy (engine/cores.py)
    drafted_tokens: int = 0  # speculative decoding: draft tokens verified (engine/speculative.py)
    accepted_tokens: int = 0  # ... and those the model agreed with

    # the counters an engine process sends with each step, which add up across its restarts
    TOTALS = ("requests", "prompt_tokens", "cached_tokens", "generated_tokens", "shared_decodes", "drafted_tokens", "accepted_tokens")

    @property
    def busy(self) -> bool:
        return self.active > 0

    @property
    def pending(self) -> int:
        """Generations submitted and not finished: the one running plus those queued."""
        return self.submitted - self.finished


class Generation:
    """One request's token stream, fed from the engine thread, read on the event loop.

    The consumer calls `cancel()` when its client went away or a stop string was found;
    the engine checks `cancelled` before every token.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, prompt_tokens: int):
        self._loop = loop
        self._queue: asyncio.Queue[TokenEvent | BaseException | None] = asyncio.Queue()
        self._cancelled = threading.Event()
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0
        self.finish_reason: str | None = None  # "stop" | "length" once finished

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    # -- engine side (any thread) --------------------------------------------------------
    def _hand_over(self, item: TokenEvent | BaseException | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # its loop is closed (a CLI run that ended): nobody is reading; stop
            self.cancel()

    def push(self, event: TokenEvent) -> None:
        self._hand_over(event)

    def close(self, finish_reason: str | None = None, error: BaseException | None = None) -> None:
        self.finish_reason = finish_reason
        self._hand_over(error)

    # -- engine side, on the event loop (events read there: engine/remote.py) ------------
    def deliver(self, event: TokenEvent) -> None:
        self._queue.put_nowait(event)

    def finish(self, finish_reason: str | None = None, error: BaseException | None = None) -> None:
        self.finish_reason = finish_reason
        self._queue.put_nowait(error)

    # -- consumer side (event loop) ------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        """End the stream from the event loop: the reader gets `error`; the engine stops."""
        self.cancel()
        self._queue.put_nowait(error)

    async def events(self, deadline: Callable[[], float | None] = lambda: None) -> AsyncIterator[TokenEvent]:
        """Token events until the end; TimeoutError once `deadline()` (loop time) has passed."""
        while True:
            limit = deadline()
            if limit is None:
                item = await self._queue.get()
            else:
                item = await asyncio.wait_for(self._queue.get(), max(0.0, limit - self._loop.time()))
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class Engine(Protocol):
    """What the serving pipeline needs from a backend."""

    info: ModelInfo
    slots: int  # generations that can run at the same time; the rest wait in the engine's queue

    @property
    def stats(self) -> EngineStats: ...

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> bytes: ...

    def token_piece(self, token: int) -> bytes: ...

    def grammar_tokenizer(self) -> object:
        """The vocabulary as the constraint engine wants it (built on demand, can be slow)."""
        ...

    def tokenize_image(self, image: ImageData) -> list[int | MediaSpan]:
        """The model's tokens for one image: its begin/end tokens around one MediaSpan (whose
        `start` the caller sets). Only for engines with `info.vision`; may be slow (resizing)."""
        ...

    def submit(self, prompt: Sequence[int], params: SamplingParams, media: Sequence[MediaSpan] = (), adapter: int = 0) -> Generation:
        """Queue a generation; must be called from the event loop thread. `media` are the
        images in `prompt`, in order; `adapter` the index of the LoRA adapter set it runs under."""
        ...

    def close(self) -> None: ...
