"""Picks each step's work: which jobs run, where their prompts start, what the batch holds.

Jobs wait in FIFO order until a sequence is idle. Admission (`admit`) builds a job's sampler
(a grammar that does not compile fails before any sequence is taken), asks engine/slots.py
where its prompt starts (the longest exact prefix among the sequences and the prompt cache's
snapshots) and carries that out through engine/memory.py; a job whose prompt shares a prefix
with one being read now follows it (the prefix is copied, not read twice). `schedule` then
picks one step: the adapter set whose turn it is, the next token of each of its decoding jobs,
one prompt chunk of each reading job that fits in the batch, and the jobs whose next input is
an image (evaluated whole, apart from the batch), and for decoding jobs that speculate, a
draft from their own context (and under `history` from earlier answers) in the batch's room left
over (engine/speculative.py). A prompt sent again right after itself starts from the logits its
first read kept (`take_resumed`). `end`
retires a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from toolserve.engine.base import EngineStats
from toolserve.engine.job import Job
from toolserve.engine.loader import Adapters
from toolserve.engine.memory import Memory
from toolserve.engine.prompt_cache import PromptCache
from toolserve.engine.sampler import Sampler
from toolserve.engine.slots import (
    SeqState,
    Turns,
    adapter_turn,
    chunk_cuts,
    lead,
    next_stop,
    plan,
    position,
    snapshot_media,
)
from toolserve.engine.speculative import DRAFT_MAX, Drafter, History, Worth
from toolserve.errors import EngineFailure, log_failure

log = logging.getLogger(__name__)

# steps in a row that requests of one adapter set decode while requests of another set wait
# (llama.cpp applies adapters to the whole context, so a batch holds one set's requests only)
ADAPTER_TURN = 8

SPECULATIVE = ("off", "on", "auto", "history")  # --speculative (history: on, and from earlier answers)
# under `auto`, drafts go only into steps with at most this many decoding sequences and no prompt
# chunk: llama.cpp cuts a batch over several KV streams into micro-batches with as many tokens of
# each sequence, so one sequence's draft adds micro-batches the others do not share, and on the
# CPU a step is compute-bound (bench/README.md, speculative.py)
AUTO_MAX_DECODING = 1


@dataclass
class Step:
    """One step's work, all under adapter set `adapter`."""

    adapter: int
    decoding: list[Job] = field(default_factory=list)  # each decodes its next token
    reading: list[Job] = field(default_factory=list)  # each reads one prompt chunk (job.at to job.stop)
    images: list[Job] = field(default_factory=list)  # each evaluates the image at job.at


