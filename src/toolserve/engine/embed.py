"""Embeddings with llama.cpp: a context of its own, pooled per sequence, on its own worker thread.

An `Embedder` either loads an embedding model (a BERT-like GGUF: `--embedding-model`) or sits
beside a generation engine on the same loaded weights (`--embeddings`): a second llama context
made with `embeddings = true` from the same `llama_model`, so the generation context, its KV and
its worker are untouched. Several inputs go into one `llama_decode`, one sequence each, packed
up to the batch's tokens and sequences; llama.cpp pools each sequence (`llama_get_embeddings_seq`).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from toolserve.engine import cores
from toolserve.engine.cores import Shares
from toolserve.engine.vocab import VocabView
from toolserve.errors import EngineFailure, ModelLoadError, log_failure

log = logging.getLogger(__name__)

POOLING_NAMES = {
    llama_cpp.LLAMA_POOLING_TYPE_MEAN: "mean",
    llama_cpp.LLAMA_POOLING_TYPE_CLS: "cls",
    llama_cpp.LLAMA_POOLING_TYPE_LAST: "last",
    # a reranker's classifier head: n_cls_out scores per sequence (llama.cpp's rank pooling)
    llama_cpp.LLAMA_POOLING_TYPE_RANK: "rank",
}
MAX_SEQS = 64  # inputs pooled in one decode (llama.cpp's n_seq_max)
CAUSAL_UBATCH = 512  # micro-batch of a causal model pooled by its last token


def _meta(model: object, key: str) -> str | None:
    """A GGUF header value of a loaded model, as text; None where it has none."""
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


@dataclass
class _Job:
    inputs: list[list[int]]
    future: asyncio.Future[np.ndarray]
    loop: asyncio.AbstractEventLoop
    rows: np.ndarray | None = None  # filled as its inputs are computed
    done: int = 0  # its inputs computed so far (in order)

    @property
    def gone(self) -> bool:
        """Its request went away (the client left, its time ran out): compute no more of it."""
        return self.future.done()


def pick(pending: Sequence[Sequence[int]], max_tokens: int, max_seqs: int) -> list[tuple[int, int]]:
    """One decode's inputs, as (request, input) pairs: `pending[j]` holds the token counts of
    request j's inputs not yet computed, in order. Inputs are taken a round at a time, one of
    each request in turn, up to `max_tokens` tokens and `max_seqs` inputs, so that a request of
    one input is not held behind one of 2,048 (an input longer than `max_tokens` must have been
    refused before)."""
    taken: list[tuple[int, int]] = []
    used = 0
    at = [0] * len(pending)
    grew = True
    while grew:
        grew = False
        for j, lengths in enumerate(pending):
            k = at[j]
            if k < len(lengths) and len(taken) < max_seqs and used + lengths[k] <= max_tokens:
                taken.append((j, k))
                used += lengths[k]
                at[j] += 1
                grew = True
    return taken


def l2_normalise(rows: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1 (a zero row stays zero)."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1.0, norms)


class Embedder:
    """Pooled embeddings of token lists, computed on one worker thread."""

    def __init__(
        self, model: object, *, n_ctx: int, n_threads: int, owns_model: bool, path: str, pooling: int | None = None, core_shares: str | None = None,
    ):
        """`model`: a loaded `llama_model` pointer. `pooling`: a LLAMA_POOLING_TYPE_*; None
        takes the model's own (from its GGUF header), or `last` where it has none.
        `core_shares`: the server's directory when its busy engines share the cores."""
        self._model = model
        self._owns_model = owns_model
        self.path = path
        self.vocab = VocabView(llama_cpp.llama_model_get_vocab(model))
        self.n_vocab = self.vocab.n_vocab
        self.dimensions = llama_cpp.llama_model_n_embd(model)
        train = llama_cpp.llama_model_n_ctx_train(model)
        self.n_ctx = min(n_ctx, train) if train > 0 else n_ctx  # longest input, in tokens
        arch = _meta(model, "general.architecture") or ""
        self.architecture = arch
        causal = _meta(model, f"{arch}.attention.causal") != "false"  # BERT-like encoders say false
        if pooling is None:
            header = _meta(model, f"{arch}.pooling_type")
            pooling = int(header) if header and header != str(llama_cpp.LLAMA_POOLING_TYPE_NONE) else None
        if pooling is None and causal:
            # a generation model has no pooling in its header: in a causal model the last token
            # is the one that has read the whole input (as decoder embedding models pool)
            pooling = llama_cpp.LLAMA_POOLING_TYPE_LAST
        if pooling not in POOLING_NAMES:
            self._free_model()
            raise ModelLoadError(f"{path}: pooling type {pooling} gives no embedding per input (mean, cls or last are supported)")
        self.pooling = POOLING_NAMES[pooling]
        if pooling == llama_cpp.LLAMA_POOLING_TYPE_RANK:  # one score per classifier label, not a vector
            self.dimensions = max(1, llama_cpp.llama_model_n_cls_out(model))
        template = llama_cpp.llama_model_chat_template(model, b"rerank")
        self.rerank_template: str | None = template.decode("utf-8", "replace") if template else None
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = self.n_ctx
        # llama.cpp pools a sequence whole only within one micro-batch; the last token of a causal
        # model is right whatever the split (its KV holds the rest), so there micro-batches stay
        # small: an n_ctx-token one costs SmolLM2 786 MB of compute buffer at 4096
        split = causal and pooling in (llama_cpp.LLAMA_POOLING_TYPE_LAST, llama_cpp.LLAMA_POOLING_TYPE_RANK)
        params.n_ubatch = min(self.n_ctx, CAUSAL_UBATCH) if split else self.n_ctx
        params.n_seq_max = MAX_SEQS
        params.n_threads = params.n_threads_batch = n_threads
        params.embeddings = True
        params.pooling_type = pooling
        params.kv_unified = True  # the inputs of a batch share n_ctx cells
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            self._free_model()
            raise ModelLoadError(f"cannot create an embedding context for {path}")
        self._mem = llama_cpp.llama_get_memory(self._ctx)  # NULL for encoder-only models: no KV
        self._batch = llama_cpp.llama_batch_init(self.n_ctx, 0, 1)
        self._cores = Shares(core_shares, n_threads, apply=lambda n: llama_cpp.llama_set_n_threads(self._ctx, n, n))
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self.requests = 0  # requests waiting or being computed (the event loop's count, for admission)
        self.computed = 0  # inputs embedded so far (the worker's count)
        self._worker = threading.Thread(target=self._run, name="toolserve-embed", daemon=True)
        self._worker.start()

    @classmethod
    def load(
        cls, path: str, *, n_ctx: int, n_threads: int | None = None, repack: bool = True, core_shares: str | None = None,
        pooling: int | None = None,
    ) -> Embedder:
        """An embedding model of its own (a GGUF with pooling in its header, e.g. BERT), or with
        `pooling` LLAMA_POOLING_TYPE_RANK a reranker. `repack`: as for the generation model
        (engine/repack.py: off where it faults)."""
        from llama_cpp import _logger

        _logger.set_verbose(False)  # llama.cpp's load chatter stays out of the server's log, as for the generation model
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.use_extra_bufts = repack
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise ModelLoadError(f"cannot load embedding model {path}")
        return cls(model, n_ctx=n_ctx, n_threads=cores.threads(n_threads), owns_model=True, path=path, core_shares=core_shares, pooling=pooling)

    # -- vocabulary -------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """The input's tokens with the model's own special tokens around it (BERT: [CLS] .. [SEP])."""
        return self.vocab.tokenize(text, add_bos=True, special=False)

    def special_tokens(self) -> dict[str, int | None]:
        """The BOS, EOS and SEP tokens the model's inputs are framed with (None: it adds none)."""
        v, null = self.vocab.vocab, llama_cpp.LLAMA_TOKEN_NULL
        eos = llama_cpp.llama_vocab_eos(v)
        eos = llama_cpp.llama_vocab_sep(v) if eos == null else eos  # as llama-server, SEP where there is no EOS
        found = {
            "bos": llama_cpp.llama_vocab_bos(v) if llama_cpp.llama_vocab_get_add_bos(v) else null,
            "eos": eos if llama_cpp.llama_vocab_get_add_eos(v) else null,
            "sep": llama_cpp.llama_vocab_sep(v) if llama_cpp.llama_vocab_get_add_sep(v) else null,
        }
        return {k: None if t == null else int(t) for k, t in found.items()}

    # -- requests ---------------------------------------------------------------------------------
    async def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One pooled, unnormalised vector per input (rows of a float32 array). Cancelling the
        call (its client left) stops its work at the next decode."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()
        self.requests += 1
        try:
            self._jobs.put(_Job([list(t) for t in inputs], fut, loop))
            return await fut
        finally:
            self.requests -= 1

    def close(self) -> None:
        if self._worker.is_alive():
            self._jobs.put(None)
            self._worker.join(timeout=30)
        if self._ctx:
            if hasattr(self, "_batch"):
                llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
            self._cores.close()
        self._free_model()

    def _free_model(self) -> None:
        if self._owns_model and self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    # -- the worker ---------------------------------------------------------------------------------
    def _run(self) -> None:
        """Each step computes one decode's worth of the waiting requests' inputs (`pick`), so
        requests that come later share the next decodes and one that went away stops."""
        active: list[_Job] = []
        closing = False
        while not closing or active:
            if not active:
                self._cores.busy(False)
                job = self._jobs.get()  # nothing to do: sleep until a request comes
                if job is None:
                    return
                active.append(job)
                self._cores.busy(True)
            while not closing:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    closing = True
                else:
                    active.append(more)
            active = [j for j in active if not j.gone]
            if active:
                active = self._step(active)
        self._cores.busy(False)

    def _step(self, active: list[_Job]) -> list[_Job]:
        """One decode over `active`'s next inputs; the requests still unfinished."""
        picks = pick([[len(t) for t in j.inputs[j.done :]] for j in active], self.n_ctx, MAX_SEQS)
        try:
            rows = self._compute([active[j].inputs[active[j].done + k] for j, k in picks])
        except Exception as exc:
            log_failure(log, "embedding failed", exc)
            for j in {j for j, _ in picks}:
                job = active[j]
                job.loop.call_soon_threadsafe(_settle, job.future, None, EngineFailure(f"embedding failed: {type(exc).__name__}"))
            failed = {id(active[j]) for j, _ in picks}
            return [job for job in active if id(job) not in failed]
        for (j, _), row in zip(picks, rows, strict=True):
            job = active[j]
            if job.rows is None:
                job.rows = np.empty((len(job.inputs), self.dimensions), dtype=np.float32)
            job.rows[job.done] = row  # a request's inputs are picked in order
            job.done += 1
        self.computed += len(picks)
        left = []
        for job in active:
            if job.done == len(job.inputs):
                job.loop.call_soon_threadsafe(_settle, job.future, job.rows, None)
            else:
                left.append(job)
        return left

    def _compute(self, inputs: list[list[int]]) -> np.ndarray:
        """The pooled vectors of inputs that fit one decode (`pick` chose them)."""
        out = np.empty((len(inputs), self.dimensions), dtype=np.float32)
        batch = self._batch
        if self._mem:
            llama_cpp.llama_memory_clear(self._mem, True)
        n = 0
        for seq, tokens in enumerate(inputs):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = True  # an output row for each token: llama.cpp pools them
                n += 1
        batch.n_tokens = n
        with self._cores.computing():
            rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc != 0:
            raise EngineFailure(f"llama_decode returned {rc}")
        for seq in range(len(inputs)):
            ptr = llama_cpp.llama_get_embeddings_seq(self._ctx, seq)
            if not ptr:
                raise EngineFailure(f"no pooled embedding for sequence {seq}")
            out[seq] = np.ctypeslib.as_array(ptr, shape=(self.dimensions,))
        return out


def _settle(fut: asyncio.Future[np.ndarray], rows: np.ndarray | None, error: BaseException | None) -> None:
    if fut.done():  # its request went away
        return
    if error is not None:
        fut.set_exception(error)
    else:
        assert rows is not None
        fut.set_result(rows)


def beside(llm: object, *, n_ctx: int, n_threads: int, core_shares: str | None = None) -> Embedder:
    """An embedder on the weights a generation engine has loaded (`LlamaCppEngine`'s `_llm`)."""
    model = llm._model.model  # type: ignore[attr-defined]
    return Embedder(model, n_ctx=n_ctx, n_threads=n_threads, owns_model=False, path=str(llm.model_path), core_shares=core_shares)  # type: ignore[attr-defined]
