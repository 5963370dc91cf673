"""Generation from a prompt given as tokens, with no chat template and no parser: Ollama's raw
prompts and fill-in-the-middle (its `suffix`, llama-server's /infill). The text comes back as
content Steps, so the protocols render it as they render a conversation's."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ResponseSchema, Step, check_counts, context_size, fill_sampling, text_steps
from toolserve.serving.pipeline import Pipeline, Ticket
from toolserve.types import SamplingParams


@dataclass(frozen=True)
class TextRequest:
    prompt: list[int]
    sampling: SamplingParams
    given: frozenset[str] = frozenset()  # the sampling fields the client set (the rest: server defaults)
    max_tokens: int | None = None  # None: what the context leaves
    stops: tuple[str, ...] = ()
    schema: ResponseSchema | None = None  # a JSON answer, enforced from the first token
    context_limit: int | None = None  # a smaller context than the model's (Ollama's num_ctx)
    # the protocol's names of the prompt, the stop strings and the context size, for errors
    names: Mapping[str, str] = field(default_factory=lambda: {"prompt": "prompt", "stop": "stop", "context_limit": "num_ctx"})


class TextRun:
    """One prompt, checked, fitted to the context and admitted to the model's queue (the
    caller releases `ticket` when the request is over)."""

    ticket: Ticket

    def __init__(self, pipe: Pipeline, req: TextRequest):
        check_counts(pipe.limits, req.names, stops=len(req.stops))
        n_ctx = context_size(pipe, req.context_limit, req.names["context_limit"])
        params = fill_sampling(req.sampling, pipe.sampling_fill(prose=False), req.given)  # a raw prompt continued
        constraint = pipe.constraint("", ChatOptions(), req.schema) if req.schema is not None else None
        params = dataclasses.replace(params, max_tokens=req.max_tokens or n_ctx, constraint=constraint)
        self.params = pipe.fit(req.prompt, params, param=req.names["prompt"], n_ctx=n_ctx)
        self.pipe, self.req = pipe, req
        self.model_id = pipe.model_id

    @classmethod
    async def start(cls, pipe: Pipeline, build: Callable[[], TextRequest]) -> TextRun:
        """`build` (tokenizing a long prompt takes a while) and the checks run off the event
        loop; then the request is admitted: a refused or invalid one holds no place."""
        run = await asyncio.to_thread(lambda: cls(pipe, build()))
        run.ticket = pipe.admit()
        return run

    def steps(self) -> AsyncIterator[Step]:
        return text_steps(self.pipe.generate(self.req.prompt, self.params, self.req.stops))
