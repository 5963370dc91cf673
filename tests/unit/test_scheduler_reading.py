"""Which prompt chunks a step reads (engine/scheduler.py): one chunk of every reading job that
fits in the batch beside the decoding jobs' tokens, in the order the jobs came, so a burst of
prompts is read together; each prompt in its own chunks (slots.chunk_cuts), to its end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.engine.base import EngineStats
from toolserve.engine.job import Job
from toolserve.engine.scheduler import Scheduler
from toolserve.engine.slots import PREFILL_CHUNK, SeqState, Turns, chunk_cuts
from toolserve.types import SamplingParams

END = 2  # the vocabulary's end of turn
TURNS = Turns(frozenset({END}))
CAPACITY = PREFILL_CHUNK + 8  # as the engine sizes its batch for 8 sequences


class _Memory:
    """The KV bookkeeping that admission and ending ask for; nothing to do without a context."""

    def trim(self, seq: SeqState, keep: int) -> None:
        pass


class _Sampler:
    def allowed(self, draft: list[int]) -> list[int]:
        return draft

    def close(self) -> None:
        pass


def _scheduler(slots: int) -> Scheduler:
    return Scheduler(
        [SeqState(i) for i in range(slots)], _Memory(), None, EngineStats(),  # type: ignore[arg-type]
        capacity=CAPACITY, n_ctx=8192, turns=TURNS, sampler=lambda job: _Sampler(),  # type: ignore[arg-type,return-value]
        adapters=SimpleNamespace(applied=0),  # type: ignore[arg-type]
    )


def _job(prompt: list[int]) -> Job:
    gen = SimpleNamespace(cancelled=False, cached_tokens=0, close=lambda *a: None)
    return Job(gen, prompt, SamplingParams(max_tokens=4), [])


def _prompts(lengths: list[int]) -> list[list[int]]:
    return [list(range(10 + 1000 * i, 10 + 1000 * i + n)) for i, n in enumerate(lengths)]


def _read(prompts: list[list[int]], slots: int = 8) -> list[list[tuple[int, int, int]]]:
    """Each step's prompt chunks, (job, start, stop), until every prompt is read; each job
    decodes from the step after its last chunk, as the engine's worker would run it."""
    sched = _scheduler(slots)
    jobs = [_job(p) for p in prompts]
    sched.waiting.extend(jobs)
    sched.admit()
    steps: list[list[tuple[int, int, int]]] = []
    while any(j.reading for j in jobs):
        step = sched.schedule()
        assert step is not None
        assert not set(step.decoding) & set(step.reading)
        steps.append([(jobs.index(j), j.at, j.stop) for j in step.reading])
        for j in step.reading:
            j.at = j.stop
        assert len(steps) < 100
    return steps


@pytest.mark.parametrize(
    ("lengths", "steps"),
    [
        # a burst of 8 short prompts: all in one step
        ([30] * 8, [[(i, 0, 30) for i in range(8)]]),
        # a long prompt in chunks of 512, one a step, the others beside its first while they fit
        ([600, 30, 30], [[(0, 0, 512)], [(0, 512, 600), (1, 0, 30), (2, 0, 30)]]),
        # the batch holds 512 + 8 rows: a later chunk that fits is read before an earlier one that does not
        ([512, 9, 8], [[(0, 0, 512), (2, 0, 8)], [(1, 0, 9)]]),
        ([512, 8, 1], [[(0, 0, 512), (1, 0, 8)], [(2, 0, 1)]]),
    ],
)
def test_a_step_reads_one_chunk_of_each_prompt_that_fits(lengths: list[int], steps: list[Any]) -> None:
    assert _read(_prompts(lengths)) == steps


# prompts with turns: an end-of-turn token cuts a chunk where slots.chunk_cuts says
_PROMPT = st.lists(st.integers(1, 1300), min_size=1, max_size=5).map(lambda ns: [t for n in ns for t in [*range(10, 10 + n), END]][:-1])


@settings(max_examples=200, deadline=None)
@given(st.lists(_PROMPT, min_size=1, max_size=8))
def test_every_prompt_is_read_whole_in_its_own_chunks_and_in_order(prompts: list[list[int]]) -> None:
    steps = _read(prompts)
    lengths = [len(p) for p in prompts]
    cuts = [[c for c in chunk_cuts(p, TURNS) if c < len(p)] + [len(p)] for p in prompts]
    at = [0] * len(lengths)
    stops: list[list[int]] = [[] for _ in lengths]
    for step in steps:
        assert step, "a step with prompts left to read reads at least one chunk"
        # in the order the jobs came, each reading job's next chunk is in the step if it fits
        # beside the decoding jobs' tokens and the chunks before it
        size = sum(at[i] == n for i, n in enumerate(lengths))
        fits = []
        for i, n in enumerate(lengths):
            if at[i] < n:
                rows = next(c for c in cuts[i] if c > at[i]) - at[i]
                if size + rows <= CAPACITY:
                    size += rows
                    fits.append(i)
        assert [i for i, _, _ in step] == fits
        for i, start, stop in step:
            assert start == at[i]
            at[i] = stop
            stops[i].append(stop)
    assert stops == cuts
