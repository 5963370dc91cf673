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
from toolserve.errors import EngineFailure, ModelLoadError

log = logging.getLogger(__name__)

POOLING_NAMES = {
    llama_cpp.LLAMA_POOLING_TYPE_MEAN: "mean",
    llama_cpp.LLAMA_POOLING_TYPE_CLS: "cls",
    llama_cpp.LLAMA_POOLING_TYPE_LAST: "last",
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


def pack(lengths: Sequence[int], max_tokens: int, max_seqs: int) -> list[list[int]]:
    """Indices of inputs grouped into batches, in order: each batch at most `max_tokens` tokens
    and `max_seqs` inputs (an input longer than `max_tokens` must have been refused before)."""
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if current and (used + n > max_tokens or len(current) >= max_seqs):
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        batches.append(current)
    return batches


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
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = self.n_ctx
        # llama.cpp pools a sequence whole only within one micro-batch; the last token of a causal
        # model is right whatever the split (its KV holds the rest), so there micro-batches stay
        # small: an n_ctx-token one costs SmolLM2 786 MB of compute buffer at 4096
        split = causal and pooling == llama_cpp.LLAMA_POOLING_TYPE_LAST
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
        self._worker = threading.Thread(target=self._run, name="toolserve-embed", daemon=True)
        self._worker.start()

    @classmethod
    def load(cls, path: str, *, n_ctx: int, n_threads: int | None = None, repack: bool = True, core_shares: str | None = None) -> Embedder:
        """An embedding model of its own (a GGUF with pooling in its header, e.g. BERT).
        `repack`: as for the generation model (engine/repack.py: off where it faults)."""
        from llama_cpp import _logger

        _logger.set_verbose(False)  # llama.cpp's load chatter stays out of the server's log, as for the generation model
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.use_extra_bufts = repack
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise ModelLoadError(f"cannot load embedding model {path}")
        return cls(model, n_ctx=n_ctx, n_threads=cores.threads(n_threads), owns_model=True, path=path, core_shares=core_shares)

    # -- vocabulary -------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """The input's tokens with the model's own special tokens around it (BERT: [CLS] .. [SEP])."""
        return self.vocab.tokenize(text, add_bos=True, special=False)

    # -- requests ---------------------------------------------------------------------------------
    async def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One pooled, unnormalised vector per input (rows of a float32 array)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()
        self._jobs.put(_Job([list(t) for t in inputs], fut, loop))
        return await fut

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
        while True:
            job = self._jobs.get()
            if job is None:
                return
            jobs = [job]
            while True:  # the requests waiting now share the batches
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._jobs.put(None)
                    break
                jobs.append(more)
            self._cores.busy(True)
            try:
                rows = self._compute([t for j in jobs for t in j.inputs])
            except Exception as exc:
                log.exception("embedding failed")
                for j in jobs:
                    j.loop.call_soon_threadsafe(_settle, j.future, None, EngineFailure(f"embedding failed: {exc}"))
                continue
            finally:
                self._cores.busy(False)
            at = 0
            for j in jobs:
                part = rows[at : at + len(j.inputs)]
                at += len(j.inputs)
                j.loop.call_soon_threadsafe(_settle, j.future, part, None)

    def _compute(self, inputs: list[list[int]]) -> np.ndarray:
        out = np.empty((len(inputs), self.dimensions), dtype=np.float32)
        batch = self._batch
        for group in pack([len(t) for t in inputs], self.n_ctx, MAX_SEQS):
            if self._mem:
                llama_cpp.llama_memory_clear(self._mem, True)
            n = 0
            for seq, i in enumerate(group):
                for pos, token in enumerate(inputs[i]):
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
            for seq, i in enumerate(group):
                ptr = llama_cpp.llama_get_embeddings_seq(self._ctx, seq)
                if not ptr:
                    raise EngineFailure(f"no pooled embedding for sequence {seq}")
                out[i] = np.ctypeslib.as_array(ptr, shape=(self.dimensions,))
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
