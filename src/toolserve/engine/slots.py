"""Where a new request's prompt starts: pure bookkeeping for the batched engine's sequences.

The engine keeps one llama.cpp context with several sequences (one per running request, at
most `--parallel`). A sequence that finished keeps the KV of its prompt, so that the next turn
of the same conversation finds it; a new request may also copy a prefix out of another sequence
(a shared system prompt and tool list) or restore a snapshot from the prompt cache. This module
decides which; the engine does the KV operations.

Exactness: llama.cpp's numbers depend on the batch they were computed in. Prompts are read in
chunks, at most one chunk per sequence per step, and only whole chunks are reused. A chunk ends
(`chunk_cuts`):
- at an image's start and end (images are evaluated whole);
- at the end of a chat turn, so that a shared system prompt, tool list or earlier turn is
  reused to its last token: just after the next turn's opening when one follows the
  end-of-turn token (`<|im_end|>\n<|im_start|>user\n`: the opening is shared too, and a
  generation prompt ends with one, so a conversation's next request reuses all of the previous
  prompt), else just after the end-of-turn token. Far into a prompt a turn ends a chunk only
  once the chunk holds TURN_CHUNK_MIN tokens;
- after PREFILL_CHUNK tokens at the latest (what one step reads of a prompt).
KV is reused up to a cut only where the two reads, the one that computed it and the one of the
new prompt, cut alike up to that point (`reach`): they then read that prefix in the same
batches. Where a cut lies depends on the tokens before it and a few after it (an opening, an
image start), so two prompts that share a prefix cut alike within it but for its last tokens.
The prompt's own end is not reused (its last token is read again for its logits), except by the
same prompt sent again: the sequence that read it whole keeps that read's last logits
(`SeqState.whole`, `logits`), so nothing is read (engine/scheduler.py; from a copy where that
sequence is still answering).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolserve.engine.base import MediaSpan
from toolserve.engine.prompt_cache import CacheEntry, PromptCache, common_prefix

PREFILL_CHUNK = 512  # the longest prompt chunk: what one step reads of one prompt
TURN_CHUNK_MIN = 64  # far into a prompt, a turn ends a chunk only once it is this long
NEAR_START = 512  # ... and a chunk starting before this index ends at any turn's end
OPENING_MAX = 8  # the longest turn opening looked for after an end-of-turn token
SAVE_MIN_DISCARD = 32  # snapshot a sequence's KV before it is overwritten only when this many tokens would be lost


@dataclass(frozen=True)
class Turns:
    """How a vocabulary marks chat turns: `ends`, its end-of-generation tokens; a turn's opening
    is a control token (`<|im_start|>`, `<start_of_turn>`, `<|start_header_id|>`) and the tokens
    after it up to the first one holding a newline (`newline`)."""

    ends: frozenset[int]
    controls: frozenset[int] = frozenset()
    newline: Callable[[int], bool] = lambda token: False


def opening(prompt: Sequence[int], at: int, turns: Turns, stop: int) -> int:
    """Where the turn opening that starts at `at` (just after an end-of-turn token) ends, or
    `at` when none starts there: within OPENING_MAX tokens and before `stop`, newlines at most,
    a control token, then anything up to a token holding a newline, with no end-of-turn token
    between."""
    control = False
    for i in range(at, min(at + OPENING_MAX, stop)):
        t = prompt[i]
        if t in turns.ends:
            break
        if t in turns.controls:
            control = True
        elif turns.newline(t):
            if control:
                return i + 1
        elif not control:
            break  # text, not a turn's opening
    return at


def chunk_cuts(
    prompt: Sequence[int],
    turns: Turns,
    media: Sequence[MediaSpan] = (),
    longest: int = PREFILL_CHUNK,
    least: int = TURN_CHUNK_MIN,
    near: int = NEAR_START,
) -> list[int]:
    """Where the chunks of a prompt end, ascending. The prompt's own end is not one, unless a
    rule puts one there (a generation prompt ending with the answer's opening). `longest`,
    `least`, `near`: PREFILL_CHUNK, TURN_CHUNK_MIN and NEAR_START (tests shrink them)."""
    n = len(prompt)
    images = {m.start: m.end for m in media}
    cuts: list[int] = []
    start = i = 0
    turn_end = -1  # where the turn being closed ends (just after its opening's last token)
    while i < n:
        if i in images:
            if i > start:
                cuts.append(i)
            start = i = images[i]
            cuts.append(i)
            turn_end = -1
            continue
        i += 1
        if prompt[i - 1] in turns.ends:
            stop = min([n, *(m.start for m in media if m.start >= i)])
            turn_end = opening(prompt, i, turns, stop)
        size = i - start
        if size >= longest or (i == turn_end and (size >= least or start < near)):
            cuts.append(i)
            start = i
        if i >= turn_end:
            turn_end = -1
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


def reach(prompt: Sequence[int], cuts: Sequence[int], held: Sequence[int], n: int) -> int:
    """How much of `prompt` (its chunks ending at `cuts`) may start from KV read with chunk ends
    `held`, of which the first `n` tokens are shared with the prompt: the last cut up to `n`,
    and before the prompt's last token (read again for its logits), before which the two reads
    cut alike (so that they read that prefix in the same batches)."""
    n = min(n, len(prompt) - 1)
    best = 0
    for mine, theirs in zip(cuts, held, strict=False):
        if mine != theirs or mine > n:
            break
        best = mine
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
    cuts: list[int] = field(default_factory=list)  # where the read that computed them ended its chunks
    # a prompt read through to its end here, and the logits of its last token from that read:
    # the same prompt again starts from them with nothing to read (engine/scheduler.py)
    whole: int = 0
    logits: Any = None

    def reusable(self, prompt: Sequence[int], adapter: int = 0) -> int:
        if adapter != self.adapter:
            return 0
        return min(common_prefix(self.tokens, prompt), self.usable)

    def exact(self, prompt: Sequence[int], cuts: Sequence[int], adapter: int = 0) -> int:
        """How much of `prompt` (chunks ending at `cuts`) may start from this sequence's KV."""
        return reach(prompt, cuts, self.cuts, self.reusable(prompt, adapter))


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
    if cache is None:
        target = min(idle, key=lambda s: s.used)
        return Plan(target.id, 0)
    # the best live source: an idle sequence is reused in place, a busy one is copied from
    best_live = max(seqs, key=lambda s: (s.exact(prompt, cuts, adapter), not s.busy))
    live = best_live.exact(prompt, cuts, adapter)
    entry, from_entry = cache.best(prompt, adapter, lambda held, n: reach(prompt, cuts, held, n))
    from_snapshot = entry is not None and from_entry > live
    if not from_snapshot and live > 0 and not best_live.busy:
        target = best_live  # the conversation goes on where it is
    else:  # the idle sequence whose content is worth least: empty, else least recently used
        target = min(idle, key=lambda s: (s.usable > 0, s.used))
    keep = target.exact(prompt, cuts, adapter)
    save = target.usable - keep >= SAVE_MIN_DISCARD and not cache.covers(target.tokens, target.usable, target.adapter) and not any(
        o is not target and o.reusable(target.tokens, target.adapter) >= target.usable for o in seqs
    )
    if from_snapshot:
        assert entry is not None
        return Plan(target.id, from_entry, snapshot=entry, save=save)
    if live > keep:
        return Plan(target.id, live, source=best_live.id, save=save)
    return Plan(target.id, keep, save=save)


def lead(prompt: Sequence[int], cuts: Sequence[int], other: Sequence[int], other_cuts: Sequence[int], start: int) -> int:
    """How far a prompt can follow another prompt being read now (whose prefix the engine can
    copy instead of computing it twice): the exact reach of their common prefix, if it goes
    beyond `start`, else 0."""
    n = reach(prompt, cuts, other_cuts, common_prefix(prompt, other))
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
