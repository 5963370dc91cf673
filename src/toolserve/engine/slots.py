"""Where a new request's prompt starts: pure bookkeeping for the batched engine's sequences.

The engine keeps one llama.cpp context with several sequences (one per running request, at
most `--parallel`). A sequence that finished keeps the KV of its prompt, so that the next turn
of the same conversation finds it; a new request may also copy a prefix out of another sequence
(a shared system prompt and tool list) or restore a snapshot from the prompt cache. This module
decides which; the engine does the KV operations.

Exactness: llama.cpp's numbers depend on the batch they were computed in. Prompts are read in
chunks, at most one chunk per sequence per step, and only whole chunks are reused. A chunk ends
at the next absolute multiple of PREFILL_CHUNK, at an image's start or end (images are evaluated
whole), or just after an end-of-turn token (`turn_cuts`: a shared system prompt, tool list or
earlier turn is reused to its last token, not to the 64-token grid before it). Where a chunk
ends depends only on the tokens before that point, so two prompts sharing a prefix are cut the
same way inside it, and reusing a chunk computes what reading it would. With one
sequence (`--parallel 1`) that makes a cache hit compute exactly what a miss computes; with
several, the other sequences' rows in the same batch and the KV cells' placement change the
rounding, so a hit answers like a miss only up to rounding (see docs/architecture.md).

LoRA: a prompt run under one adapter set never reuses KV computed under another (`adapter`,
the engine's index of the set, is part of what must match).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from toolserve.engine.base import MediaSpan
from toolserve.engine.prompt_cache import CacheEntry, PromptCache, common_prefix

PREFILL_CHUNK = 64
SAVE_MIN_DISCARD = 32  # snapshot a sequence's KV before it is overwritten only when this many tokens would be lost


def aligned(n: int) -> int:
    return n - n % PREFILL_CHUNK


def turn_cuts(prompt: Sequence[int], turn_ends: frozenset[int] | set[int], media: Sequence[MediaSpan] = ()) -> list[int]:
    """The chunk ends a prompt has besides the grid and its images: just after each end-of-turn
    token (outside images, off the grid). Whether there is a cut at `c` depends on the tokens
    before `c` alone. The last one, before the template's opening of the answer, costs a short
    chunk of its own, and is where the conversation's next request reuses up to."""
    n = len(prompt)
    cuts = [i + 1 for i, t in enumerate(prompt) if t in turn_ends and 0 < i + 1 < n and (i + 1) % PREFILL_CHUNK]
    return [c for c in cuts if not any(m.start < c < m.end for m in media)]


def boundary(limit: int, media: Sequence[MediaSpan], cuts: Sequence[int] = ()) -> int:
    """The longest prefix of at most `limit` prompt tokens that a fresh evaluation computes in
    the same batches: it ends at a multiple of PREFILL_CHUNK outside any image, at an image's
    start or end (images are evaluated whole) or at one of the prompt's `turn_cuts`."""
    best = max([aligned(limit), *(c for c in cuts if c <= limit)])
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


def next_stop(at: int, length: int, media: Sequence[MediaSpan], cuts: Sequence[int] = ()) -> int:
    """Where the prompt chunk that starts at `at` (outside any image) ends: the next multiple of
    PREFILL_CHUNK, the next image, the next of the prompt's `turn_cuts` or the end of the prompt."""
    return min([aligned(at) + PREFILL_CHUNK, length, *(m.start for m in media if m.start > at), *(c for c in cuts if c > at)])


@dataclass
class SeqState:
    """What one llama.cpp sequence holds."""

    id: int
    tokens: list[int] = field(default_factory=list)  # the tokens whose KV it holds, in order
    usable: int = 0  # how many of them are whole prompt chunks (exactly reusable)
    media: list[MediaSpan] = field(default_factory=list)  # images among them (handles dropped)
    busy: bool = False  # a request runs in it
    used: int = 0  # when it last started a request (for least-recently-used choice)
    adapter: int = 0  # the adapter set its KV was computed with

    def reusable(self, prompt: Sequence[int], adapter: int = 0) -> int:
        if adapter != self.adapter:
            return 0
        return min(common_prefix(self.tokens, prompt), self.usable)


