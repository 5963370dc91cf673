"""Picks a job's next token from its row of the logits.

llama.cpp's samplers do the picking (logit bias, penalties, DRY, top-k / top-p / min-p,
temperature, a seeded dist), so nothing per token runs in Python but the optional grammar mask,
applied to the row in place before the chain reads it, and the logprobs, read from the row as
the model wrote it. Greedy (temperature 0) needs no chain: its pick is the row's first largest
logit after the bias and penalties, which numpy finds in place. A prompt answered again starts
from logits kept from its first read (engine/scheduler.py): the chain then runs over a copy of
them, as `llama_sampler_sample` runs it over a row.

The penalties and DRY change only tokens of the recent past (the last 64 tokens, the answer's
last 1024), but llama.cpp's look up every entry of the vocabulary in a hash map: 1.2 ms a token
for the two on Qwen's 152k entries, 4% of a step of a 0.5B model on 2 cores. So they run apart
from the chain (`Recent`), over a small array of the tokens in their windows, and their result
is written into the row before the chain reads it; the logit bias, which llama.cpp applies
before them, is added to the row first. The token picked is the one the whole chain picks.
"""

from __future__ import annotations

import ctypes
import random
import threading
from collections import Counter, deque
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

from toolserve.types import SamplingParams, TokenConstraint, TokenLogprob

PENALTY_LAST_N = 64  # llama.cpp's default window for repetition/presence/frequency penalties
# DRY as llama.cpp's common defaults set it, but the multiplier (a request's dry_multiplier):
# a span repeated beyond 2 tokens costs base^(length - 2) on the token that would extend it,
# and the breakers end a span, so JSON's quotes and colons and new lines never add up
DRY_BASE, DRY_ALLOWED_LENGTH, DRY_LAST_N = 1.75, 2, 1024  # the answer's last 1024 tokens
DRY_BREAKERS = ("\n", ":", '"', "*")
_BREAKERS = (ctypes.c_char_p * len(DRY_BREAKERS))(*(b.encode() for b in DRY_BREAKERS))  # as llama.cpp takes them, built once
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


def row_logits(ctx: Any, row: int, n_vocab: int) -> np.ndarray:
    """A view of llama.cpp's logits for one batch row (-1: the last one computed)."""
    raw = llama_cpp.llama_get_logits_ith(ctx, row)
    return np.ctypeslib.as_array(raw, shape=(n_vocab,))


def logprob(logits: np.ndarray, token: int, top_n: int) -> TokenLogprob:
    """The log-probability of `token` under `logits`, with the `top_n` likeliest tokens."""
    peak = float(logits.max())
    lse = peak + float(np.log(np.exp(logits - peak).sum()))
    top: tuple[tuple[int, float], ...] = ()
    if top_n > 0:
        idx = np.argpartition(-logits, top_n)[:top_n]
        idx = idx[np.argsort(-logits[idx])]
        top = tuple((int(i), float(logits[i]) - lse) for i in idx)
    return TokenLogprob(token, float(logits[token]) - lse, top)


def _dry(vocab: Any, multiplier: float) -> Any:
    if isinstance(vocab, DrySamplers):
        return vocab.new(multiplier)
    return llama_cpp.llama_sampler_init_dry(vocab, multiplier, DRY_BASE, DRY_ALLOWED_LENGTH, DRY_LAST_N, _BREAKERS, len(DRY_BREAKERS))


class DrySamplers:
    """DRY samplers for one model's vocabulary. llama.cpp's init finds every token that holds a
    sequence breaker, a pass over the whole vocabulary: 34 ms on Qwen's 152k entries, on the
    engine's thread at every request. One is made per multiplier, and each request's is a
    clone of it (llama.cpp's clone copies the breakers found, and the empty history)."""

    KEEP = 8  # multipliers kept (the server's default is one; clients may send others)

    def __init__(self, vocab: Any):
        self.vocab = vocab
        self._made: dict[float, Any] = {}
        self._lock = threading.Lock()

    def new(self, multiplier: float) -> Any:
        with self._lock:
            proto = self._made.pop(multiplier, None)
            if proto is None:
                proto = llama_cpp.llama_sampler_init_dry(
                    self.vocab, multiplier, DRY_BASE, DRY_ALLOWED_LENGTH, DRY_LAST_N, _BREAKERS, len(DRY_BREAKERS)
                )
                if len(self._made) >= self.KEEP:
                    llama_cpp.llama_sampler_free(self._made.pop(next(iter(self._made))))  # the least recently used
            self._made[multiplier] = proto
            return llama_cpp.llama_sampler_clone(proto)

    def close(self) -> None:
        with self._lock:
            for proto in self._made.values():
                llama_cpp.llama_sampler_free(proto)
            self._made.clear()


