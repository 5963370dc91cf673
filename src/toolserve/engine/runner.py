"""Turns a step's work into one `llama_decode`: the batch's rows, the decode, its bookkeeping.

The batch is a `llama_batch` over arrays this module owns, filled through numpy views. Jobs go
in in the order of their sequences: llama.cpp splits a batch over several KV streams into
micro-batches of consecutive sequence ids with as many tokens each.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from toolserve.engine.base import EngineStats
from toolserve.engine.cores import Shares
from toolserve.engine.job import Job
from toolserve.errors import EngineFailure


class Batch:
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

    def add(self, tokens: Sequence[int], pos: int, seq: int, logits: int) -> int:
        """Append tokens of one sequence at positions from `pos`, logits computed for the last
        `logits` of them; the row of the first of those (of the last token when none)."""
        i, k = self.n, len(tokens)
        end = i + k
        self.token[i:end] = tokens
        self.pos[i:end] = np.arange(pos, pos + k, dtype=np.int32)
        self.seq[i:end] = self._seq_addr[seq]
        self.logits[i:end] = 0
        self.logits[end - logits : end] = 1
        self.n = end
        return end - max(logits, 1)


class Runner:
    """Owns the context's batch and its decodes. llama.cpp queues a copy between sequences
    (between KV streams it copies the whole stream) until the next decode: `copies_pending`
    says one is queued (a snapshot must not be taken or restored before it is carried out)."""

    def __init__(self, ctx: Any, capacity: int, n_seqs: int, cores: Shares, stats: EngineStats):
        self.ctx = ctx
        self.batch = Batch(capacity, n_seqs)
        self._cores = cores
        self._stats = stats
        self.copies_pending = False

    def run(self, decoding: Sequence[Job], reading: Sequence[Job]) -> None:
        """One decode: the next token of each decoding job and its draft (logits on each: the
        draft is verified row by row), this step's prompt chunk of each reading job (from
        `job.at` to `job.stop`, logits only at the prompt's end); each job's first logits row is
        left in `job.row`."""
        batch = self.batch
        batch.n = 0
        for job in sorted((*decoding, *reading), key=lambda j: j.seq.id):
            if job.reading:
                job.row = batch.add(job.prompt[job.at : job.stop], job.n_past, job.seq.id, int(job.stop == len(job.prompt)))
            else:
                job.row = batch.add((job.token, *job.draft), job.n_past, job.seq.id, 1 + len(job.draft))
        if batch.n:
            self.decode()

    def decode(self) -> None:
        """llama_decode of the batch as filled."""
        batch = self.batch
        batch.struct.n_tokens = batch.n
        with self._cores.computing():
            rc = llama_cpp.llama_decode(self.ctx, batch.struct)
        self._stats.shared_decodes = self._cores.shared
        self.copies_pending = False  # done before the batch, whatever became of the batch
        if rc != 0:
            raise EngineFailure(f"llama_decode returned {rc}")
