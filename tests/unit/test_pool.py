"""EnginePool scheduling, with fake engines (the pool never looks inside an engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from toolserve.engine.base import EngineStats, Generation, ModelInfo
from toolserve.engine.pool import EnginePool
from toolserve.types import SamplingParams

INFO = ModelInfo("m.gguf", "llama", 512, 512, 100, 1, "<s>", "</s>", True, None)


class FakeEngine:
    slots = 1

    def __init__(self) -> None:
        self.info = INFO
        self.stats = EngineStats()
        self.prompts: list[list[int]] = []

    def submit(self, prompt: Sequence[int], params: SamplingParams, media: Sequence[object] = ()) -> Generation:
        self.stats.submitted += 1
        self.prompts.append(list(prompt))
        return Generation(asyncio.get_running_loop(), len(prompt))

    def finish_all(self) -> None:
        self.stats.finished = self.stats.submitted


def submit(pool: EnginePool, prompt: list[int]) -> None:
    async def go() -> None:
        pool.submit(prompt, SamplingParams(max_tokens=1))

    asyncio.run(go())


def test_idle_instance_first() -> None:
    a, b = FakeEngine(), FakeEngine()
    pool = EnginePool([a, b])
    submit(pool, [1, 2, 3])
    submit(pool, [1, 2, 3])  # the same prompt, but instance a is busy
    assert len(a.prompts) == 1 and len(b.prompts) == 1
    assert pool.slots == 2 and pool.stats.pending == 2


def test_same_load_prefers_shared_prefix() -> None:
    a, b = FakeEngine(), FakeEngine()
    pool = EnginePool([a, b])
    submit(pool, [1, 2, 3])
    submit(pool, [7, 8, 9])
    a.finish_all()
    b.finish_all()
    submit(pool, [7, 8, 9, 10, 11])  # the conversation on b goes on: b holds its KV
    submit(pool, [1, 2, 3, 4])  # b is busy now, a is idle and holds this prefix anyway
    assert b.prompts[-1] == [7, 8, 9, 10, 11]
    assert a.prompts[-1] == [1, 2, 3, 4]


def test_stats_are_summed() -> None:
    a, b = FakeEngine(), FakeEngine()
    a.stats.generated_tokens, b.stats.generated_tokens = 5, 7
    a.stats.active = 1
    stats = EnginePool([a, b]).stats
    assert stats.generated_tokens == 12 and stats.active == 1 and stats.busy
