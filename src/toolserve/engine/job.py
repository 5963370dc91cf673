"""One generation inside the engine and its state (nano-vllm's `Sequence`).

A job is created by `submit`, waits, is admitted into one of the context's sequences (its
`seq`, whose KV it reads its prompt into and extends), reads its prompt chunk by chunk, then
decodes one token per step until it ends. The scheduler moves it through those states; the
runner reads `token`, `draft`, `at`, `n_past` and `stop` to fill the batch and leaves `row`
behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolserve.engine.base import MediaSpan
from toolserve.engine.slots import SeqState
from toolserve.engine.speculative import Budget, Drafter
from toolserve.types import SamplingParams

if TYPE_CHECKING:
    from toolserve.engine.sampler import Sampler


class Job:
    """One generation: its prompt, where it has read to, its sampler."""

    def __init__(self, gen: Any, prompt: list[int], params: SamplingParams, media: list[MediaSpan], adapter: int = 0):
        self.gen = gen  # the Generation (or an engine process's stand-in) its tokens go to
        self.prompt = prompt
        self.params = params
        self.media = media
        self.adapter = adapter  # the engine's adapter set it runs under
        self.images = {m.start: m for m in media}
        self.cuts: list[int] = []  # where its prompt's chunks end (slots.chunk_cuts), set at its start
        self.seq: SeqState = SeqState(-1)
        self.at = 0  # prompt tokens in the sequence's KV
        self.n_past = 0  # positions in use in its sequence
        self.leader: Job | None = None  # a job reading the same prefix now, to copy it from
        self.lead_until = 0
        self.sampler: Sampler | None = None
        self.max_tokens = 0
        self.produced = 0
        self.token = -1  # the sampled token to decode at the next step, once the prompt is read
        self.stop = 0  # end of the prompt chunk in this step's batch
        self.row = -1  # this step's (first) logits row
        self.kept: Any = None  # its prompt's last logits, kept from an earlier read of the same prompt
        # speculative decoding (engine/speculative.py): set at its start when it drafts
        self.speculative = "off"  # on | auto (only in a step with few decoding sequences) | off
        self.drafter: Drafter | None = None  # the index of its context, prompt and output
        self.budget = Budget()
        self.draft: list[int] = []  # this step's draft, decoded after `token`

    @property
    def reading(self) -> bool:
        return self.at < len(self.prompt)