@dataclass(frozen=True)
class Plan:
    """Where a prompt starts. `target` is the sequence it runs in; its first `reuse` tokens come
    from `target` itself (when `source` and `snapshot` are None), from sequence `source`, or from
    `snapshot`. `save` is True when the target's content is worth a snapshot before it goes."""

    target: int
    reuse: int
    source: int | None = None
    snapshot: CacheEntry | None = None
    save: bool = False


def plan(
    seqs: Sequence[SeqState],
    prompt: Sequence[int],
    media: Sequence[MediaSpan],
    cache: PromptCache | None,
    adapter: int = 0,
    cuts: Sequence[int] = (),
) -> Plan:
    """Choose the idle sequence a prompt runs in and the longest exact prefix it can start from,
    among KV computed under the same `adapter` set. `seqs` must hold at least one idle sequence.
    With no cache (`--cache-ram 0`) nothing is reused."""
    idle = [s for s in seqs if not s.busy]
    if not idle:
        raise ValueError("no idle sequence")
    last = len(prompt) - 1  # the last prompt token is always evaluated again, for its logits

    def exact(n: int) -> int:
        return boundary(min(n, last), media, cuts)

    if cache is None:
        target = min(idle, key=lambda s: s.used)
        return Plan(target.id, 0)
    # the best live source: an idle sequence is reused in place, a busy one is copied from
    best_live = max(seqs, key=lambda s: (exact(s.reusable(prompt, adapter)), not s.busy))
    live = exact(best_live.reusable(prompt, adapter))
    entry, entry_len = cache.best(prompt, adapter)
    from_snapshot = entry is not None and exact(entry_len) > live
    if not from_snapshot and live > 0 and not best_live.busy:
        target = best_live  # the conversation goes on where it is
    else:  # the idle sequence whose content is worth least: empty, else least recently used
        target = min(idle, key=lambda s: (s.usable > 0, s.used))
    keep = exact(target.reusable(prompt, adapter))
    save = target.usable - keep >= SAVE_MIN_DISCARD and not cache.covers(target.tokens, target.usable, target.adapter) and not any(
        o is not target and o.reusable(target.tokens, target.adapter) >= target.usable for o in seqs
    )
    if from_snapshot:
        assert entry is not None
        return Plan(target.id, exact(entry_len), snapshot=entry, save=save)
    if live > keep:
        return Plan(target.id, live, source=best_live.id, save=save)
    return Plan(target.id, keep, save=save)


def lead(prompt: Sequence[int], media: Sequence[MediaSpan], other: Sequence[int], start: int, cuts: Sequence[int] = ()) -> int:
    """How far a prompt can follow another prompt being read now (whose prefix the engine can
    copy instead of computing it twice): the exact boundary of their common prefix, if it goes
    beyond `start`, else 0."""
    n = boundary(min(common_prefix(prompt, other), len(prompt) - 1), media, cuts)
    return n if n > start else 0


def snapshot_media(media: Sequence[MediaSpan], upto: int) -> list[MediaSpan]:
    """The images of a prompt that lie within its first `upto` tokens, without their encoded input."""
    return [dataclasses.replace(m, handle=None) for m in media if m.end <= upto]


def adapter_turn(sets: Sequence[int], applied: int, turn: int, limit: int) -> tuple[int, int]:
    """Which adapter set's requests decode in the next step (llama.cpp applies adapters to the
    whole context, so a batch holds one set's requests), and the steps that set has had in a row.
    `sets`: the sets of the running requests, sorted; `applied`: the set on the context now. It
    keeps its turn while it has requests, for `limit` steps when others wait; then the next set
    by index (after the last, the first) takes over."""
    if applied in sets and (len(sets) == 1 or turn < limit):
        return applied, (turn + 1 if len(sets) > 1 else 0)
    return next((i for i in sets if i > applied), sets[0]), 1
