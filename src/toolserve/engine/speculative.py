"""Speculative decoding from the prompt: drafts from a sequence's own context (and earlier
answers), by n-gram lookup.

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

`History` is the engine's memory of earlier answers (as llama.cpp's ngram-mod keeps one table for
all requests): each finished job leaves its output there, with the end of its prompt before it,
so a request asked again, or one that repeats what an earlier answer said, drafts from it. It is
bounded (HISTORY_TOKENS, the oldest half dropped), and only jobs under `--speculative history`
draft from it (an operator's choice, not the default): every draft token is verified, but
drafts from it make the batches a request is verified in depend on what was asked before, and
with them llama.cpp's rounding, so the same greedy or seeded request sent twice can part at a
near-tie (with drafts from its own context only, it answers the same each time). An earlier
answer that agrees with the context's end on SURE_MATCH tokens (ngram-mod's n_match) is drafted
as far as the longest draft at once, as ngram-mod drafts 48 to 64 tokens or none: a request
asked again then gets its answer back in a few long drafts, in the same batches each time, so
its answer settles after a time or two (bench/README.md).
It is shared by all requests, as llama-server's table is: no client reads it, but how fast an
answer comes says whether something like it was answered lately.

`Budget` sizes each sequence's next draft from how its last ones fared. Under `auto` on a CPU,
`Worth` cuts a draft to what pays for its rows: there a row of a draft costs about as much as a
token decoded alone (on a GPU next to nothing: drafts there go uncut).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

KEY = 3  # tokens an n-gram must share with the context's end to be looked up
MATCH_MIN = 4  # a draft needs its source to agree with the context's end on this many tokens
MATCH_MAX = 64  # agreement measured up to this many tokens back
CANDIDATES = 32  # earlier occurrences of the key compared, most recent first
SURE_MATCH = 24  # an earlier answer agreeing on this many tokens is drafted as far as `sure` allows (ngram-mod's n_match)
DRAFT_MIN = 2  # the shortest draft the budget shrinks to
DRAFT_START = 8  # a sequence's first draft
DRAFT_MAX = 64  # the longest draft (llama.cpp's ngram-mod drafts 48 to 64)
HISTORY_TOKENS = 1 << 16  # tokens the history keeps (its index: about 20 MB at most)
HISTORY_LEAD = MATCH_MAX  # prompt tokens kept before an answer in the history (its lookup key)
SEPARATOR = -(1 << 40)  # between the history's texts: no n-gram or agreement crosses it
# what a decode of n tokens of one sequence (a token and its draft, logits on every row) costs
# against one of a lone token on a CPU: Qwen2.5-Coder-0.5B Q4_K_M on 2 cores of an AMD EPYC
# (21.6 ms for one token; SmolLM2-135M: 2.0, 2.3, 3.5, 5.3, 9.0 for 2 to 17), bench/README.md. Fixed, not
# timed at each start: a timing taken on a busy machine came out at 17x for 3 tokens, and one
# that moved from start to start would make the same request batch differently on the next
CPU_COSTS = {1: 1.0, 2: 1.82, 3: 2.16, 4: 2.32, 5: 3.22, 9: 4.83, 17: 6.91}
PRIOR = 2.0  # weight, in draft tokens tried, of the acceptance a draft's agreement promises (`Budget.chance`)


class Index:
    """The n-grams of a growing token list: where each KEY-token n-gram ends, ascending. A
    negative token (an image's stand-in, the history's separator) breaks every n-gram it is in."""

    def __init__(self, key: int = KEY):
        self.key = key
        self.tokens: list[int] = []
        self.where: dict[tuple[int, ...], list[int]] = {}

    def extend(self, tokens: Sequence[int]) -> None:
        start = len(self.tokens)
        self.tokens.extend(tokens)
        k = self.key
        for end in range(max(start + 1, k), len(self.tokens) + 1):
            gram = tuple(self.tokens[end - k : end])
            if min(gram) >= 0:
                self.where.setdefault(gram, []).append(end)

    def best(self, context: Sequence[int], before: int, room: Callable[[int], int] | None = None) -> tuple[int, int]:
        """The earlier occurrence (ending before `before`) of the context's last `key` tokens
        that agrees longest with the context's end, of the CANDIDATES most recent: (where it
        ends, tokens of agreement); (-1, 0) when none. Among equals the one with the most
        `room` after it (what a draft from there could take), then the most recent."""
        n = len(context)
        if n < self.key:
            return -1, 0
        ends = self.where.get(tuple(context[n - self.key :]))
        if not ends:
            return -1, 0
        best, best_score, tried = -1, (0, 0), 0
        for end in reversed(ends):
            if end >= before:
                continue  # the context's own end
            score = (agreement(self.tokens, end, context, n), room(end) if room else 0)
            if score > best_score:
                best, best_score = end, score
            tried += 1
            if tried >= CANDIDATES:
                break
        return best, best_score[0]


def agreement(source: Sequence[int], end: int, context: Sequence[int], n: int) -> int:
    """How many tokens before `source[end]` equal those before `context[n]` (at most MATCH_MAX)."""
    length = 0
    while length < MATCH_MAX and length < end and length < n and source[end - 1 - length] == context[n - 1 - length]:
        length += 1
    return length


class History:
    """Earlier answers of the engine, each with the end of its prompt before it, shared by all
    jobs (module docstring)."""

    def __init__(self, limit: int = HISTORY_TOKENS, key: int = KEY):
        self.limit = limit
        self.index = Index(key)
        self._ends: list[int] = []  # where each text ends (ascending)

    def add(self, tokens: Sequence[int]) -> None:
        """Remember a text (an answer with its lead); the oldest half goes when it is full."""
        if not tokens:
            return
        old = self.index.tokens
        if len(old) + len(tokens) + 1 > self.limit:
            offset = len(old) // 2 if len(tokens) < self.limit // 2 else len(old)
            self.index = Index(self.index.key)
            self.index.extend(old[offset:])
            self._ends = [e - offset for e in self._ends if e > offset]
            tokens = tokens[-(self.limit // 2) :]
        self.index.extend((SEPARATOR, *tokens))
        self._ends.append(len(self.index.tokens))

    def room(self, at: int) -> int:
        """Tokens from `at` to the end of the text it lies in."""
        i = bisect.bisect_left(self._ends, at)
        return self._ends[i] - at if i < len(self._ends) else 0


class Drafter:
    """The n-gram index of one sequence's context, extended as tokens come, and the engine's
    `History` where it has one."""

    def __init__(self, tokens: Sequence[int] = (), key: int = KEY, match_min: int = MATCH_MIN, history: History | None = None):
        self.key = key
        self.match_min = max(match_min, key)
        self.history = history
        self.agreed = 0  # how far the source of the last draft agreed with the context's end
        self._own = Index(key)
        self.tokens = self._own.tokens
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the context (an image's stand-in ids, negative, break every n-gram)."""
        self._own.extend(tokens)

    def draft(self, limit: int, sure: int = 0) -> list[int]:
        """Up to `limit` tokens expected to follow the context: what followed the earlier
        occurrence of its last `key` tokens that agrees longest with it, in the context or the
        history; empty when none agrees on `match_min` tokens. Of two that agree as far, the
        longer draft, and the history's on a tie (an answer given before says how this model
        goes on better than text it was asked about). An earlier answer that agrees on
        SURE_MATCH tokens is drafted up to `sure` tokens whatever `limit` (module docstring)."""
        n = len(self.tokens)
        self.agreed = 0
        if max(limit, sure) <= 0 or n <= self.key:
            return []
        own, own_len = self._own.best(self.tokens, n)
        if self.history is not None:
            history, most = self.history, max(limit, sure)
            past, past_len = history.index.best(self.tokens, len(history.index.tokens) + 1, lambda at: min(history.room(at), most))
        else:
            past, past_len = -1, 0
        mine = self._continue(own, limit) if own_len >= self.match_min else []
        if past_len < self.match_min or past_len < own_len:
            self.agreed = own_len if mine else 0
            return mine
        assert self.history is not None
        if past_len >= SURE_MATCH:
            limit = max(limit, sure)
        theirs: list[int] = []
        for token in self.history.index.tokens[past : past + min(limit, self.history.room(past))]:
            if token < 0:
                break  # an image's stand-in (in a prompt's lead) is never drafted
            theirs.append(token)
        if past_len == own_len and len(mine) > len(theirs):
            self.agreed = own_len
            return mine
        self.agreed = past_len if theirs else 0
        return theirs

    def _continue(self, start: int, limit: int) -> list[int]:
        """What followed `start` in the context, continued into the draft itself where it
        reaches the end (a repeating line drafts its next period); an image's stand-in id is
        never drafted."""
        n, out = len(self.tokens), list[int]()
        for i in range(start, start + limit):
            token = self.tokens[i] if i < n else out[i - n]
            if token < 0:
                break
            out.append(token)
        return out

    def answer(self, prompt_length: int) -> list[int]:
        """What the history keeps of this context: the answer after `prompt_length` prompt
        tokens, with the HISTORY_LEAD prompt tokens before it (none when nothing was answered)."""
        if len(self.tokens) <= prompt_length:
            return []
        return self.tokens[max(0, prompt_length - HISTORY_LEAD) :]


