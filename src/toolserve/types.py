"""Neutral value types shared by every layer (no imports of ours)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "developer", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class ToolCall:
    """A call the model made (or made earlier, in history). `arguments` is a JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolSpec:
    """An OpenAI function tool: name, description and JSON schema of its parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    strict: bool = False


@dataclass(frozen=True)
class Message:
    """One chat message; `content` is already flattened to text."""

    role: str
    content: str | None = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None


class TokenConstraint(Protocol):
    """Restricts which tokens may come next (a grammar); one object per generation."""

    def forbidden(self) -> Any:
        """A boolean array over the vocabulary (True: may not come next), or None when
        nothing is restricted at this step."""
        ...

    def accept(self, token: int) -> None: ...

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, in order from here, the constraint would accept (state unchanged)."""
        ...

    def done(self) -> bool:
        """True when the constrained text is complete and nothing may follow."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """Token-level generation settings; the engine applies these and nothing else."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0  # llama.cpp's DRY sampler (engine/sampler.py); 0: off
    # the penalties count the prompt's last tokens too, as llama.cpp's and vLLM's do; False where
    # the server chose them (serving/conversation.fill_sampling): a default must not push an answer
    # away from the words of its question
    penalize_prompt: bool = True
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    logprobs: int | None = None  # None: off; N >= 0: chosen token plus N alternatives
    constraint: Callable[[], TokenConstraint] | None = None  # a fresh constraint per generation
    speculative: bool | None = None  # draft from the context (engine/speculative.py); None: the server's --speculative
    loop_guard: bool = True  # end an answer that has become one short span repeated (serving/loops.py)


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class ImageData:
    """A decoded image: RGB bytes, row-major, 3 bytes per pixel."""

    width: int
    height: int
    rgb: bytes = field(repr=False)
    digest: str  # sha256 of the pixels: two requests with the same picture share a cache entry


@dataclass(frozen=True)
class TokenEvent:
    """One generated token as the engine reports it."""

    token_id: int
    piece: bytes  # detokenized bytes, special tokens rendered as their text
    is_eog: bool = False
    logprob: TokenLogprob | None = None


# ---- typed deltas that parsers and the pipeline emit ------------------------------------


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    """First delta of a call: index, stable id and the whole name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgs:
    """A fragment appended to the arguments of call `index`."""

    index: int
    fragment: str


Delta = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgs


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
