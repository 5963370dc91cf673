"""The embedded llama.cpp backend: one context with several sequences, driven by one worker thread.

Every step of the worker decodes one batch: the next token of each running request, plus one
prompt chunk of each request still reading its prompt (within the batch budget), and samples
each request from its own row of the logits. A batch of 8 reads the weights once for 8 tokens:
on CPU as on GPU that is where concurrent requests get their speed. See engine/slots.py for how
a prompt finds its cached prefix.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
import os
import queue
import random
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

from toolserve import _native
from toolserve.engine import cores, placement
from toolserve.engine.base import EngineStats, Generation, Lora, MediaSpan, ModelInfo, media_key
from toolserve.engine.cores import Shares
from toolserve.engine.prompt_cache import CacheEntry, PromptCache
from toolserve.engine.slots import (
    PREFILL_CHUNK,
    SeqState,
    adapter_turn,
    boundary,
    chunk_cuts,
    lead,
    next_stop,
    plan,
    position,
    snapshot_media,
)
from toolserve.engine.vocab import VocabView
from toolserve.errors import EngineFailure, InvalidRequest, ModelLoadError, log_failure
from toolserve.types import ImageData, SamplingParams, TokenConstraint, TokenEvent, TokenLogprob

log = logging.getLogger(__name__)

PENALTY_LAST_N = 64  # llama.cpp's default window for repetition/presence/frequency penalties
# steps in a row that requests of one adapter set decode while requests of another set wait
# (llama.cpp applies adapters to the whole context, so a batch holds one set's requests only)
ADAPTER_TURN = 8
_LOG_ERROR = 4  # ggml_log_level GGML_LOG_LEVEL_ERROR (ggml.h)


# KV cache element types that llama.cpp accepts for --cache-type-k / --cache-type-v
KV_TYPES = {
    "f32": llama_cpp.GGML_TYPE_F32,
    "f16": llama_cpp.GGML_TYPE_F16,
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q5_1": llama_cpp.GGML_TYPE_Q5_1,
    "q5_0": llama_cpp.GGML_TYPE_Q5_0,
    "q4_1": llama_cpp.GGML_TYPE_Q4_1,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
    "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL,
}
@llama_cpp.llama_log_callback
def _quiet(level: int, text: bytes, user_data: object) -> None:
    """libmtmd's log sink: its per-image chatter stays out of the server's output."""


class _Chunk:
    """An encoded-input chunk of libmtmd, freed with its last reference."""

    def __init__(self, ptr: object):
        self.ptr = ptr

    def __del__(self) -> None:
        from llama_cpp import mtmd_cpp

        mtmd_cpp.mtmd_input_chunk_free(self.ptr)


class _Llama(llama_cpp.Llama):
    """`Llama` with the settings its constructor has no argument for: llama.cpp's
    `use_extra_bufts` (weight repacking, off with `--no-repack`) in the model parameters, and
    `overrides` of context parameters (several sequences, each in its own KV stream, flash
    attention's automatic choice). `Llama.__init__` builds both parameter structs itself; the
    model's is set when assigned, the context's is reapplied each time it is read, so the last
    read (when the context is created) carries them."""

    def __init__(self, *, repack: bool, overrides: dict[str, Any] | None = None, **kwargs: object):
        self._repack = repack
        self._overrides = overrides or {}
        super().__init__(**kwargs)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def model_params(self) -> llama_cpp.llama_model_params:
        return self.__dict__["model_params"]  # type: ignore[no-any-return]

    @model_params.setter
    def model_params(self, params: llama_cpp.llama_model_params) -> None:
        params.use_extra_bufts = self._repack
        self.__dict__["model_params"] = params

    @property  # type: ignore[override]
    def context_params(self) -> llama_cpp.llama_context_params:
        params = self.__dict__["context_params"]
        for name, value in self._overrides.items():
            setattr(params, name, value)
        return params  # type: ignore[no-any-return]

    @context_params.setter
    def context_params(self, params: llama_cpp.llama_context_params) -> None:
        self.__dict__["context_params"] = params


class _Batch:
    """A llama_batch over arrays this object owns, filled a slice at a time through numpy views
    (one sequence id per token: its pointer aims at a constant of that sequence)."""

    def __init__(self, capacity: int, n_seqs: int):
        self.capacity = capacity
        self._token = (llama_cpp.llama_token * capacity)()
        self._pos = (llama_cpp.llama_pos * capacity)()
        self._n_seq_id = (ctypes.c_int32 * capacity)(*([1] * capacity))
        self._seq_ids = (llama_cpp.llama_seq_id * n_seqs)(*range(n_seqs))
        self._seq_ptrs = (ctypes.POINTER(llama_cpp.llama_seq_id) * capacity)()
        self._logits = (ctypes.c_int8 * capacity)()
        base, size = ctypes.addressof(self._seq_ids), ctypes.sizeof(llama_cpp.llama_seq_id)
        self._seq_addr = [base + i * size for i in range(n_seqs)]
        self.token = np.ctypeslib.as_array(self._token)
        self.pos = np.ctypeslib.as_array(self._pos)
        self.logits = np.ctypeslib.as_array(self._logits)
        self.seq = np.ctypeslib.as_array(ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.c_size_t)), shape=(capacity,))
        self.n = 0
        struct: Any = llama_cpp.llama_batch()  # its fields are pointers; the stubs type them as arrays
        struct.token = ctypes.cast(self._token, ctypes.POINTER(llama_cpp.llama_token))
        struct.embd = None
        struct.pos = ctypes.cast(self._pos, ctypes.POINTER(llama_cpp.llama_pos))
        struct.n_seq_id = ctypes.cast(self._n_seq_id, ctypes.POINTER(ctypes.c_int32))
        struct.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(llama_cpp.llama_seq_id)))
        struct.logits = ctypes.cast(self._logits, ctypes.POINTER(ctypes.c_int8))
        self.struct = struct

    def add(self, tokens: Sequence[int], pos: int, seq: int, logits: bool) -> int:
        """Append tokens of one sequence at positions from `pos`; the row of the last one."""
        i, k = self.n, len(tokens)
        end = i + k
        self.token[i:end] = tokens
        self.pos[i:end] = np.arange(pos, pos + k, dtype=np.int32)
        self.seq[i:end] = self._seq_addr[seq]
        self.logits[i:end] = 0
        if logits:
            self.logits[end - 1] = 1
        self.n = end
        return end - 1


class _Job:
    """One generation inside the engine: its prompt, where it has read to, its sampler."""

    def __init__(self, gen: Generation, prompt: list[int], params: SamplingParams, media: list[MediaSpan], adapter: int = 0):
        self.gen = gen
        self.prompt = prompt
        self.params = params
        self.media = media
        self.adapter = adapter  # the engine's adapter set it runs under
        self.images = {m.start: m for m in media}
        self.cuts: list[int] = []  # where its prompt's chunks end (slots.chunk_cuts), set at its start
        self.seq: SeqState = SeqState(-1)
        self.at = 0  # prompt tokens in the sequence's KV
        self.n_past = 0  # positions in use in its sequence
        self.leader: _Job | None = None  # a job reading the same prefix now, to copy it from
        self.lead_until = 0
        self.sampler: _internals.LlamaSampler | None = None
        self.constraint: TokenConstraint | None = None
        self.max_tokens = 0
        self.produced = 0
        self.token = -1  # the sampled token to decode at the next step, once the prompt is read
        self.stop = 0  # end of the prompt chunk in this step's batch
        self.row = -1  # this step's logits row

    @property
    def reading(self) -> bool:
        return self.at < len(self.prompt)


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
    ):
        """`adapters`: the LoRA adapter sets requests may run under, by index (`submit`'s
        `adapter`); set 0 is the default (empty: the base weights). `core_shares`: the
        server's directory when its busy engines share the cores (engine/cores.py); unused when
        all of the model's layers are on a GPU."""
        threads = cores.threads(n_threads)
        n_batch += parallel  # a whole prompt chunk fits beside one decode token of every other sequence
        if flash_attn is None:  # llama.cpp's automatic choice, as llama-server's default
            fa = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        else:
            fa = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if cache_type_v not in ("f16", "f32") and fa == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED:
            raise ModelLoadError("a quantised V cache needs flash attention")
        self.slots = parallel
        gpu_backend = placement.gpu_offload()
        if gpu_backend and _native.numpy_first:
            log.warning("numpy was loaded before llama.cpp's libraries (imported before toolserve); CUDA builds have crashed so: import toolserve first")
        devs_before = placement.devices() if gpu_backend else []
        try:
            self._llm = _Llama(
                repack=repack,  # off where the host check found repacked kernels faulting
                # a KV stream of `n_ctx` cells for each sequence: attention then spans only the
                # cells of its own sequence (in one unified cache it spans every cell up to the
                # highest in use, the other sequences' included, masked but computed)
                overrides={"n_seq_max": parallel, "kv_unified": False, "flash_attn_type": fa},
                model_path=path,
                n_ctx=n_ctx * parallel,
                n_batch=n_batch,
                n_ubatch=n_batch,  # an image's embeddings go in one batch (non-causal encoders need it)
                n_threads=threads,
                n_threads_batch=threads,
                type_k=KV_TYPES[cache_type_k],
                type_v=KV_TYPES[cache_type_v],
                # sliding-window models keep the whole KV, so a prefix can be trimmed and reused
                swa_full=True,
                n_gpu_layers=gpu_layers,
                main_gpu=main_gpu,
                split_mode=placement.SPLIT_MODES[split_mode],
                tensor_split=list(tensor_split) or None,
                offload_kqv=kv_offload,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelLoadError(f"cannot load model {path}: {exc}{placement.shortfall(devs_before, gpu_layers)}") from exc
        model = self._llm._model
        self.vocab = VocabView(model.vocab)
        self._vocab = model.vocab
        self._n_vocab = self.vocab.n_vocab
        self._turns = self.vocab.turns()  # where prompt chunks end (slots.chunk_cuts)
        meta = self._llm.metadata
        self._n_batch = n_batch
        self._mtmd: object | None = None
        self._mtmd_lock = threading.Lock()  # libmtmd's context is used by tokenize_image and the worker
        if mmproj is not None:
            self._mtmd = self._load_mmproj(mmproj, threads)
        try:
            self._load_adapters(adapters or [()])
        except ModelLoadError:
            if self._mtmd is not None:
                from llama_cpp import mtmd_cpp

                mtmd_cpp.mtmd_free(self._mtmd)
            self._llm.close()  # frees the adapters loaded so far with the model
            raise
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
            vision=self._mtmd is not None,
            repack=bool(self._llm.model_params.use_extra_bufts),
            placement=where,
            fim=self.vocab.fim_tokens(),
        )
        self.stats = EngineStats()
        self.cache = PromptCache(cache_ram_mb * 1024 * 1024) if cache_ram_mb > 0 else None
        self._ctx = self._llm._ctx.ctx
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        on_cores = where.gpu_layers < where.n_layers  # all on a GPU: no share of the cores
        self._cores = Shares(core_shares if on_cores else None, threads, apply=lambda n: llama_cpp.llama_set_n_threads(self._ctx, n, n))
        self._seqs = [SeqState(i) for i in range(parallel)]
        self._batch = _Batch(n_batch, parallel)
        self._running: list[_Job] = []  # in the order they were admitted
        self._waiting: list[_Job] = []
        self._started = 0  # admissions so far (orders the sequences' last use)
        # llama.cpp queues a copy between sequences (between KV streams it copies the whole
        # stream) until the next decode; a snapshot must not be taken or restored before that
        self._copies_pending = False
        self._applied = 0  # the adapter set on the context now
        self._turn = 0  # steps the applied set has had in a row while another set waited
        if self._sets[0]:
            self._apply(0)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
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

    # -- LoRA adapters ---------------------------------------------------------------------------
    def _load_adapters(self, sets: Sequence[Sequence[Lora]]) -> None:
        """Load each adapter file once; `self.adapter_index[i]` is the set that request set `i`
        runs as (adapters at scale 0 left out, equal sets merged, so their KV is shared)."""
        loaded: dict[str, Any] = {}
        self._sets: list[tuple[tuple[Any, float], ...]] = []
        self._set_args: list[tuple[Any, Any, int]] = []
        self.adapter_index: list[int] = []
        keys: list[tuple[tuple[str, float], ...]] = []
        for wanted in sets:
            key = tuple(sorted((a.path, a.scale) for a in wanted if a.scale != 0.0))
            for path, _ in key:
                if path not in loaded:
                    loaded[path] = self._load_adapter(path)
            if key not in keys:
                keys.append(key)
                members = tuple((loaded[p], scale) for p, scale in key)
                self._sets.append(members)
                ptrs = (llama_cpp.llama_adapter_lora_p_ctypes * max(1, len(members)))(*(m[0] for m in members))
                scales = (ctypes.c_float * max(1, len(members)))(*(m[1] for m in members))
                self._set_args.append((ptrs, scales, len(members)))
            self.adapter_index.append(keys.index(key))
        self._adapters = list(loaded.values())

    def _load_adapter(self, path: str) -> Any:
        messages: list[str] = []

        @llama_cpp.llama_log_callback
        def collect(level: int, text: bytes, user_data: object) -> None:
            if level == _LOG_ERROR:
                messages.append(text.decode("utf-8", "replace").strip())

        llama_cpp.llama_log_set(collect, None)
        try:
            adapter = llama_cpp.llama_adapter_lora_init(self._llm._model.model, path.encode())
        finally:
            from llama_cpp import _logger

            llama_cpp.llama_log_set(_logger.llama_log_callback, None)
        if not adapter:
            reason = messages[-1].split("failed to apply lora adapter: ")[-1] if messages else "llama.cpp could not load it"
            raise ModelLoadError(f"cannot apply the LoRA adapter {path} to this model: {reason}")
        return adapter

    def _apply(self, index: int) -> None:
        ptrs, scales, n = self._set_args[index]
        if llama_cpp.llama_set_adapters_lora(self._ctx, ptrs, n, scales) != 0:
            raise EngineFailure(f"llama.cpp refused adapter set {index}")
        self._applied = index

    # -- images (libmtmd) -------------------------------------------------------------------------
    def _load_mmproj(self, path: str, threads: int) -> object:
        from llama_cpp import mtmd_cpp

        mtmd_cpp.mtmd_log_set(_quiet, None)
        mtmd_cpp.mtmd_helper_log_set(_quiet, None)
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = True  # the same device as the model, where llama.cpp was built with one
        params.n_threads = threads
        params.print_timings = False
        params.warmup = False
        ctx = mtmd_cpp.mtmd_init_from_file(path.encode(), self._llm._model.model, params)
        if not ctx:
            self._llm.close()
            raise ModelLoadError(f"cannot load the multimodal projector {path} for this model")
        if not mtmd_cpp.mtmd_support_vision(ctx):
            mtmd_cpp.mtmd_free(ctx)
            self._llm.close()
            raise ModelLoadError(f"{path} is not a vision projector")
        return ctx

    def tokenize_image(self, image: ImageData) -> list[int | MediaSpan]:
        from llama_cpp import mtmd_cpp

        if self._mtmd is None:
            raise InvalidRequest("This model accepts text only.")
        marker = mtmd_cpp.mtmd_default_marker()
        data = (ctypes.c_ubyte * len(image.rgb)).from_buffer_copy(image.rgb)
        out: list[int | MediaSpan] = []
        with self._mtmd_lock:
            bitmap = mtmd_cpp.mtmd_bitmap_init(image.width, image.height, data)
            chunks = mtmd_cpp.mtmd_input_chunks_init()
            try:
                mtmd_cpp.mtmd_bitmap_set_id(bitmap, image.digest.encode())
                text = mtmd_cpp.mtmd_input_text(marker, len(marker), False, True)
                bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
                rc = mtmd_cpp.mtmd_tokenize(self._mtmd, chunks, ctypes.byref(text), bitmaps, 1)
                if rc != 0:
                    raise InvalidRequest(f"The image ({image.width}x{image.height}) cannot be prepared for this model (libmtmd error {rc}).")
                for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
                    chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
                    if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                        n = ctypes.c_size_t()
                        ids = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                        out.extend(ids[k] for k in range(n.value))
                        continue
                    n_tokens = mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
                    if n_tokens > self._n_batch and mtmd_cpp.mtmd_decode_use_non_causal(self._mtmd, chunk):
                        raise InvalidRequest(
                            f"The image becomes {n_tokens} tokens, more than this model can take at once ({self._n_batch}); send a smaller image."
                        )
                    handle = _Chunk(mtmd_cpp.mtmd_input_chunk_copy(chunk))
                    n_pos = mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk)
                    out.append(MediaSpan(0, n_tokens, n_pos, media_key(image.digest), handle))
            finally:
                mtmd_cpp.mtmd_input_chunks_free(chunks)
                mtmd_cpp.mtmd_bitmap_free(bitmap)
        return out

    def grammar_tokenizer(self) -> object:
        """llguidance's view of this vocabulary (for constrain/), with every end-of-generation token."""
        return self.vocab.grammar_tokenizer()

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
        self._jobs.put(_Job(gen, list(prompt), params, list(media), self.adapter_index[adapter]))

    def close(self) -> None:
        self._jobs.put(None)
        self._worker.join(timeout=30)
        if self.cache is not None:
            self.cache.clear()  # snapshots never outlive the model they came from
        if self._mtmd is not None:
            from llama_cpp import mtmd_cpp

            mtmd_cpp.mtmd_free(self._mtmd)
            self._mtmd = None
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        for adapter in self._adapters:
            llama_cpp.llama_adapter_lora_free(adapter)
        self._adapters = []
        self._llm.close()
        self._cores.close()

    def _run(self) -> None:
        closing = False
        while not closing:
            if not self._running and not self._waiting:
                self._cores.busy(False)
                job = self._jobs.get()  # nothing to do: sleep until a request comes
                if job is None:
                    break
                self._waiting.append(job)
                self._cores.busy(True)
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    closing = True
                    break
                self._waiting.append(job)
            if closing:
                break
            try:
                self._admit()
                if self._running:
                    self._step()
            except Exception as exc:  # a failed decode must not kill the worker
                log_failure(log, "generation failed", exc)
                self._fail_all(EngineFailure(f"generation failed: {type(exc).__name__}"))
            if self.on_step is not None:
                self.on_step()
        for job in [*self._running, *self._waiting]:
            self._end(job, "stop")
        if self.on_step is not None:
            self.on_step()

    def _fail_all(self, error: BaseException) -> None:
        """End every running request with `error` and start the context afresh."""
        for job in list(self._running):
            self._end(job, error=error)
        llama_cpp.llama_memory_clear(self._mem, True)
        self._copies_pending = True  # a decode that failed may have left them queued
        for seq in self._seqs:
            seq.tokens, seq.usable, seq.media, seq.cuts, seq.busy = [], 0, [], [], False

    # -- admission: where a prompt starts ---------------------------------------------------------
    def _admit(self) -> None:
        while self._waiting and len(self._running) < self.slots:
            job = self._waiting.pop(0)
            if job.gen.cancelled:  # its client left while it waited: it never reaches the context
                self._end(job, "stop")
                continue
            try:
                self._start(job)
            except Exception as exc:
                log_failure(log, "starting a generation failed", exc)
                self._end(job, error=EngineFailure(f"generation failed: {type(exc).__name__}"))

    def _start(self, job: _Job) -> None:
        params = job.params  # first what may fail (a grammar that does not compile): no sequence is taken yet
        job.sampler = self._sampler(params, job.prompt)
        job.constraint = params.constraint() if params.constraint is not None else None
        job.max_tokens = min(params.max_tokens, self.info.n_ctx - len(job.prompt))
        job.cuts = chunk_cuts(job.prompt, self._turns, job.media)
        p = plan(self._seqs, job.prompt, job.cuts, self.cache, job.adapter)
        seq = self._seqs[p.target]
        if (p.save or p.snapshot is not None) and self._copies_pending:
            self._flush()
        if p.save:
            self._save(seq, keep=p.snapshot)  # the snapshot chosen for this prompt must outlive the save
        reuse = p.reuse
        if p.snapshot is not None:
            self._clear(seq)
            if llama_cpp.llama_state_seq_set_data(self._ctx, p.snapshot.snapshot, p.snapshot.nbytes, seq.id):
                seq.tokens, seq.usable, seq.media = list(p.snapshot.tokens), p.snapshot.usable, list(p.snapshot.media)
                assert self.cache is not None
                self.cache.touch(p.snapshot)
                self.cache.stats.restores += 1
            else:
                log.warning("restoring a prompt-cache snapshot of %d tokens failed (llama.cpp's log says why); the prompt is read again", p.snapshot.usable)
                reuse = 0
        elif p.source is not None:
            self._clear(seq)
            self._copy(self._seqs[p.source], seq, position(reuse, job.media))
            seq.tokens, seq.usable, seq.media = job.prompt[:reuse], reuse, snapshot_media(job.media, reuse)
        self._trim(seq, reuse)
        seq.cuts = job.cuts  # it cut its first `reuse` tokens as the prompt does (slots.reach), and reads on so
        seq.adapter = job.adapter
        self._started += 1
        seq.busy, seq.used = True, self._started
        job.seq, job.at, job.n_past = seq, reuse, position(reuse, job.media)
        job.gen.cached_tokens = reuse
        self.stats.requests += 1
        self.stats.prompt_tokens += len(job.prompt)
        self.stats.cached_tokens += reuse
        if self.cache is not None:
            if reuse:
                self.cache.stats.hits += 1
            else:
                self.cache.stats.misses += 1
            # a prefix that another request is reading now is copied, not read twice
            for other in self._running:
                if other.reading and other.leader is None and other.adapter == job.adapter:
                    until = lead(job.prompt, job.cuts, other.prompt, other.cuts, reuse)
                    if until > job.lead_until:
                        job.leader, job.lead_until = other, until
        self._running.append(job)
        self.stats.active = len(self._running)

    def _clear(self, seq: SeqState) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, seq.id, -1, -1)
        seq.tokens, seq.usable, seq.media, seq.cuts = [], 0, [], []

    def _trim(self, seq: SeqState, keep: int) -> None:
        """Keep the first `keep` tokens of a sequence (its whole prompt chunks), drop the rest."""
        if keep <= 0:
            self._clear(seq)
            return
        if len(seq.tokens) > keep:
            llama_cpp.llama_memory_seq_rm(self._mem, seq.id, position(keep, seq.media), -1)
            del seq.tokens[keep:]
            seq.media = snapshot_media(seq.media, keep)
        seq.usable = min(seq.usable, keep)

    def _copy(self, src: SeqState, dst: SeqState, end: int) -> None:
        """Make `dst` hold `src`'s positions before `end`. Between KV streams llama.cpp copies
        whole streams (and queues the copy until the next decode), so the rest is cut after."""
        llama_cpp.llama_memory_seq_cp(self._mem, src.id, dst.id, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._mem, dst.id, end, -1)
        self._copies_pending = True

    def _flush(self) -> None:
        """Carry out the queued copies now (only a decode does): decode one throwaway token after
        the last position of the emptiest sequence, then drop it."""
        ends = [llama_cpp.llama_memory_seq_pos_max(self._mem, s.id) + 1 for s in self._seqs]
        seq = min(range(len(ends)), key=ends.__getitem__)
        batch = self._batch
        batch.n = 0
        batch.add((0,), ends[seq], seq, False)
        try:
            self._decode()
        finally:
            llama_cpp.llama_memory_seq_rm(self._mem, seq, ends[seq], -1)

    def _save(self, seq: SeqState, keep: CacheEntry | None = None) -> None:
        """Snapshot a sequence's reusable prefix before its KV is overwritten (never evicting `keep`)."""
        assert self.cache is not None
        self._trim(seq, seq.usable)
        size = llama_cpp.llama_state_seq_get_size(self._ctx, seq.id)
        if size > self.cache.budget:
            return
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, seq.id)
        if written:
            self.cache.put(seq.tokens, seq.usable, buf, written, seq.media, seq.adapter, seq.cuts, keep=keep)

    def _follow(self, job: _Job, final: bool = False) -> None:
        """Once the job's leader has read their shared prefix (or stops reading, or ends:
        `final`), copy it."""
        leader = job.leader
        assert leader is not None
        upto = min(leader.seq.usable, job.lead_until)
        if upto < job.lead_until and leader.reading and not final:
            return  # one copy at the end: each copy moves a whole KV stream
        if upto > job.at:
            end = position(upto, job.media)
            self._copy(leader.seq, job.seq, end)
            job.seq.tokens[:] = job.prompt[:upto]
            job.seq.media = snapshot_media(job.media, upto)
            job.seq.usable = upto
            job.gen.cached_tokens += upto - job.at
            self.stats.cached_tokens += upto - job.at
            job.at, job.n_past = upto, end
        if job.at >= job.lead_until or not leader.reading:
            job.leader = None

    def _end(self, job: _Job, finish: str | None = None, error: BaseException | None = None) -> None:
        """A request is over: its sequence keeps its prompt's whole chunks for the next turn
        (nothing with the cache off), and its followers take what their leader read."""
        if job in self._running:
            for other in self._running:
                if other.leader is job:
                    self._follow(other, final=True)
                    other.leader = None
            self._running.remove(job)
            seq = job.seq
            self._trim(seq, seq.usable if self.cache is not None else 0)
            seq.busy = False
        if job.sampler is not None:
            job.sampler.close()
        self.stats.active = len(self._running)
        self.stats.finished += 1
        job.gen.close(finish, error)

    # -- one step: a batch of decode tokens and prompt chunks --------------------------------------
    def _step(self) -> None:
        batch = self._batch
        batch.n = 0
        for job in list(self._running):
            if job.gen.cancelled:
                self._end(job, "stop")
        if not self._running:
            return
        chosen, self._turn = adapter_turn(sorted({j.adapter for j in self._running}), self._applied, self._turn, ADAPTER_TURN)
        if chosen != self._applied:
            self._apply(chosen)
        turn = [j for j in self._running if j.adapter == chosen]
        decoding = [j for j in turn if not j.reading]
        size = len(decoding)
        reading: list[_Job] = []
        images: list[_Job] = []
        for job in turn:
            if not job.reading:
                continue
            if job.leader is not None:
                self._follow(job)
                if job.leader is not None:
                    continue  # its leader reads the next chunk of their shared prefix
            if job.at in job.images:
                images.append(job)
                continue
            stop = next_stop(job.at, len(job.prompt), job.cuts)
            if size + stop - job.at > batch.capacity:
                continue  # the batch is full: next step
            size += stop - job.at
            job.stop = stop
            reading.append(job)
        # in the order of their sequences: llama.cpp splits a batch over KV streams into
        # micro-batches of consecutive sequence ids
        for job in sorted((*decoding, *reading), key=lambda j: j.seq.id):
            if job.reading:
                job.row = batch.add(job.prompt[job.at : job.stop], job.n_past, job.seq.id, job.stop == len(job.prompt))
            else:
                job.row = batch.add((job.token,), job.n_past, job.seq.id, True)
        if batch.n:
            self._decode()
        for job in decoding:
            job.seq.tokens.append(job.token)
            job.n_past += 1
            self._sample(job, job.row)
        for job in reading:
            k = job.stop - job.at
            job.seq.tokens.extend(job.prompt[job.at : job.stop])
            job.at, job.n_past = job.stop, job.n_past + k
            job.seq.usable = boundary(job.at, job.cuts)
            if not job.reading:
                self._sample(job, job.row)
        for job in images:
            self._eval_image(job)

    def _decode(self) -> None:
        batch = self._batch
        batch.struct.n_tokens = batch.n
        with self._cores.computing():
            rc = llama_cpp.llama_decode(self._ctx, batch.struct)
        self.stats.shared_decodes = self._cores.shared
        self._copies_pending = False  # done before the batch, whatever became of the batch
        if rc != 0:
            raise EngineFailure(f"llama_decode returned {rc}")

    def _eval_image(self, job: _Job) -> None:
        """Encode an image with the projector and decode its embeddings into the job's sequence
        (in its own decode calls: libmtmd evaluates an image whole)."""
        from llama_cpp import mtmd_cpp

        image = job.images[job.at]
        last = image.end == len(job.prompt)
        new_n_past = llama_cpp.llama_pos(0)
        with self._cores.alone(), self._mtmd_lock:  # its encoder keeps the threads it was loaded with
            rc = mtmd_cpp.mtmd_helper_eval_chunk_single(
                self._mtmd, self._ctx, image.handle.ptr, job.n_past, job.seq.id, self._n_batch, last, ctypes.byref(new_n_past),
            )
        if rc != 0:
            self._end(job, error=EngineFailure(f"encoding an image failed (libmtmd error {rc})"))
            return
        self._copies_pending = False  # its decodes carried them out
        job.seq.tokens.extend(job.prompt[image.start : image.end])
        job.seq.media.append(dataclasses.replace(image, handle=None))
        job.at, job.n_past = image.end, new_n_past.value
        job.seq.usable = boundary(job.at, job.cuts)
        if last:
            self._sample(job, -1)  # its logits are the last decode's

    def _sample(self, job: _Job, row: int) -> None:
        """Pick the job's next token from its row of the logits and hand it over."""
        try:
            token, lp = self._pick(job, row)
        except Exception as exc:
            log_failure(log, "sampling failed", exc)
            self._end(job, error=EngineFailure(f"sampling failed: {type(exc).__name__}"))
            return
        if token is None:
            self._end(job, "length")  # a dead end: nothing may follow, and the grammar is not complete
            return
        job.produced += 1
        self.stats.generated_tokens += 1
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            job.gen.push(TokenEvent(token, self.token_piece(token), is_eog=True, logprob=lp))
            self._end(job, "stop")
            return
        job.gen.push(TokenEvent(token, self.token_piece(token), logprob=lp))
        if job.constraint is not None:
            job.constraint.accept(token)
            if job.constraint.done():
                self._end(job, "stop")
                return
        if job.produced >= job.max_tokens:
            self._end(job, "length")
            return
        job.token = token

    def _pick(self, job: _Job, row: int) -> tuple[int | None, TokenLogprob | None]:
        if job.constraint is not None and not self._apply_mask(job.constraint, row):
            return None, None
        assert job.sampler is not None
        token = llama_cpp.llama_sampler_sample(job.sampler.sampler, self._ctx, row)
        lp = self._logprob(row, token, job.params.logprobs) if job.params.logprobs is not None else None
        return token, lp

    def _sampler(self, params: SamplingParams, prompt: list[int]) -> _internals.LlamaSampler:
        s = _internals.LlamaSampler()
        if params.logit_bias:
            s.add_logit_bias(self._n_vocab, params.logit_bias)
        penalised = (
            params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
        )
        if penalised:
            s.add_penalties(
                self._n_vocab,
                PENALTY_LAST_N,
                params.repetition_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            )
        if params.temperature <= 0.0:
            s.add_greedy()
        else:
            if params.top_k > 0:
                s.add_top_k(params.top_k)
            if params.top_p < 1.0:
                s.add_top_p(params.top_p, 1)
            if params.min_p > 0.0:
                s.add_min_p(params.min_p, 1)
            s.add_temp(params.temperature)
            s.add_dist(params.seed if params.seed is not None else random.getrandbits(32))
        if penalised:
            for tok in prompt[-PENALTY_LAST_N:]:  # penalties see the recent prompt, as in llama.cpp
                if tok >= 0:  # not an image's stand-in
                    s.accept(tok)
        return s

    def _logits(self, row: int) -> np.ndarray:
        raw = llama_cpp.llama_get_logits_ith(self._ctx, row)
        return np.ctypeslib.as_array(raw, shape=(self._n_vocab,))

    def _logprob(self, row: int, token: int, top_n: int) -> TokenLogprob:
        logits = self._logits(row)
        peak = float(logits.max())
        lse = peak + float(np.log(np.exp(logits - peak).sum()))
        top: tuple[tuple[int, float], ...] = ()
        if top_n > 0:
            idx = np.argpartition(-logits, top_n)[:top_n]
            idx = idx[np.argsort(-logits[idx])]
            top = tuple((int(i), float(logits[i]) - lse) for i in idx)
        return TokenLogprob(token, float(logits[token]) - lse, top)

    def _apply_mask(self, constraint: TokenConstraint, row: int) -> bool:
        """Forbid the tokens the constraint does not allow, in place in llama.cpp's logits."""
        forbidden = constraint.forbidden()
        if forbidden is None:
            return True
        self._logits(row)[forbidden] = -np.inf
        return not bool(forbidden.all())
