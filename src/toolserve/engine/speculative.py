"""Speculative decoding from the prompt: drafts from a sequence's own context, by n-gram lookup.

A model asked to repeat what is already in its context (a file rewritten with one change, a
tool call's arguments copied from the user's words, code quoted back) produces long runs that
have appeared before. `Drafter` keeps an index of the context's n-grams (prompt and output) and
proposes, after the last KEY tokens, what followed their most recent earlier occurrence that
agrees longest with the tokens before them (as llama.cpp's prompt-lookup and ngram-mod do).

The engine puts the draft in the same batch as the token it decodes, with logits on every row,
and samples row by row (engine/llama_cpp.py): a draft token is kept while the token sampled
from the row before it equals it. For a draft that is one fixed token per position this is
standard speculative sampling: accepting draft token d with probability p(d), else sampling
from p with d removed and renormalised, is what sampling from p and comparing with d does. So
greedy output is the same with and without a draft (up to llama.cpp's rounding, which depends
on the batch's shape on the CPU: docs/architecture.md), and sampled output keeps the model's
distribution (each emitted token still takes one draw of the seeded sampler).

`Budget` sizes each sequence's next draft from how its last ones fared.
"""

from __future__ import annotations

from collections.abc import Sequence

KEY = 3  # tokens an n-gram must share with the context's end to be looked up
MATCH_MIN = 4  # a draft needs its source to agree with the context's end on this many tokens
MATCH_MAX = 64  # agreement measured up to this many tokens back
CANDIDATES = 8  # earlier occurrences of the key compared, most recent first
DRAFT_MIN = 2  # the shortest draft the budget shrinks to
DRAFT_START = 8  # a sequence's first draft
DRAFT_MAX = 32  # the longest draft


class Drafter:
    """The n-gram index of one sequence's context, extended as tokens come."""

    def __init__(self, tokens: Sequence[int] = (), key: int = KEY, match_min: int = MATCH_MIN):
        self.key = key
        self.match_min = max(match_min, key)
        self.tokens: list[int] = []
        self._where: dict[tuple[int, ...], list[int]] = {}  # key n-gram -> where it ends (ascending)
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the context (an image's stand-in ids, negative, break every n-gram)."""
        start = len(self.tokens)
        self.tokens.extend(tokens)
        k = self.key
        for end in range(max(start + 1, k), len(self.tokens) + 1):
            gram = tuple(self.tokens[end - k : end])
            if min(gram) >= 0:
                self._where.setdefault(gram, []).append(end)

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens expected to follow the context: what followed the best earlier
        occurrence of its last `key` tokens; empty when none agrees on `match_min` tokens."""
        n, k = len(self.tokens), self.key
        if limit <= 0 or n <= k:
            return []
        ends = self._where.get(tuple(self.tokens[n - k :]))
        if not ends:
            return []
        best, best_len = -1, 0
        tried = 0
        for end in reversed(ends):
            if end >= n:
                continue  # the context's own end
            length = self._agreement(end, n)
            if length > best_len:
                best, best_len = end, length
            tried += 1
            if tried >= CANDIDATES or best_len >= MATCH_MAX:
                break
        if best_len < self.match_min:
            return []
        # what followed, continued into the draft itself where it reaches the end (a repeating
        # line drafts its next period); an image's stand-in id is never drafted
        out: list[int] = []
        for i in range(best, best + limit):
            token = self.tokens[i] if i < n else out[i - n]
            if token < 0:
                break
            out.append(token)
        return out

    def _agreement(self, end: int, n: int) -> int:
        """How many tokens before `end` equal those before the context's end `n` (at most MATCH_MAX)."""
        toks = self.tokens
        length = 0
        while length < MATCH_MAX and length < end and toks[end - 1 - length] == toks[n - 1 - length]:
            length += 1
        return length


class Budget:
    """How long a sequence's next draft may be: doubled after a draft accepted whole, cut to one
    more than was accepted after one that was not (so a sequence that copies drafts far, one
    that does not wastes little), between DRAFT_MIN and DRAFT_MAX."""

    def __init__(self, start: int = DRAFT_START, least: int = DRAFT_MIN, most: int = DRAFT_MAX):
        self.least, self.most = least, most
        self.limit = min(max(start, least), most)

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        if accepted >= drafted:
            self.limit = min(self.limit * 2, self.most)
        else:
            self.limit = min(max(accepted + 1, self.least), self.most)