class Scheduler:
    """The waiting and running jobs of one context, and its sequences' occupancy."""

    def __init__(
        self,
        seqs: Sequence[SeqState],
        memory: Memory,
        cache: PromptCache | None,
        stats: EngineStats,
        *,
        capacity: int,
        n_ctx: int,
        turns: Turns,
        sampler: Callable[[Job], Sampler],
        adapters: Adapters,
        speculative: str = "off",
        worth: Worth | None = None,
    ):
        """`worth`: what a draft's rows cost, by which `auto` drafts are cut (None: uncut)."""
        self.seqs = seqs
        self._memory = memory
        self._cache = cache
        self._stats = stats
        self._capacity = capacity  # the batch's rows
        self._n_ctx = n_ctx  # per sequence
        self._turns = turns
        self._sampler = sampler
        self._adapters = adapters
        self._speculative = speculative  # the server's setting; a request may ask otherwise
        self.history = History()  # earlier answers, drafted from under `history` (engine/speculative.py)
        self._worth = worth
        self.waiting: list[Job] = []
        self.running: list[Job] = []  # in the order they were admitted
        self.resumed: list[Job] = []  # admitted with their prompt's logits kept (take_resumed)
        self._started = 0  # admissions so far (orders the sequences' last use)
        self._turn = 0  # steps the applied set has had in a row while another set waited

    # -- admission: where a prompt starts ---------------------------------------------------------
    def admit(self) -> None:
        """Start waiting jobs in idle sequences, first come first served."""
        while self.waiting and len(self.running) < len(self.seqs):
            job = self.waiting.pop(0)
            if job.gen.cancelled:  # its client left while it waited: it never reaches the context
                self.end(job, "stop")
                continue
            try:
                self._start(job)
            except Exception as exc:
                log_failure(log, "starting a generation failed", exc)
                self.end(job, error=EngineFailure(f"generation failed: {type(exc).__name__}"))

    def _start(self, job: Job) -> None:
        job.sampler = self._sampler(job)  # first what may fail: no sequence is taken yet
        job.max_tokens = min(job.params.max_tokens, self._n_ctx - len(job.prompt))
        job.cuts = chunk_cuts(job.prompt, self._turns, job.media)
        job.speculative = self._mode(job.params.speculative)
        if job.speculative != "off":
            # earlier answers only where the server says so: drafts from them change the batches a
            # request is verified in from one time it is sent to the next, and with them the rounding
            job.drafter = Drafter(job.prompt, history=self.history if job.speculative == "history" else None)
        again = self._answered(job)
        if again is not None:  # the same prompt again: from its first read's logits, nothing to read
            seq, reuse = self._again(job, again), len(job.prompt)
            job.kept = seq.logits
            self.resumed.append(job)
        else:
            seq, reuse = self._place(job)
        self._memory.trim(seq, reuse)
        seq.cuts = job.cuts  # it cut its first `reuse` tokens as the prompt does (slots.reach), and reads on so
        seq.adapter = job.adapter
        self._started += 1
        seq.busy, seq.used = True, self._started
        job.seq, job.at, job.n_past = seq, reuse, position(reuse, job.media)
        job.gen.cached_tokens = reuse
        self._stats.requests += 1
        self._stats.prompt_tokens += len(job.prompt)
        self._stats.cached_tokens += reuse
        if self._cache is not None:
            if reuse:
                self._cache.stats.hits += 1
            else:
                self._cache.stats.misses += 1
            # a prefix that another request is reading now is copied, not read twice
            for other in self.running:
                if other.reading and other.leader is None and other.adapter == job.adapter:
                    until = lead(job.prompt, job.cuts, other.prompt, other.cuts, reuse)
                    if until > job.lead_until:
                        job.leader, job.lead_until = other, until
        self.running.append(job)
        self._stats.active = len(self.running)

    def _place(self, job: Job) -> tuple[SeqState, int]:
        """Carry out slots.plan for a job: the sequence it runs in and the prompt tokens reused."""
        p = plan(self.seqs, job.prompt, job.cuts, self._cache, job.adapter)
        seq = self.seqs[p.target]
        if p.save or p.snapshot is not None:
            self._memory.flush()
        if p.save:
            self._memory.save(seq, keep=p.snapshot)  # the snapshot chosen for this prompt must outlive the save
        reuse = p.reuse
        if p.snapshot is not None:
            if not self._memory.restore(seq, p.snapshot):
                reuse = 0
        elif p.source is not None:
            self._memory.clear(seq)
            self._memory.copy(self.seqs[p.source], seq, position(reuse, job.media))
            seq.tokens, seq.usable, seq.media = job.prompt[:reuse], reuse, snapshot_media(job.media, reuse)
        return seq, reuse

    def _answered(self, job: Job) -> SeqState | None:
        """A sequence that read this very prompt to its end and kept its last logits (a request
        sent again, a retry, another choice), idle ones first: its KV and logits are what reading
        the prompt again would compute, in the same chunks (none with the cache off or an image)."""
        if self._cache is None or job.media:
            return None
        n = len(job.prompt)
        held = [s for s in self.seqs if s.whole == n and s.logits is not None and s.adapter == job.adapter and s.tokens[:n] == job.prompt]
        return min(held, key=lambda s: s.busy, default=None)

    def _again(self, job: Job, source: SeqState) -> SeqState:
        """The sequence a prompt sent again runs in: the idle one that holds it, else an idle one
        that gets a copy of it from the busy one still answering it (whether the earlier request
        has ended yet must not change what this one reuses)."""
        if not source.busy:
            return source
        p = plan(self.seqs, job.prompt, job.cuts, self._cache, job.adapter)  # only for its target and save
        seq = self.seqs[p.target]
        if p.save:
            self._memory.flush()
            self._memory.save(seq)
        n = len(job.prompt)
        self._memory.clear(seq)
        self._memory.copy(source, seq, n)
        seq.tokens, seq.usable, seq.media = job.prompt[:], source.usable, []
        seq.whole, seq.logits = n, source.logits
        return seq

    def take_resumed(self) -> list[Job]:
        """The jobs admitted since the last call that start from kept logits: each samples its
        first token from them before the next step."""
        jobs, self.resumed = self.resumed, []
        return jobs

    def follow(self, job: Job, final: bool = False) -> None:
        """Once the job's leader has read their shared prefix (or stops reading, or ends:
        `final`), copy it."""
        leader = job.leader
        assert leader is not None
        upto = min(leader.seq.usable, job.lead_until)
        if upto < job.lead_until and leader.reading and not final:
            return  # one copy at the end: each copy moves a whole KV stream
        if upto > job.at:
            end = position(upto, job.media)
            self._memory.copy(leader.seq, job.seq, end)
            job.seq.tokens[:] = job.prompt[:upto]
            job.seq.media = snapshot_media(job.media, upto)
            job.seq.usable = upto
            job.gen.cached_tokens += upto - job.at
            self._stats.cached_tokens += upto - job.at
            job.at, job.n_past = upto, end
        if job.at >= job.lead_until or not leader.reading:
            job.leader = None

    def _mode(self, asked: bool | None) -> str:
        if self._speculative == "never":  # the model cannot drop KV cells it has (recurrent)
            return "off"
        if asked is None:
            return self._speculative
        if not asked:
            return "off"
        return "history" if self._speculative == "history" else "on"

    # -- each step's work -------------------------------------------------------------------------
    def schedule(self) -> Step | None:
        """This step's work, or None when nothing runs. Cancelled jobs end first (their sequence
        is free at once)."""
        for job in list(self.running):
            if job.gen.cancelled:
                self.end(job, "stop")
        if not self.running:
            return None
        chosen, self._turn = adapter_turn(sorted({j.adapter for j in self.running}), self._adapters.applied, self._turn, ADAPTER_TURN)
        turn = [j for j in self.running if j.adapter == chosen]
        step = Step(chosen, decoding=[j for j in turn if not j.reading])
        size = len(step.decoding)
        for job in turn:
            if not job.reading:
                continue
            if job.leader is not None:
                self.follow(job)
                if job.leader is not None:
                    continue  # its leader reads the next chunk of their shared prefix
            if job.at in job.images:
                step.images.append(job)
                continue
            stop = next_stop(job.at, len(job.prompt), job.cuts)
            if size + stop - job.at > self._capacity:
                continue  # the batch is full: next step
            size += stop - job.at
            job.stop = stop
            step.reading.append(job)
        self._draft(step, self._capacity - size)
        return step

    def _draft(self, step: Step, room: int) -> None:
        """Give each decoding job that speculates a draft, within the batch's `room`; one that
        cannot reach its end (max tokens, the context) drafts no further than it."""
        crowded = len(step.decoding) > AUTO_MAX_DECODING or bool(step.reading)
        for job in step.decoding:
            job.draft = []
            if job.drafter is None or room <= 0 or (job.speculative == "auto" and crowded):
                continue
            assert job.sampler is not None
            cap = min(job.max_tokens - job.produced - 1, room)
            draft = job.drafter.draft(min(job.budget.limit, cap), sure=min(DRAFT_MAX, cap))
            if draft and job.speculative == "auto" and self._worth is not None:
                draft = draft[: self._worth.keep(len(draft), job.budget.chance(job.drafter.agreed))]
            job.draft = job.sampler.allowed(draft)
            room -= len(job.draft)

    # -- the end of a job ---------------------------------------------------------------------------
    def end(self, job: Job, finish: str | None = None, error: BaseException | None = None) -> None:
        """A request is over: its sequence keeps its prompt's whole chunks for the next turn
        (nothing with the cache off), and its followers take what their leader read."""
        if job in self.running:
            for other in self.running:
                if other.leader is job:
                    self.follow(other, final=True)
                    other.leader = None
            self.running.remove(job)
            seq = job.seq
            self._memory.trim(seq, max(seq.usable, seq.whole) if self._cache is not None else 0)
            seq.busy = False
        if job.sampler is not None:
            job.sampler.close()
        if job.drafter is not None and job.drafter.history is not None and error is None:
            self.history.add(job.drafter.answer(len(job.prompt)))
        self._stats.active = len(self.running)
        self._stats.finished += 1
        job.gen.close(finish, error)

    def fail_all(self, error: BaseException) -> None:
        """End every running request with `error` and start the context afresh."""
        for job in list(self.running):
            self.end(job, error=error)
        self._memory.reset()
