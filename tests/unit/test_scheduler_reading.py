"""Which prompt chunks a step reads (engine/scheduler.py): on a CPU, a burst of prompts is read a
few at a time in the order the requests came, in at most `read_rows` rows a step (or one chunk
that is longer alone); with no limit (a GPU) every chunk that fits in the batch."""

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


def _scheduler(slots: int, read_rows: int | None) -> Scheduler:
    return Scheduler(
        [SeqState(i) for i in range(slots)], _Memory(), None, EngineStats(),  # type: ignore[arg-type]
        capacity=CAPACITY, n_ctx=8192, turns=TURNS, sampler=lambda job: _Sampler(),  # type: ignore[arg-type,return-value]
        adapters=SimpleNamespace(applied=0), read_rows=read_rows,  # type: ignore[arg-type]
    )


def _job(length: int, first: int = 10) -> Job:
    gen = SimpleNamespace(cancelled=False, cached_tokens=0, close=lambda *a: None)
    return Job(gen, list(range(first, first + length)), SamplingParams(max_tokens=4), [])


def _read(lengths: list[int], read_rows: int | None, slots: int = 8) -> list[list[tuple[int, int, int]]]:
    """Each step's prompt chunks, (job, start, stop), until every prompt is read; each job
    decodes from the step after its last chunk, as the engine's worker would run it."""
    sched = _scheduler(slots, read_rows)
    jobs = [_job(n, 10 + 1000 * i) for i, n in enumerate(lengths)]
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
    ("lengths", "read_rows", "steps"),
    [
        # a burst of 8 short prompts on a CPU: two at a time (30 + 30 <= 64), first come first
        ([30] * 8, 64, [[(0, 0, 30), (1, 0, 30)], [(2, 0, 30), (3, 0, 30)], [(4, 0, 30), (5, 0, 30)], [(6, 0, 30), (7, 0, 30)]]),
        # the same on a GPU: all in one step
        ([30] * 8, None, [[(i, 0, 30) for i in range(8)]]),
        # one at a time where two do not fit in the rows
        ([40, 40, 40], 64, [[(0, 0, 40)], [(1, 0, 40)], [(2, 0, 40)]]),
        # a step's first chunk is read whatever its length (a prompt is never held back)
        ([600, 30, 30], 64, [[(0, 0, 512)], [(0, 512, 600)], [(1, 0, 30), (2, 0, 30)]]),
        # a later shorter chunk fills the rows that an earlier longer one did not fit in
        ([30, 50, 20], 64, [[(0, 0, 30), (2, 0, 20)], [(1, 0, 50)]]),
        # the rows of a step are exactly the limit
        ([32, 32, 1], 64, [[(0, 0, 32), (1, 0, 32)], [(2, 0, 1)]]),
        # without the limit the batch's size still holds: 512 + 8 rows
        ([512, 8, 1], None, [[(0, 0, 512), (1, 0, 8)], [(2, 0, 1)]]),
    ],
)
def test_a_step_reads_prompt_chunks_within_the_rows(lengths: list[int], read_rows: int | None, steps: list[Any]) -> None:
    assert _read(lengths, read_rows) == steps


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 1300), min_size=1, max_size=8),
    st.one_of(st.none(), st.integers(1, 600)),
)
def test_every_prompt_is_read_whole_in_its_own_chunks_and_in_order(lengths: list[int], read_rows: int | None) -> None:
    steps = _read(lengths, read_rows)
    limit = CAPACITY if read_rows is None else read_rows
    at = [0] * len(lengths)
    stops: list[list[int]] = [[] for _ in lengths]
    for step in steps:
        assert step, "a step with prompts left to read reads at least one chunk"
        assert step[0][0] == min(i for i, n in enumerate(lengths) if at[i] < n)  # the earliest still reading
        rows = [stop - start for _, start, stop in step]
        assert len(step) == 1 or sum(rows) <= limit
        assert sum(rows) <= CAPACITY
        for i, start, stop in step:
            assert start == at[i]
            at[i] = stop
            stops[i].append(stop)
    for i, n in enumerate(lengths):
        prompt = list(range(10 + 1000 * i, 10 + 1000 * i + n))
        assert stops[i] == [c for c in chunk_cuts(prompt, TURNS) if c < n] + [n]