def chain(params: SamplingParams, prompt: list[int], n_vocab: int, vocab: Any = None, *, recent: bool = True) -> _internals.LlamaSampler:
    """llama.cpp's sampler chain for `params`; penalties start from the prompt's last tokens
    (unless `params.penalize_prompt` is off), DRY (given the model's `vocab`) from the answer's
    first (quoting the prompt is no loop). `recent` off: without the logit bias, penalties and
    DRY (`Recent` applies them)."""
    s = _internals.LlamaSampler()
    if recent:
        if params.logit_bias:
            s.add_logit_bias(n_vocab, params.logit_bias)
        for sampler in recent_samplers(params, prompt, n_vocab, vocab):
            llama_cpp.llama_sampler_chain_add(s.sampler, sampler)
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
    return s


def recent_samplers(params: SamplingParams, prompt: list[int], n_vocab: int, vocab: Any = None) -> list[Any]:
    """llama.cpp's penalties (fed the prompt's last tokens if `params.penalize_prompt`) and DRY
    (given the model's `vocab`), those of them `params` asks for, in the chain's order."""
    out = []
    if params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty:
        penalties = llama_cpp.llama_sampler_init_penalties(
            n_vocab, PENALTY_LAST_N, params.repetition_penalty, params.frequency_penalty, params.presence_penalty
        )
        for tok in prompt[-PENALTY_LAST_N:] if params.penalize_prompt else ():  # the recent prompt, as in llama.cpp
            if tok >= 0:  # not an image's stand-in
                llama_cpp.llama_sampler_accept(penalties, tok)
        out.append(penalties)
    if params.dry_multiplier > 0.0 and vocab is not None:
        out.append(_dry(vocab, params.dry_multiplier))
    return out


class Bias:
    """A request's logit bias, added to a row in place as llama.cpp's logit-bias sampler adds it."""

    def __init__(self, logit_bias: dict[int, float], n_vocab: int):
        bias = sorted((k, v) for k, v in logit_bias.items() if 0 <= k < n_vocab)  # llama.cpp skips others
        self._ids = np.array([k for k, _ in bias], dtype=np.int64)
        self._values = np.array([v for _, v in bias], dtype=np.float32)

    def __bool__(self) -> bool:
        return bool(len(self._ids))

    def apply(self, logits: np.ndarray) -> None:
        if len(self._ids):
            logits[self._ids] += self._values


class Recent:
    """The penalties and DRY of one job, applied to the tokens of their windows only (what else
    they would look up, they leave as it is) after the logit bias, in a chain of their own."""

    def __init__(self, params: SamplingParams, prompt: list[int], n_vocab: int, samplers: list[Any]):
        self._chain = _internals.LlamaSampler()
        for sampler in samplers:
            llama_cpp.llama_sampler_chain_add(self._chain.sampler, sampler)
        self._bias = Bias(params.logit_bias, n_vocab)
        # every token a window can hold: the prompt's last ones (penalties), the answer's (both)
        self._prompt = {t for t in prompt[-PENALTY_LAST_N:] if t >= 0} if params.penalize_prompt else set()
        self._answer: deque[int] = deque()
        self._counts: Counter[int] = Counter()
        self._dirty = True
        self._data = np.empty(0, dtype=TOKEN_DATA)

    def apply(self, logits: np.ndarray) -> None:
        """The logit bias, then the penalties and DRY, on `logits` in place."""
        self._bias.apply(logits)
        if self._dirty:
            ids = np.fromiter(self._prompt | self._counts.keys(), dtype=np.int32)
            self._data = np.empty(len(ids), dtype=TOKEN_DATA)
            self._data["id"] = ids
            self._dirty = False
        data = self._data
        if not len(data):
            return
        data["logit"] = logits[data["id"]]
        data["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), size=len(data), selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(self._chain.sampler, ctypes.byref(cur))
        assert cur.size == len(data)  # penalties and DRY change values, never the array
        logits[data["id"]] = data["logit"]

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._chain.sampler, token)
        self._answer.append(token)
        if self._counts[token] == 0 and token not in self._prompt:
            self._dirty = True
        self._counts[token] += 1
        if len(self._answer) > DRY_LAST_N:  # out of both windows (DRY's is the longer)
            old = self._answer.popleft()
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
                self._dirty = True

    def close(self) -> None:
        self._chain.close()


