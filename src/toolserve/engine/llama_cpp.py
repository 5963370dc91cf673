"""The embedded llama.cpp backend: one worker thread owns the context, fed by a queue."""

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

import llama_cpp
import numpy as np
from llama_cpp import _internals

from toolserve.engine.base import EngineStats, Generation, MediaSpan, ModelInfo, media_key
from toolserve.engine.prompt_cache import CacheEntry, PromptCache, common_prefix
from toolserve.errors import EngineFailure, InvalidRequest, ModelLoadError
from toolserve.types import ImageData, SamplingParams, TokenConstraint, TokenEvent, TokenLogprob

log = logging.getLogger(__name__)

PENALTY_LAST_N = 64  # llama.cpp's default window for repetition/presence/frequency penalties


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
SAVE_MIN_DISCARD = 32  # keep the live context as a snapshot only when this many tokens would be lost
# Prompts are evaluated in chunks aligned to multiples of this, and only whole chunks are
# reused: llama.cpp's numbers depend on the batch shape, so reusing any other prefix would
# make a cache hit answer differently from a miss.
PREFILL_CHUNK = 64


def aligned(n: int) -> int:
    return n - n % PREFILL_CHUNK


def boundary(limit: int, media: Sequence[MediaSpan]) -> int:
    """The longest prefix of at most `limit` prompt tokens that a fresh evaluation computes in
    the same batches: it ends at a multiple of PREFILL_CHUNK outside any image, or at an image's
    start or end (images are evaluated whole)."""
    best = aligned(limit)
    for m in media:
        if m.start < best < m.end:
            best = m.start
    for m in media:
        if m.end <= limit:
            best = max(best, m.end)
        elif m.start <= limit:
            best = max(best, m.start)
    return best


def position(index: int, media: Sequence[MediaSpan]) -> int:
    """Context position of prompt index `index` (not inside an image): images under M-RoPE take
    fewer positions than tokens."""
    return index - sum(m.n_tokens - m.n_pos for m in media if m.end <= index)


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
    """`Llama` with llama.cpp's `use_extra_bufts` (weight repacking, `--no-repack` when off)
    settable: `Llama.__init__` builds its model parameters itself and has no argument for it,
    so the field is set when it assigns them, before the model is loaded."""

    def __init__(self, *, repack: bool, **kwargs: object):
        self._repack = repack
        super().__init__(**kwargs)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def model_params(self) -> llama_cpp.llama_model_params:
        return self.__dict__["model_params"]  # type: ignore[no-any-return]

    @model_params.setter
    def model_params(self, params: llama_cpp.llama_model_params) -> None:
        params.use_extra_bufts = self._repack
        self.__dict__["model_params"] = params


