"""The embedded llama.cpp backend: one context with several sequences, driven by one worker thread.

Every step of the worker decodes one batch: the next token of each running request, plus one
prompt chunk of each request still reading its prompt (within the batch budget), and samples
each request from its own row of the logits. A batch of 8 reads the weights once for 8 tokens:
on CPU as on GPU that is where concurrent requests get their speed.

The parts, one concept each (nano-vllm's shape):
- engine/job.py        one generation and its state
- engine/scheduler.py  admission (where a prompt starts: engine/slots.py) and each step's work
- engine/runner.py     a step's work as one llama_decode batch
- engine/memory.py     the sequences' KV cells and the prompt cache's snapshots
- engine/sampler.py    the sampler chain, grammar mask and logprobs of one job
- engine/speculative.py  drafts from a job's own context (speculative decoding)
- engine/loader.py     the model, its context and LoRA adapter sets
- engine/projector.py  images (libmtmd)
This module wires them, owns the worker thread, and turns each step's rows into tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import queue
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp

from toolserve import _native
from toolserve.engine import cores, loader, placement
from toolserve.engine.base import EngineStats, Generation, Lora, MediaSpan, ModelInfo
from toolserve.engine.cores import Shares
from toolserve.engine.job import Job
from toolserve.engine.loader import KV_TYPES, Adapters, _Llama  # noqa: F401  (KV_TYPES, _Llama: this module's names before the split)
from toolserve.engine.memory import Memory
from toolserve.engine.projector import Projector
from toolserve.engine.prompt_cache import PromptCache
from toolserve.engine.runner import Runner
from toolserve.engine.sampler import DrySamplers, Sampler, row_logits
from toolserve.engine.scheduler import SPECULATIVE, Scheduler, Step
from toolserve.engine.slots import PREFILL_CHUNK, SeqState, boundary
from toolserve.engine.speculative import CPU_COSTS, Worth
from toolserve.engine.vocab import VocabView
from toolserve.errors import EngineFailure, InvalidRequest, ModelLoadError, log_failure
from toolserve.types import ImageData, SamplingParams, TokenEvent

log = logging.getLogger(__name__)


class LlamaCppEngine:
    """Runs a GGUF model with llama-cpp-python: `parallel` sequences in one context, batched by
    one worker thread."""

    prefill_chunk = PREFILL_CHUNK

    def __init__(
        self,
        path: str,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = PREFILL_CHUNK,
        cache_ram_mb: int = 0,
        cache_type_k: str = "f16",
        cache_type_v: str = "f16",
        mmproj: str | None = None,
        repack: bool = True,
        parallel: int = 1,
        flash_attn: bool | None = None,
        adapters: Sequence[Sequence[Lora]] = (),
        gpu_layers: int = 0,
        main_gpu: int = 0,
        split_mode: str = "layer",
        tensor_split: Sequence[float] = (),
        kv_offload: bool = True,
        placed_by: str = "",
        core_shares: str | None = None,
        speculative: str = "off",
    ):
        """`adapters`: the LoRA adapter sets requests may run under, by index (`submit`'s
        `adapter`); set 0 is the default (empty: the base weights). `core_shares`: the
        server's directory when its busy engines share the cores (engine/cores.py); unused when
        all of the model's layers are on a GPU. `speculative`: off, on, auto or history, drafting
        from each request's context (history: and earlier answers; engine/speculative.py); a
        request's `speculative` overrides it."""
        if speculative not in SPECULATIVE:
            raise ModelLoadError(f"speculative must be one of {', '.join(SPECULATIVE)}, not {speculative!r}")
        threads = cores.threads(n_threads)
        n_batch += parallel  # a whole prompt chunk fits beside one decode token of every other sequence
        self.slots = parallel
        gpu_backend = placement.gpu_offload()
        if gpu_backend and _native.numpy_first:
            log.warning("numpy was loaded before llama.cpp's libraries (imported before toolserve); CUDA builds have crashed so: import toolserve first")
        devs_before = placement.devices() if gpu_backend else []
        self._llm = loader.load(
            path, n_ctx=n_ctx, n_batch=n_batch, threads=threads, parallel=parallel, cache_type_k=cache_type_k,
            cache_type_v=cache_type_v, flash_attn=flash_attn, repack=repack, gpu_layers=gpu_layers, main_gpu=main_gpu,
            split_mode=split_mode, tensor_split=tensor_split, kv_offload=kv_offload, devs_before=devs_before,
        )
        model = self._llm._model
        self.vocab = VocabView(model.vocab)
        self._vocab = model.vocab
        self._dry = DrySamplers(self._vocab)  # DRY's breakers found once per multiplier, not per request
        self._n_vocab = self.vocab.n_vocab
        meta = self._llm.metadata
        self._n_batch = n_batch
        self._projector: Projector | None = None
        try:
            if mmproj is not None:
                self._projector = Projector(mmproj, model.model, threads)
            self._adapters = Adapters(model.model, adapters or [()])
        except ModelLoadError:
            if self._projector is not None:
                self._projector.close()
            self._llm.close()  # frees the adapters loaded so far with the model
            raise
        self.adapter_index = self._adapters.index
        bos, eos = model.token_bos(), model.token_eos()
        where = placement.report(
            devs_before, gpu_backend, llama_cpp.llama_model_n_layer(model.model), gpu_layers, split_mode, main_gpu, tensor_split, kv_offload, placed_by
        )
        self.info = ModelInfo(
            path=path,
            architecture=meta.get("general.architecture", ""),
            n_ctx=min(self._llm.n_ctx() // parallel, n_ctx),  # per sequence
            n_ctx_train=model.n_ctx_train(),
            n_vocab=self._n_vocab,
            size_bytes=os.path.getsize(path),
            bos_token=self.token_piece(bos).decode("utf-8", "replace") if bos >= 0 else "",
            eos_token=self.token_piece(eos).decode("utf-8", "replace") if eos >= 0 else "",
            add_bos=model.add_bos_token(),
            chat_template=meta.get("tokenizer.chat_template"),
            vision=self._projector is not None,
            repack=bool(self._llm.model_params.use_extra_bufts),
            placement=where,
            fim=self.vocab.fim_tokens(),
        )
        self.stats = EngineStats()
        self.cache = PromptCache(cache_ram_mb * 1024 * 1024) if cache_ram_mb > 0 else None
        self._ctx = self._llm._ctx.ctx
        on_cores = where.gpu_layers < where.n_layers  # all on a GPU: no share of the cores
        self._cores = Shares(core_shares if on_cores else None, threads, apply=lambda n: llama_cpp.llama_set_n_threads(self._ctx, n, n))
        if speculative != "off" and (llama_cpp.llama_model_is_recurrent(model.model) or llama_cpp.llama_model_is_hybrid(model.model)):
            log.info("speculative decoding is off: this model's state cannot drop rejected draft tokens")
            speculative = "never"
        worth = Worth(CPU_COSTS) if speculative == "auto" and on_cores else None  # drafts cut to what pays for their rows on a CPU
        if worth is not None:
            log.info("speculative auto: drafts cut to what pays on the CPU, a token with a draft of 1, 2, 4, 8, 16 taken to cost %s lone tokens",
                     ", ".join(f"{worth.ratio[n + 1]:.1f}" for n in (1, 2, 4, 8, 16)))
        seqs = [SeqState(i) for i in range(parallel)]
        self._runner = Runner(self._ctx, n_batch, parallel, self._cores, self.stats)
        self._memory = Memory(self._ctx, seqs, self.cache, self._runner)
        self._scheduler = Scheduler(
            seqs, self._memory, self.cache, self.stats, capacity=n_batch, n_ctx=self.info.n_ctx,
            turns=self.vocab.turns(), sampler=lambda job: Sampler(job.params, job.prompt, self._n_vocab, self._dry), adapters=self._adapters,
            speculative=speculative, worth=worth,
        )
        if self._adapters.sets[0]:
            self._adapters.apply(self._ctx, 0)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self.embedder: Any = None  # engine/embed.py's context on these weights (--embeddings), closed before them
        self.on_step: Any = None  # called by the worker thread after each step (an engine process sends its events)
        self._worker = threading.Thread(target=self._run, name="toolserve-engine", daemon=True)
        self._worker.start()

    # -- vocabulary (read-only, safe from any thread) ----------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return self.vocab.tokenize(text, add_bos=add_bos, special=special)

    def token_piece(self, token: int) -> bytes:
        return self.vocab.token_piece(token)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return self.vocab.detokenize(tokens)

    def grammar_tokenizer(self) -> object:
        """llguidance's view of this vocabulary (for constrain/), with every end-of-generation token."""
        return self.vocab.grammar_tokenizer()

    def tokenize_image(self, image: ImageData) -> list[int | MediaSpan]:
        if self._projector is None:
            raise InvalidRequest("This model accepts text only.")
        return self._projector.tokenize(image, self._n_batch)

    # -- generation ---------------------------------------------------------------------------
    def submit(self, prompt: Sequence[int], params: SamplingParams, media: Sequence[MediaSpan] = (), adapter: int = 0) -> Generation:
        """Start a generation; `adapter` picks the adapter set (the constructor's `adapters`)."""
        gen = Generation(asyncio.get_running_loop(), len(prompt))
        self.stats.submitted += 1
        self.enqueue(gen, prompt, params, media, adapter)
        return gen

    def enqueue(self, gen: Any, prompt: Sequence[int], params: SamplingParams, media: Sequence[MediaSpan] = (), adapter: int = 0) -> None:
        """Queue a generation for `gen`, any object with Generation's engine side (`push`,
        `close`, `cancelled`, `cached_tokens`): an engine process passes its own."""
        self._jobs.put(Job(gen, list(prompt), params, list(media), self.adapter_index[adapter]))

    def close(self) -> None:
        self._jobs.put(None)
        self._worker.join(timeout=30)
        if self.cache is not None:
            self.cache.clear()  # snapshots never outlive the model they came from
        if self._projector is not None:
            self._projector.close()
            self._projector = None
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        self._adapters.free()
        self._dry.close()
        self._llm.close()
        self._cores.close()

    # -- the worker thread ----------------------------------------------------------------------
    def _run(self) -> None:
        scheduler = self._scheduler
        closing = False
        while not closing:
            if not scheduler.running and not scheduler.waiting:
                self._cores.busy(False)
                job = self._jobs.get()  # nothing to do: sleep until a request comes
                if job is None:
                    break
                scheduler.waiting.append(job)
                self._cores.busy(True)
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    closing = True
                    break
                scheduler.waiting.append(job)
            if closing:
                break
            try:
                scheduler.admit()
                for job in scheduler.take_resumed():
                    self._sample(job, -1, job.kept)
                    job.kept = None
                if scheduler.running:
                    self.step()
            except Exception as exc:  # a failed decode must not kill the worker
                log_failure(log, "generation failed", exc)
                scheduler.fail_all(EngineFailure(f"generation failed: {type(exc).__name__}"))
            if self.on_step is not None:
                self.on_step()
        for job in [*scheduler.running, *scheduler.waiting]:
            scheduler.end(job, "stop")
        if self.on_step is not None:
            self.on_step()

    def step(self) -> None:
        """One step: pick the work, decode it as one batch, take each job's token from its row."""
        step = self._scheduler.schedule()
        if step is None:
            return
        if step.adapter != self._adapters.applied:
            self._adapters.apply(self._ctx, step.adapter)
        self._runner.run(step.decoding, step.reading)
        self._postprocess(step)
        for job in step.images:
            self._read_image(job)

    def _postprocess(self, step: Step) -> None:
        """Record what the batch put in each sequence's KV, and sample where a row was computed."""
        for job in step.decoding:
            self._verify(job)
        for job in step.reading:
            job.seq.tokens.extend(job.prompt[job.at : job.stop])
            job.at, job.n_past = job.stop, job.n_past + job.stop - job.at
            job.seq.usable = boundary(job.at, job.cuts)
            if not job.reading:
                if self.cache is not None and not job.media:  # kept for the same prompt sent again
                    job.seq.whole, job.seq.logits = job.at, row_logits(self._ctx, job.row, self._n_vocab).copy()
                self._sample(job, job.row)

    def _verify(self, job: Job) -> None:
        """Sample a decoding job row by row: its token's row, then each draft token's while the
        token sampled before it equals it (engine/speculative.py says why that keeps the model's
        distribution). The KV of the draft tokens after the first disagreement is dropped."""
        draft = job.draft
        job.seq.tokens.append(job.token)
        job.n_past += 1
        kept = 0
        for i in range(len(draft) + 1):
            token = self._sample(job, job.row + i)
            if token is None or i == len(draft) or token != draft[i]:
                break
            job.seq.tokens.append(token)  # its KV was computed in this batch
            job.n_past += 1
            kept += 1
        if draft:
            job.draft = []
            job.budget.update(len(draft), kept)
            self.stats.drafted_tokens += len(draft)
            self.stats.accepted_tokens += kept
            if job.seq.busy and job in self._scheduler.running and not self._memory.drop_after(job.seq, job.n_past):
                raise EngineFailure("llama.cpp could not drop the rejected draft tokens")

    def _read_image(self, job: Job) -> None:
        """Encode an image with the projector and decode its embeddings into the job's sequence
        (in its own decode calls: libmtmd evaluates an image whole)."""
        assert self._projector is not None
        image = job.images[job.at]
        last = image.end == len(job.prompt)
        with self._cores.alone():  # its encoder keeps the threads it was loaded with
            rc, n_past = self._projector.eval(self._ctx, image, job.n_past, job.seq.id, self._n_batch, last)
        if rc != 0:
            self._scheduler.end(job, error=EngineFailure(f"encoding an image failed (libmtmd error {rc})"))
            return
        self._runner.copies_pending = False  # its decodes carried them out
        job.seq.tokens.extend(job.prompt[image.start : image.end])
        job.seq.media.append(dataclasses.replace(image, handle=None))
        job.at, job.n_past = image.end, n_past
        job.seq.usable = boundary(job.at, job.cuts)
        if last:
            self._sample(job, -1)  # its logits are the last decode's

    def _sample(self, job: Job, row: int, kept: Any = None) -> int | None:
        """Pick the job's next token from its row of the logits (or from `kept` logits) and hand
        it over; the token, or None when the job ended."""
        assert job.sampler is not None
        end = self._scheduler.end
        try:
            token, lp = job.sampler.pick(self._ctx, row, kept)
        except Exception as exc:
            log_failure(log, "sampling failed", exc)
            end(job, error=EngineFailure(f"sampling failed: {type(exc).__name__}"))
            return None
        if token is None:
            end(job, "length")  # a dead end: nothing may follow, and the grammar is not complete
            return None
        job.produced += 1
        self.stats.generated_tokens += 1
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            job.gen.push(TokenEvent(token, self.token_piece(token), is_eog=True, logprob=lp))
            end(job, "stop")
            return None
        job.gen.push(TokenEvent(token, self.token_piece(token), logprob=lp))
        if job.sampler.accept(token):
            end(job, "stop")
            return None
        if job.produced >= job.max_tokens:
            end(job, "length")
            return None
        job.token = token
        if job.drafter is not None:
            job.drafter.extend((token,))
        return token
