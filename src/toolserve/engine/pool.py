"""Several instances of one model (`--parallel N`), each with its own context and worker thread.

The pool is an Engine itself: the pipeline submits to it and it picks an instance. An idle
instance beats a busy one; among equally loaded instances, the one whose last prompt shares the
longest prefix with this one wins, so an agent's conversation keeps finding its KV cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from toolserve.engine.base import Engine, EngineStats, Generation, MediaSpan, ModelInfo
from toolserve.engine.prompt_cache import CacheStats, common_prefix
from toolserve.types import ImageData, SamplingParams


@dataclass
class PooledCache:
    """The instances' prompt caches seen as one (for /health and /metrics)."""

    stats: CacheStats
    budget: int


class EnginePool:
    def __init__(self, engines: Sequence[Engine]):
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = list(engines)
        self.info: ModelInfo = self.engines[0].info
        self.slots = sum(e.slots for e in self.engines)
        self.prefill_chunk = getattr(self.engines[0], "prefill_chunk", 1)
        self._last_prompt: list[list[int]] = [[] for _ in self.engines]  # read and written on the event loop

    @property
    def stats(self) -> EngineStats:
        total = EngineStats()
        for e in self.engines:
            for f in dataclasses.fields(EngineStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(e.stats, f.name))
        return total

    @property
    def cache(self) -> PooledCache | None:
        caches = [c for c in (getattr(e, "cache", None) for e in self.engines) if c is not None]
        if not caches:
            return None
        total = CacheStats()
        for c in caches:
            for f in dataclasses.fields(CacheStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(c.stats, f.name))
        return PooledCache(total, sum(c.budget for c in caches))

    # -- the vocabulary is the same in every instance ----------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return self.engines[0].tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return self.engines[0].detokenize(tokens)

    def token_piece(self, token: int) -> bytes:
        return self.engines[0].token_piece(token)

    def grammar_tokenizer(self) -> object:
        return self.engines[0].grammar_tokenizer()

    def tokenize_image(self, image: ImageData) -> list[int | MediaSpan]:
        return self.engines[0].tokenize_image(image)  # an encoded input runs on any instance

    # -- scheduling ---------------------------------------------------------------------------
    def pick(self, prompt: Sequence[int]) -> int:
        """The instance for this prompt: least pending work first, then the longest shared prefix."""

        def rank(i: int) -> tuple[int, int]:
            return (self.engines[i].stats.pending, -common_prefix(self._last_prompt[i], prompt))

        return min(range(len(self.engines)), key=rank)

    def submit(self, prompt: Sequence[int], params: SamplingParams, media: Sequence[MediaSpan] = ()) -> Generation:
        i = self.pick(prompt)
        self._last_prompt[i] = list(prompt)
        return self.engines[i].submit(prompt, params, media)

    def close(self) -> None:
        for e in self.engines:
            e.close()
