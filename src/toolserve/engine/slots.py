"""Where a new request's prompt starts: pure bookkeeping for the batched engine's sequences.

The engine keeps one llama.cpp context with several sequences (one per running request, at
most `--parallel`). A sequence that finished keeps the KV of its prompt, so that the next turn
of the same conversation finds it; a new request may also copy a prefix out of another sequence
(a shared system prompt and tool list) or restore a snapshot from the prompt cache. This module
decides which; the engine does the KV operations.

Exactness: llama.cpp's numbers depend on the batch they were computed in. Prompts are read in
chunks, at most one chunk per sequence per step, and only whole chunks are reused. Where the
chunks end (`chunk_cuts`) depends only on the tokens before each end, so two prompts sharing a
prefix are cut the same way inside it, and reusing a chunk computes what reading it would. A
chunk ends:
- at an image's start and end (images are evaluated whole);
- just after an end-of-turn token, so that a shared system prompt, tool list or earlier turn is
  reused to its last token; far into a prompt only once the chunk holds TURN_CHUNK_MIN tokens;
- after PREFILL_CHUNK tokens at the latest (what one step reads of a prompt).
With one sequence (`--parallel 1`) that makes a cache hit compute exactly what a miss computes;
with several, the other sequences' rows in the same batch change the rounding, so a hit answers
like a miss only up to rounding (see docs/architecture.md).

Why TURN_CHUNK_MIN: on CPU, llama.cpp's flash attention takes a tiled path from 64 query rows
on, and reads the whole KV once per row below that. 61 tokens after a 3,114-token prefix took
437 ms, 64 tokens 280 ms (SmolLM2-135M, 2 threads). So far into a long prompt, a turn end that
would leave a chunk shorter than that does not end it; near the start it still does (the cost is
small there, and a short shared system prompt is then reused).

LoRA: a prompt run under one adapter set never reuses KV computed under another (`adapter`,
the engine's index of the set, is part of what must match).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from toolserve.engine.base import MediaSpan
from toolserve.engine.prompt_cache import CacheEntry, PromptCache, common_prefix

PREFILL_CHUNK = 512  # the longest prompt chunk: what one step reads of one prompt
TURN_CHUNK_MIN = 64  # far into a prompt, a turn end ends a chunk only once it is this long
NEAR_START = 512  # ... and a chunk starting before this index ends at any turn end
SAVE_MIN_DISCARD = 32  # snapshot a sequence's KV before it is overwritten only when this many tokens would be lost


def chunk_cuts(
    prompt: Sequence[int],
    turn_ends: frozenset[int] | set[int],
    media: Sequence[MediaSpan] = (),
    longest: int = PREFILL_CHUNK,
    least: int = TURN_CHUNK_MIN,
    near: int = NEAR_START,
) -> list[int]:
    """Where the chunks of a prompt end, ascending (the prompt's own end is not one, unless a rule
    puts one there): whether there is a cut at `c` depends only on the tokens before `c`, and on
    whether an image starts at `c`. `longest`, `least`, `near`: PREFILL_CHUNK, TURN_CHUNK_MIN
    and NEAR_START (tests shrink them)."""
    n = len(prompt)
    images = {m.start: m.end for m in media}
    cuts: list[int] = []
    start = i = 0
    while i < n:
        if i in images:
            if i > start:
                cuts.append(i)
            start = i = images[i]
            cuts.append(i)
            continue
        i += 1
        size = i - start
        if size >= longest or (prompt[i - 1] in turn_ends and (size >= least or start < near)):
            cuts.append(i)
            start = i
    return cuts


def boundary(limit: int, cuts: Sequence[int]) -> int:
    """The longest prefix of at most `limit` prompt tokens that a fresh read computes in the same
    batches: the last of the prompt's `chunk_cuts` up to `limit`, or 0."""
    return cuts[bisect.bisect_right(cuts, limit) - 1] if cuts and cuts[0] <= limit else 0


def next_stop(at: int, length: int, cuts: Sequence[int]) -> int:
    """Where the prompt chunk that starts at `at` (outside any image) ends: the prompt's next cut,
    or its end."""
    i = bisect.bisect_right(cuts, at)
    return min(cuts[i], length) if i < len(cuts) else length


def position(index: int, media: Sequence[MediaSpan]) -> int:
    """Context position of prompt index `index` (not inside an image): images under M-RoPE take
    fewer positions than tokens."""
    return index - sum(m.n_tokens - m.n_pos for m in media if m.end <= index)


def reach(prompt: Sequence[int], media: Sequence[MediaSpan], cuts: Sequence[int], held: Sequence[int], n: int) -> int:
    """How much of `prompt` may start from KV that holds the tokens `held`, of which the first
    `n` are whole chunks shared with the prompt: the last of the prompt's cuts up to `n` that is a
    chunk end of `held`'s read too, and before the prompt's last token (read again for its
    logits). Below `n` the two reads cut alike; at `n` itself a cut that depends on what follows
    (an image starting there) may be the prompt's alone."""
    best = boundary(min(n, len(prompt) - 1), cuts)
    if best < len(held) and held[best] != prompt[best] and any(m.start == best for m in media):
        best = boundary(best - 1, cuts)  # held's chunk may run on past where the prompt's image starts
    return best


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
    cuts: Sequence[int],
    cache: PromptCache | None,
    adapter: int = 0,
) -> Plan:
    """Choose the idle sequence a prompt runs in and the longest exact prefix it can start from,
    among KV computed under the same `adapter` set; `cuts` are the prompt's `chunk_cuts`. `seqs`
    must hold at least one idle sequence.
    With no cache (`--cache-ram 0`) nothing is reused."""
    idle = [s for s in seqs if not s.busy]
    if not idle:
        raise ValueError("no idle sequence")

    def exact(n: int, held: Sequence[int]) -> int:
        return reach(prompt, media, cuts, held, n)

    if cache is None:
        target = min(idle, key=lambda s: s.used)
        return Plan(target.id, 0)
    # the best live source: an idle sequence is reused in place, a busy one is copied from
    best_live = max(seqs, key=lambda s: (exact(s.reusable(prompt, adapter), s.tokens), not s.busy))
    live = exact(best_live.reusable(prompt, adapter), best_live.tokens)
    entry, entry_len = cache.best(prompt, adapter)
    from_snapshot = entry is not None and exact(entry_len, entry.tokens) > live
    if not from_snapshot and live > 0 and not best_live.busy:
        target = best_live  # the conversation goes on where it is
    else:  # the idle sequence whose content is worth least: empty, else least recently used
        target = min(idle, key=lambda s: (s.usable > 0, s.used))
    keep = exact(target.reusable(prompt, adapter), target.tokens)
    save = target.usable - keep >= SAVE_MIN_DISCARD and not cache.covers(target.tokens, target.usable, target.adapter) and not any(
        o is not target and o.reusable(target.tokens, target.adapter) >= target.usable for o in seqs
    )
    if from_snapshot:
        assert entry is not None
        return Plan(target.id, exact(entry_len, entry.tokens), snapshot=entry, save=save)
    if live > keep:
        return Plan(target.id, live, source=best_live.id, save=save)
    return Plan(target.id, keep, save=save)


def lead(prompt: Sequence[int], media: Sequence[MediaSpan], cuts: Sequence[int], other: Sequence[int], start: int) -> int:
    """How far a prompt can follow another prompt being read now (whose prefix the engine can
    copy instead of computing it twice): the exact boundary of their common prefix, if it goes
    beyond `start`, else 0."""
    n = reach(prompt, media, cuts, other, common_prefix(prompt, other))
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