class LlamaCppEngine:
    """Runs a GGUF model with llama-cpp-python on a single worker thread."""

    prefill_chunk = PREFILL_CHUNK
    slots = 1

    def __init__(
        self,
        path: str,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        cache_ram_mb: int = 0,
        cache_type_k: str = "f16",
        cache_type_v: str = "f16",
        mmproj: str | None = None,
        repack: bool = True,
    ):
        threads = n_threads or os.cpu_count() or 1
        try:
            self._llm = _Llama(
                repack=repack,  # off where the host check found repacked kernels faulting
                model_path=path,
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_ubatch=n_batch,  # an image's embeddings go in one batch (non-causal encoders need it)
                n_threads=threads,
                n_threads_batch=threads,
                type_k=KV_TYPES[cache_type_k],
                type_v=KV_TYPES[cache_type_v],
                # llama.cpp needs flash attention for a quantised V cache
                flash_attn=cache_type_v not in ("f16", "f32"),
                # sliding-window models keep the whole KV, so a prefix can be trimmed and reused
                swa_full=True,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelLoadError(f"cannot load model {path}: {exc}") from exc
        model = self._llm._model
        self._vocab = model.vocab
        self._n_vocab = model.n_vocab()
        self._pieces: dict[int, bytes] = {}  # token id -> text bytes, special tokens included
        meta = self._llm.metadata
        self._n_batch = n_batch
        self._mtmd: object | None = None
        self._mtmd_lock = threading.Lock()  # libmtmd's context is used by tokenize_image and the worker
        if mmproj is not None:
            self._mtmd = self._load_mmproj(mmproj, threads)
        bos, eos = model.token_bos(), model.token_eos()
        self.info = ModelInfo(
            path=path,
            architecture=meta.get("general.architecture", ""),
            # llama.cpp rounds the context up (128 becomes 256), but llama-cpp-python's token
            # buffer keeps the size asked for: that is the real limit
            n_ctx=min(self._llm.n_ctx(), len(self._llm.input_ids)),
            n_ctx_train=model.n_ctx_train(),
            n_vocab=self._n_vocab,
            size_bytes=os.path.getsize(path),
            bos_token=self.token_piece(bos).decode("utf-8", "replace") if bos >= 0 else "",
            eos_token=self.token_piece(eos).decode("utf-8", "replace") if eos >= 0 else "",
            add_bos=model.add_bos_token(),
            chat_template=meta.get("tokenizer.chat_template"),
            vision=self._mtmd is not None,
            repack=bool(self._llm.model_params.use_extra_bufts),
        )
        self.stats = EngineStats()
        self.cache = PromptCache(cache_ram_mb * 1024 * 1024) if cache_ram_mb > 0 else None
        self._live_usable = 0  # how many live-context tokens are whole prompt chunks (reusable)
        self._live_media: list[MediaSpan] = []  # images in the live context
        self._n_past = 0  # context positions in use (tokens, unless M-RoPE images took fewer)
        self._jobs: queue.Queue[tuple[Generation, list[int], SamplingParams, list[MediaSpan]] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="toolserve-engine", daemon=True)
        self._worker.start()

    # -- vocabulary (read-only, safe from any thread) ----------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def token_piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(256)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            piece = self._pieces[token] = buf.raw[: max(n, 0)]
        return piece

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.token_piece(t) for t in tokens)

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
        from llguidance.llamacpp import lltokenizer_from_vocab

        eog = [t for t in range(self._n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]
        try:
            return lltokenizer_from_vocab(self._vocab, eos_token=eog or None)
        except (ValueError, RuntimeError) as exc:
            raise EngineFailure(f"cannot read this model's vocabulary for constrained decoding: {exc}") from exc

    # -- generation ---------------------------------------------------------------------------
    def submit(self, prompt: Sequence[int], params: SamplingParams, media: Sequence[MediaSpan] = ()) -> Generation:
        gen = Generation(asyncio.get_running_loop(), len(prompt))
        self.stats.submitted += 1
        self._jobs.put((gen, list(prompt), params, list(media)))
        return gen

    def close(self) -> None:
        self._jobs.put(None)
        self._worker.join(timeout=30)
        if self.cache is not None:
            self.cache.clear()  # snapshots never outlive the model they came from
        if self._mtmd is not None:
            from llama_cpp import mtmd_cpp

            mtmd_cpp.mtmd_free(self._mtmd)
            self._mtmd = None
        self._llm.close()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            gen, prompt, params, media = job
            if gen.cancelled:  # its client left while it waited: it never reaches the engine
                self.stats.finished += 1
                gen.close("stop")
                continue
            self.stats.active = 1
            self.stats.requests += 1
            try:
                gen.close(self._generate(gen, prompt, params, media))
            except Exception as exc:  # a failed decode must not kill the worker
                log.exception("generation failed")
                self._reset()
                gen.close(error=EngineFailure(f"generation failed: {exc}"))
            finally:
                self.stats.active = 0
                self.stats.finished += 1

    def _reset(self) -> None:
        self._llm.reset()
        self._llm._ctx.kv_cache_clear()
        self._live_media = []
        self._live_usable = 0
        self._n_past = 0

    def _prefill(self, gen: Generation, prompt: list[int], media: list[MediaSpan]) -> bool:
        """Evaluate the prompt, reusing the longest usable prefix of the live context or a snapshot."""
        llm = self._llm
        live = llm._input_ids[: llm.n_tokens].tolist()
        reuse = 0
        if self.cache is not None:  # with the cache off (--cache-ram 0) every prompt is evaluated in full
            reuse = min(common_prefix(live, prompt), self._live_usable)
            entry, entry_len = self.cache.best(prompt)
            if entry is not None and boundary(min(entry_len, len(prompt) - 1), media) > boundary(min(reuse, len(prompt) - 1), media):
                self._save_live(live, reuse)
                self._restore(entry)
                reuse = entry_len
            else:
                self._save_live(live, reuse)
        # the last prompt token is always evaluated again, for its logits
        reuse = boundary(min(reuse, len(prompt) - 1), media)
        if reuse > 0 and llm._ctx.kv_cache_seq_rm(-1, position(reuse, media), -1):
            llm.n_tokens = reuse
        else:
            reuse = 0
            self._reset()
        self._live_media = [dataclasses.replace(m, handle=None) for m in media if m.end <= reuse]
        self._n_past = position(reuse, media)
        gen.cached_tokens = reuse
        self._live_usable = reuse
        self.stats.prompt_tokens += len(prompt)
        self.stats.cached_tokens += reuse
        if self.cache is not None:
            if reuse:
                self.cache.stats.hits += 1
            else:
                self.cache.stats.misses += 1
        at = reuse
        images = {m.start: m for m in media}
        while at < len(prompt):
            if gen.cancelled:
                return False
            image = images.get(at)
            if image is not None:
                self._eval_image(image, prompt)
                at = image.end
                continue
            stop = min([aligned(at) + PREFILL_CHUNK, len(prompt), *(m.start for m in media if m.start > at)])
            self._eval_text(prompt[at:stop])
            at = stop
        self._live_usable = boundary(len(prompt), media)
        return True

    def _eval_text(self, tokens: Sequence[int]) -> None:
        """Decode text tokens at the next context positions; logits for the last one."""
        llm = self._llm
        for i in range(0, len(tokens), self._n_batch):
            batch = tokens[i : i + self._n_batch]
            llm._batch.set_batch(batch=batch, n_past=self._n_past, logits_all=False)
            llm._ctx.decode(llm._batch)
            llm.input_ids[llm.n_tokens : llm.n_tokens + len(batch)] = batch
            llm.n_tokens += len(batch)
            self._n_past += len(batch)

    def _eval_image(self, image: MediaSpan, prompt: list[int]) -> None:
        """Encode an image with the projector and decode its embeddings into the context."""
        from llama_cpp import mtmd_cpp

        llm = self._llm
        new_n_past = llama_cpp.llama_pos(0)
        with self._mtmd_lock:
            rc = mtmd_cpp.mtmd_helper_eval_chunk_single(
                self._mtmd, llm._ctx.ctx, image.handle.ptr, self._n_past, 0, self._n_batch,
                image.end == len(prompt), ctypes.byref(new_n_past),
            )
        if rc != 0:
            raise EngineFailure(f"encoding an image failed (libmtmd error {rc})")
        llm.input_ids[llm.n_tokens : llm.n_tokens + image.n_tokens] = image.key
        llm.n_tokens += image.n_tokens
        self._n_past = new_n_past.value
        self._live_media.append(dataclasses.replace(image, handle=None))

    def _save_live(self, live: list[int], keep: int) -> None:
        """Snapshot the live context before it is trimmed to `keep` tokens or replaced."""
        assert self.cache is not None
        usable = self._live_usable
        if usable - keep < SAVE_MIN_DISCARD or self.cache.covers(live, usable):
            return
        ctx = self._llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        if size > self.cache.budget:
            return
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
        if written:
            self.cache.put(live, usable, buf, written, self._live_media)

    def _restore(self, entry: CacheEntry) -> None:
        llm = self._llm
        llm._ctx.kv_cache_clear()
        if not llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, entry.snapshot, entry.nbytes, 0):
            self._reset()
            return
        n = len(entry.tokens)
        llm.input_ids[:n] = entry.tokens
        llm.n_tokens = n
        self._live_usable = entry.usable
        self._live_media = list(entry.media)
        self._n_past = position(n, self._live_media)
        assert self.cache is not None
        self.cache.touch(entry)
        self.cache.stats.restores += 1

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

    def _logprob(self, token: int, top_n: int) -> TokenLogprob:
        raw = llama_cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(raw, shape=(self._n_vocab,))
        peak = float(logits.max())
        lse = peak + float(np.log(np.exp(logits - peak).sum()))
        top: tuple[tuple[int, float], ...] = ()
        if top_n > 0:
            idx = np.argpartition(-logits, top_n)[:top_n]
            idx = idx[np.argsort(-logits[idx])]
            top = tuple((int(i), float(logits[i]) - lse) for i in idx)
        return TokenLogprob(token, float(logits[token]) - lse, top)

    def _generate(self, gen: Generation, prompt: list[int], params: SamplingParams, media: list[MediaSpan]) -> str:
        llm = self._llm
        if not self._prefill(gen, prompt, media):
            return "stop"
        sampler = self._sampler(params, prompt)
        constraint = params.constraint() if params.constraint is not None else None
        room = min(self.info.n_ctx - self._n_past, self.info.n_ctx - llm.n_tokens)
        max_tokens = min(params.max_tokens, room)
        for produced in range(1, max_tokens + 1):
            if gen.cancelled:
                return "stop"
            if constraint is not None and not self._apply_mask(constraint):
                return "length"  # a dead end: nothing may follow, and the grammar is not complete
            token = sampler.sample(llm._ctx, -1)
            self.stats.generated_tokens += 1
            lp = self._logprob(token, params.logprobs) if params.logprobs is not None else None
            if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                gen.push(TokenEvent(token, self.token_piece(token), is_eog=True, logprob=lp))
                return "stop"
            gen.push(TokenEvent(token, self.token_piece(token), logprob=lp))
            if constraint is not None:
                constraint.accept(token)
                if constraint.done():
                    return "stop"
            if produced == max_tokens:
                break
            self._eval_text([token])
        return "length"

    def _apply_mask(self, constraint: TokenConstraint) -> bool:
        """Forbid the tokens the constraint does not allow, in place in llama.cpp's logits."""
        forbidden = constraint.forbidden()
        if forbidden is None:
            return True
        raw = llama_cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(raw, shape=(self._n_vocab,))
        logits[forbidden] = -np.inf
        return not bool(forbidden.all())