class Sampler:
    """One job's sampler chain and grammar constraint. Built before the job takes a sequence:
    a grammar that does not compile fails here."""

    def __init__(self, params: SamplingParams, prompt: list[int], n_vocab: int, vocab: Any = None):
        self._n_vocab = n_vocab
        self._top_n = params.logprobs
        self.constraint: TokenConstraint | None = params.constraint() if params.constraint is not None else None
        samplers = recent_samplers(params, prompt, n_vocab, vocab)
        self._recent = Recent(params, prompt, n_vocab, samplers) if samplers else None
        # greedy: the row's first largest logit after the bias and the penalties, which is what
        # llama.cpp's greedy sampler picks, without its chain (the chain copies the whole row into
        # an array of candidates first: on Qwen's 152k entries most of a pick's time)
        greedy = params.temperature <= 0.0
        bias = Bias(params.logit_bias, n_vocab) if greedy and self._recent is None else None  # else Recent or the chain adds it
        self._bias = bias if bias else None
        self._chain = None if greedy else chain(params, prompt, n_vocab, vocab, recent=not samplers)  # with them only where Recent has none

    def pick(self, ctx: Any, row: int, kept: np.ndarray | None = None) -> tuple[int | None, TokenLogprob | None]:
        """The next token from batch row `row` (or from `kept` logits, left unchanged) and its
        logprob (when asked for); None when the grammar allows nothing at all (a dead end)."""
        logits = row_logits(ctx, row, self._n_vocab) if kept is None else kept.copy()
        if self.constraint is not None and not self._mask(logits):
            return None, None
        changed = self._recent is not None or self._bias is not None
        model = logits.copy() if changed and self._top_n is not None else logits  # logprobs: the model's
        if self._recent is not None:
            self._recent.apply(logits)  # in llama.cpp's row, which the chain reads next
        if self._bias is not None:
            self._bias.apply(logits)
        if self._chain is None:
            token = int(np.argmax(logits))
        else:
            token = llama_cpp.llama_sampler_sample(self._chain.sampler, ctx, row) if kept is None else self._sample(logits)
        if self._recent is not None:
            self._recent.accept(token)
        lp = logprob(model, token, self._top_n) if self._top_n is not None else None
        return token, lp

    def _sample(self, logits: np.ndarray) -> int:
        """What `llama_sampler_sample` does with a row, over an array of logits."""
        assert self._chain is not None
        data = np.empty(len(logits), dtype=TOKEN_DATA)
        data["id"] = np.arange(len(logits), dtype=np.int32)
        data["logit"] = logits
        data["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), size=len(logits), selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(self._chain.sampler, ctypes.byref(cur))
        token = int(data["id"][cur.selected])
        llama_cpp.llama_sampler_accept(self._chain.sampler, token)
        return token

    def allowed(self, draft: list[int]) -> list[int]:
        """The longest prefix of a draft that the grammar allows from here."""
        if self.constraint is None or not draft:
            return draft
        return draft[: self.constraint.valid_prefix(draft)]

    def accept(self, token: int) -> bool:
        """Tell the grammar a token was emitted; True when the constrained text is complete."""
        if self.constraint is None:
            return False
        self.constraint.accept(token)
        return self.constraint.done()

    def _mask(self, logits: np.ndarray) -> bool:
        """Forbid the tokens the constraint does not allow, in place (in llama.cpp's row)."""
        assert self.constraint is not None
        forbidden = self.constraint.forbidden()
        if forbidden is None:
            return True
        logits[forbidden] = -np.inf
        return not bool(forbidden.all())

    def close(self) -> None:
        if self._chain is not None:
            self._chain.close()
        if self._recent is not None:
            self._recent.close()
