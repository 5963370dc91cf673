"""A multi-entry prompt cache: KV snapshots keyed by the tokens they hold, LRU under a byte budget.

Pure bookkeeping: the engine saves and restores the snapshots; this class only decides which
entry serves a prompt best and which entries to drop. A snapshot is any object with a length
in bytes (the engine stores ctypes buffers).

Each entry has a `usable` length: how many of its tokens may be reused. The engine evaluates
prompts in chunks and keeps, with each entry, where the read that computed it ended them
(`cuts`); a prompt reuses an entry only up to where its own chunks end alike (engine/slots.py
`reach`), so that a reused prefix holds exactly the numbers a fresh evaluation would compute.
Only whole chunks of a prompt are usable (generated tokens and a prompt's last partial chunk
were computed in other batch shapes).

KV computed under one set of LoRA adapters is worthless under another: every entry carries the
index of the adapter set it was computed with, and only serves prompts run with the same set.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class CacheEntry:
    tokens: tuple[int, ...]
    usable: int
    snapshot: Any
    nbytes: int
    media: tuple[Any, ...] = ()  # the engine's MediaSpans inside `tokens` (images)
    adapter: int = 0  # the engine's adapter set the KV was computed with
    cuts: tuple[int, ...] = ()  # where the read that computed it ended its chunks, up to `usable`

    def reusable(self, prompt: Sequence[int], adapter: int = 0) -> int:
        if adapter != self.adapter:
            return 0
        return min(common_prefix(self.tokens, prompt), self.usable)


@dataclass
class CacheStats:
    hits: int = 0  # requests that reused at least one token (live context or a snapshot)
    misses: int = 0
    restores: int = 0  # hits served from a snapshot rather than the live context
    saves: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0


class PromptCache:
    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self._entries: OrderedDict[tuple[int, tuple[int, ...]], CacheEntry] = OrderedDict()  # (adapter, tokens)
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def best(
        self, prompt: Sequence[int], adapter: int = 0, reach: Callable[[Sequence[int], int], int] | None = None
    ) -> tuple[CacheEntry | None, int]:
        """The entry the most of `prompt` may start from (under the same adapters), and how much:
        `reach(entry's cuts, tokens shared)` says how much of a shared prefix is exact to reuse
        (by default all of it)."""
        best: CacheEntry | None = None
        best_len = 0
        for entry in self._entries.values():
            n = entry.reusable(prompt, adapter)
            if reach is not None:
                n = reach(entry.cuts, n)
            if n > best_len:
                best, best_len = entry, n
        return best, best_len

    def touch(self, entry: CacheEntry) -> None:
        """Mark an entry as just used (the engine restored it); one no longer held is left alone."""
        key = (entry.adapter, entry.tokens)
        if self._entries.get(key) is entry:
            self._entries.move_to_end(key)

    def covers(self, tokens: Sequence[int], usable: int, adapter: int = 0) -> bool:
        """True if some entry already offers the first `usable` tokens: saving adds nothing."""
        return any(e.reusable(tokens, adapter) >= usable for e in self._entries.values())

    def put(
        self, tokens: Sequence[int], usable: int, snapshot: Any, nbytes: int, media: Sequence[Any] = (), adapter: int = 0,
        cuts: Sequence[int] = (), keep: CacheEntry | None = None,
    ) -> bool:
        """Store a snapshot; entries it makes redundant go, then the least recently used ones
        until the budget holds. `keep` (the entry the engine is about to restore) never goes:
        when the budget cannot hold both, the new snapshot is not stored. A snapshot larger
        than the whole budget is not stored."""
        if nbytes > self.budget or usable <= 0:
            return False
        if keep is not None and keep.nbytes + nbytes > self.budget:
            return False
        key = tuple(tokens)
        for old in [e for e in self._entries.values() if e is not keep and e.usable <= e.reusable(key, adapter) and e.usable <= usable]:
            del self._entries[(old.adapter, old.tokens)]  # a longer snapshot of the same conversation replaces it
        while self.nbytes + nbytes > self.budget:
            victim = next(k for k, e in self._entries.items() if e is not keep)  # exists: keep alone fits beside it
            del self._entries[victim]
            self.stats.evictions += 1
        self._entries[(adapter, key)] = CacheEntry(key, usable, snapshot, nbytes, tuple(media), adapter, tuple(c for c in cuts if c <= usable))
        self.stats.saves += 1
        self._sync()
        return True

    def clear(self) -> None:
        self._entries.clear()
        self._sync()

    def _sync(self) -> None:
        self.stats.bytes = self.nbytes
        self.stats.entries = len(self._entries)
