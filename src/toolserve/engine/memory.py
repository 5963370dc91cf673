"""The KV cells of the context's sequences, and the prompt cache's snapshots of them.

Every change to a sequence's cells goes through here, so that its `SeqState` (the tokens
whose KV it holds, how many are whole prompt chunks, the images among them) stays true to
what llama.cpp holds. Which prefix to reuse is decided in engine/slots.py; this module only
carries it out.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any

import llama_cpp

from toolserve.engine.prompt_cache import CacheEntry, PromptCache
from toolserve.engine.runner import Runner
from toolserve.engine.slots import SeqState, position, snapshot_media

log = logging.getLogger(__name__)


class Memory:
    """KV operations on the sequences of one context."""

    def __init__(self, ctx: Any, seqs: Sequence[SeqState], cache: PromptCache | None, runner: Runner):
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._seqs = seqs
        self._cache = cache
        self._runner = runner

    def clear(self, seq: SeqState) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, seq.id, -1, -1)
        seq.tokens, seq.usable, seq.media, seq.cuts = [], 0, [], []
        seq.whole, seq.logits = 0, None

    def trim(self, seq: SeqState, keep: int) -> None:
        """Keep the first `keep` tokens of a sequence (its whole prompt chunks), drop the rest."""
        if keep <= 0:
            self.clear(seq)
            return
        if len(seq.tokens) > keep:
            llama_cpp.llama_memory_seq_rm(self._mem, seq.id, position(keep, seq.media), -1)
            del seq.tokens[keep:]
            seq.media = snapshot_media(seq.media, keep)
        seq.usable = min(seq.usable, keep)
        if keep < seq.whole:
            seq.whole, seq.logits = 0, None

    def drop_after(self, seq: SeqState, pos: int) -> bool:
        """Drop the cells of a sequence from position `pos` on (rejected draft tokens, which
        were never put in `seq.tokens`); False where llama.cpp cannot (a recurrent model)."""
        return bool(llama_cpp.llama_memory_seq_rm(self._mem, seq.id, pos, -1))

    def copy(self, src: SeqState, dst: SeqState, end: int) -> None:
        """Make `dst` hold `src`'s positions before `end`. Between KV streams llama.cpp copies
        whole streams (and queues the copy until the next decode), so the rest is cut after."""
        llama_cpp.llama_memory_seq_cp(self._mem, src.id, dst.id, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._mem, dst.id, end, -1)
        self._runner.copies_pending = True
        dst.whole, dst.logits = 0, None

    def flush(self) -> None:
        """Carry out the queued copies now (only a decode does): decode one throwaway token after
        the last position of the emptiest sequence, then drop it."""
        if not self._runner.copies_pending:
            return
        ends = [llama_cpp.llama_memory_seq_pos_max(self._mem, s.id) + 1 for s in self._seqs]
        seq = min(range(len(ends)), key=ends.__getitem__)
        batch = self._runner.batch
        batch.n = 0
        batch.add((0,), ends[seq], seq, 0)
        try:
            self._runner.decode()
        finally:
            llama_cpp.llama_memory_seq_rm(self._mem, seq, ends[seq], -1)

    def save(self, seq: SeqState, keep: CacheEntry | None = None) -> None:
        """Snapshot a sequence's reusable prefix before its KV is overwritten (never evicting `keep`)."""
        assert self._cache is not None
        self.trim(seq, seq.usable)
        size = llama_cpp.llama_state_seq_get_size(self._ctx, seq.id)
        if size > self._cache.budget:
            return
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, seq.id)
        if written:
            self._cache.put(seq.tokens, seq.usable, buf, written, seq.media, seq.adapter, seq.cuts, keep=keep)

    def restore(self, seq: SeqState, entry: CacheEntry) -> bool:
        """Load a snapshot into an emptied sequence; False (and a warning) where llama.cpp fails."""
        assert self._cache is not None
        self.clear(seq)
        if not llama_cpp.llama_state_seq_set_data(self._ctx, entry.snapshot, entry.nbytes, seq.id):
            log.warning("restoring a prompt-cache snapshot of %d tokens failed (llama.cpp's log says why); the prompt is read again", entry.usable)
            return False
        seq.tokens, seq.usable, seq.media = list(entry.tokens), entry.usable, list(entry.media)
        self._cache.touch(entry)
        self._cache.stats.restores += 1
        return True

    def reset(self) -> None:
        """Empty every sequence (after a failed decode)."""
        llama_cpp.llama_memory_clear(self._mem, True)
        self._runner.copies_pending = True  # a decode that failed may have left them queued
        for seq in self._seqs:
            seq.tokens, seq.usable, seq.media, seq.cuts, seq.busy = [], 0, [], [], False
            seq.whole, seq.logits = 0, None
