"""The embedded llama.cpp backend: one worker thread owns the context, fed by a queue."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import queue
import random
import threading
from collections.abc import Sequence

import llama_cpp
import numpy as np
from llama_cpp import _internals

from toolserve.engine.base import EngineStats, Generation, ModelInfo
from toolserve.engine.prompt_cache import CacheEntry, PromptCache, common_prefix
from toolserve.errors import EngineFailure, ModelLoadError
from toolserve.types import SamplingParams, TokenConstraint, TokenEvent, TokenLogprob

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
    ):
        threads = n_threads or os.cpu_count() or 1
        try:
            self._llm = llama_cpp.Llama(
                model_path=path,
                n_ctx=n_ctx,
                n_batch=n_batch,
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
        bos, eos = model.token_bos(), model.token_eos()
        self.info = ModelInfo(
            path=path,
            architecture=meta.get("general.architecture", ""),
            n_ctx=self._llm.n_ctx(),
            n_ctx_train=model.n_ctx_train(),
            n_vocab=self._n_vocab,
            size_bytes=os.path.getsize(path),
            bos_token=self.token_piece(bos).decode("utf-8", "replace") if bos >= 0 else "",
            eos_token=self.token_piece(eos).decode("utf-8", "replace") if eos >= 0 else "",
            add_bos=model.add_bos_token(),
            chat_template=meta.get("tokenizer.chat_template"),
        )
        self.stats = EngineStats()
        self.cache = PromptCache(cache_ram_mb * 1024 * 1024) if cache_ram_mb > 0 else None
        self._live_usable = 0  # how many live-context tokens are whole prompt chunks (reusable)
        self._jobs: queue.Queue[tuple[Generation, list[int], SamplingParams] | None] = queue.Queue()
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

    def grammar_tokenizer(self) -> object:
        """llguidance's view of this vocabulary (for constrain/), with every end-of-generation token."""
        from llguidance.llamacpp import lltokenizer_from_vocab

        eog = [t for t in range(self._n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]
        try:
            return lltokenizer_from_vocab(self._vocab, eos_token=eog or None)
        except (ValueError, RuntimeError) as exc:
            raise EngineFailure(f"cannot read this model's vocabulary for constrained decoding: {exc}") from exc

    # -- generation ---------------------------------------------------------------------------
    def submit(self, prompt: Sequence[int], params: SamplingParams) -> Generation:
        gen = Generation(asyncio.get_running_loop(), len(prompt))
        self.stats.submitted += 1
        self._jobs.put((gen, list(prompt), params))
        return gen

    def close(self) -> None:
        self._jobs.put(None)
        self._worker.join(timeout=30)
        if self.cache is not None:
            self.cache.clear()  # snapshots never outlive the model they came from
        self._llm.close()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            gen, prompt, params = job
            if gen.cancelled:  # its client left while it waited: it never reaches the engine
                self.stats.finished += 1
                gen.close("stop")
                continue
            self.stats.active = 1
            self.stats.requests += 1
            try:
                gen.close(self._generate(gen, prompt, params))
            except Exception as exc:  # a failed decode must not kill the worker
                log.exception("generation failed")
                self._llm.reset()
                gen.close(error=EngineFailure(f"generation failed: {exc}"))
            finally:
                self.stats.active = 0
                self.stats.finished += 1

    def _prefill(self, gen: Generation, prompt: list[int]) -> bool:
        """Evaluate the prompt, reusing the longest usable prefix of the live context or a snapshot."""
        llm = self._llm
        live = llm._input_ids[: llm.n_tokens].tolist()
        reuse = 0
        if self.cache is not None:  # with the cache off (--cache-ram 0) every prompt is evaluated in full
            reuse = min(common_prefix(live, prompt), self._live_usable)
            entry, entry_len = self.cache.best(prompt)
            if entry is not None and aligned(min(entry_len, len(prompt) - 1)) > aligned(min(reuse, len(prompt) - 1)):
                self._save_live(live, reuse)
                self._restore(entry)
                reuse = entry_len
            else:
                self._save_live(live, reuse)
        # the last prompt token is always evaluated again, for its logits
        reuse = aligned(min(reuse, len(prompt) - 1))
        if reuse > 0 and llm._ctx.kv_cache_seq_rm(-1, reuse, -1):
            llm.n_tokens = reuse
        else:
            reuse = 0
            llm.reset()
        gen.cached_tokens = reuse
        self._live_usable = reuse
        self.stats.prompt_tokens += len(prompt)
        self.stats.cached_tokens += reuse
        if self.cache is not None:
            if reuse:
                self.cache.stats.hits += 1
            else:
                self.cache.stats.misses += 1
        for start in range(reuse, len(prompt), PREFILL_CHUNK):
            if gen.cancelled:
                return False
            llm.eval(prompt[start : start + PREFILL_CHUNK])
        self._live_usable = aligned(len(prompt))
        return True

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
            self.cache.put(live, usable, buf, written)

    def _restore(self, entry: CacheEntry) -> None:
        llm = self._llm
        llm._ctx.kv_cache_clear()
        if not llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, entry.snapshot, entry.nbytes, 0):
            llm.reset()
            return
        n = len(entry.tokens)
        llm.input_ids[:n] = entry.tokens
        llm.n_tokens = n
        self._live_usable = entry.usable
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

    def _generate(self, gen: Generation, prompt: list[int], params: SamplingParams) -> str:
        llm = self._llm
        if not self._prefill(gen, prompt):
            return "stop"
        sampler = self._sampler(params, prompt)
        constraint = params.constraint() if params.constraint is not None else None
        room = llm.n_ctx() - llm.n_tokens
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
            llm.eval([token])
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