class Budget:
    """How long a sequence's next draft may be: doubled after a draft accepted whole, cut to one
    more than was accepted after one that was not (so a sequence that copies drafts far, one
    that does not wastes little), between DRAFT_MIN and DRAFT_MAX."""

    def __init__(self, start: int = DRAFT_START, least: int = DRAFT_MIN, most: int = DRAFT_MAX):
        self.least, self.most = least, most
        self.limit = min(max(start, least), most)
        self.tried = self.kept = 0  # draft tokens compared with the model's (up to a first miss), and kept

    def chance(self, agreed: int) -> float:
        """The chance that the model keeps the next token of a draft whose source agreed with the
        context's end on `agreed` tokens: agreed / (agreed + 1) before any draft (4: 0.8, 24:
        0.96), moved towards the share this sequence's drafts have kept as they are tried."""
        promised = agreed / (agreed + 1)
        return (self.kept + PRIOR * promised) / (self.tried + PRIOR)

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        self.kept += accepted
        self.tried += min(drafted, accepted + 1)
        if accepted >= drafted:
            self.limit = min(self.limit * 2, self.most)
        else:
            self.limit = min(max(accepted + 1, self.least), self.most)


class Worth:
    """How much of a draft pays for its rows, from what decodes of one sequence cost: `costs`
    maps a decode's size (a token and its draft, logits on every row) to its time, in any unit
    (CPU_COSTS on a CPU). On a GPU a draft's rows come nearly free; on a CPU the matrix products
    grow with the rows (Qwen2.5-Coder-0.5B Q4_K_M on 2 cores: 1.8x a lone token's time for 2
    tokens, 2.2x for 3, 4.8x for 9), so a draft of prose that the model keeps a third of slows
    it down (bench/README.md). Sizes not given are taken on the line between their neighbours,
    beyond the largest on its last two's slope; n tokens are taken to cost at least as much as
    fewer, at most as much as n lone tokens."""

    def __init__(self, costs: dict[int, float], most: int = DRAFT_MAX + 1):
        sizes = sorted(n for n, t in costs.items() if n >= 1 and t > 0)
        if not sizes or sizes[0] != 1:
            raise ValueError("the costs must include a decode of one token")
        one = costs[1]
        self.ratio = [0.0, 1.0]  # a decode of n tokens against one of a single token, n = 0..most
        for n in range(2, most + 1):
            if len(sizes) == 1:  # only a lone token's cost given: a draft's rows taken as free
                self.ratio.append(1.0)
                continue
            hi = next((m for m in sizes if m >= n), None)
            a, b = (sizes[-2], sizes[-1]) if hi is None else (max(m for m in sizes if m < n), hi)
            t = costs[a] + (costs[b] - costs[a]) * (n - a) / (b - a)
            # more rows never cost less, nor more than as many decodes of one token
            self.ratio.append(min(max(t / one, self.ratio[-1]), float(n)))

    def keep(self, length: int, chance: float) -> int:
        """How many tokens of a draft of `length` to decode when each is kept with `chance`
        (given the one before it was): the count that brings the most tokens per unit of time,
        0 where decoding the lone token does best."""
        best, best_rate, gain, p = 0, 1.0, 1.0, 1.0
        for k in range(1, min(length, len(self.ratio) - 2) + 1):
            p *= chance
            if p < 1e-4:
                break  # what longer drafts add is next to nothing
            gain += p  # tokens expected from a step with a draft of k: the token, then each kept
            rate = gain / self.ratio[k + 1]
            if rate > best_rate:
                best, best_rate = k, rate
        return best
