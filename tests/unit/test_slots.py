"""Where a prompt starts in the batched engine: reuse in place, copy from another sequence,
restore a snapshot, or read it all (engine/slots.py)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolserve.engine.base import MediaSpan
from toolserve.engine.prompt_cache import PromptCache
from toolserve.engine.slots import (
    OPENING_MAX,
    PREFILL_CHUNK,
    Plan,
    SeqState,
    Turns,
    adapter_turn,
    boundary,
    chunk_cuts,
    lead,
    next_stop,
    plan,
)

C = PREFILL_CHUNK
A = list(range(1000, 1000 + 3 * C + 10))  # a conversation of 3 whole chunks and a bit
B = list(range(5000, 5000 + 2 * C + 5))  # another one
SHARED = list(range(9000, 9000 + 2 * C))  # a system prompt and tools two chunks long


def seq(i: int, tokens: list[int] | None = None, usable: int | None = None, busy: bool = False, used: int = 0, media: list[MediaSpan] | None = None) -> SeqState:
    """A sequence holding `tokens`, read with the chunks `chunk_cuts` gives them."""
    tokens, media = tokens or [], media or []
    held = len(tokens) if usable is None else usable
    return SeqState(i, list(tokens), held, media, busy, used, cuts=chunk_cuts(tokens, TURNS, media))


def cache() -> PromptCache:
    return PromptCache(1 << 30)


END = 2  # an end-of-turn token
START, NL = 3, 4  # a turn's opening: START (a control token), a role, NL
TURNS = Turns(frozenset({END}), frozenset({START}), lambda t: t == NL)
ENDS = Turns(frozenset({END}))  # end-of-turn tokens alone


def go(seqs: list[SeqState], prompt: list[int], c: PromptCache | None, media: list[MediaSpan] | None = None, adapter: int = 0) -> Plan:
    """`plan` with the prompt's own chunk cuts, as the engine calls it."""
    media = media or []
    return plan(seqs, prompt, chunk_cuts(prompt, TURNS, media), c, adapter)


def test_a_conversation_goes_on_in_the_sequence_that_holds_it() -> None:
    seqs = [seq(0, B, 2 * C, used=2), seq(1, A[: 3 * C], used=1), seq(2)]
    p = go(seqs, [*A, 7, 7], cache())
    assert (p.target, p.reuse, p.source, p.snapshot, p.save) == (1, 3 * C, None, None, False)


def test_a_prefix_held_by_a_busy_sequence_is_copied() -> None:
    seqs = [seq(0, [*SHARED, 1, 2], 2 * C, busy=True), seq(1, B, 2 * C, used=5), seq(2, used=1)]
    p = go(seqs, [*SHARED, 3, 4, 5], cache())
    assert (p.source, p.reuse) == (0, 2 * C)
    assert p.target == 2  # the empty sequence, not the one holding another conversation


def test_reuse_stops_at_a_chunk_boundary_and_before_the_last_token() -> None:
    seqs = [seq(0, A, 3 * C)]
    assert go(seqs, A[: 3 * C], cache()).reuse == 2 * C  # the last token is read again for its logits
    assert go(seqs, A[: 2 * C + 5], cache()).reuse == 2 * C


def test_without_cache_nothing_is_reused() -> None:
    seqs = [seq(0, A, 3 * C, used=3), seq(1, used=1)]
    p = go(seqs, [*A, 1], None)
    assert (p.target, p.reuse, p.source, p.save) == (1, 0, None, False)


def test_a_snapshot_beats_a_shorter_live_prefix() -> None:
    c = cache()
    c.put(A[: 3 * C], 3 * C, b"x" * 10, 10, cuts=chunk_cuts(A[: 3 * C], TURNS))
    seqs = [seq(0, A[:C], C, used=1)]
    p = go(seqs, [*A, 1], c)
    assert p.snapshot is not None and p.reuse == 3 * C and p.target == 0


def test_overwritten_content_is_saved_first_unless_held_elsewhere() -> None:
    seqs = [seq(0, A[: 3 * C], used=1)]
    assert go(seqs, B, cache()).save  # three chunks of A would be lost
    partial = [seq(0, A[:20], usable=0, used=1)]
    assert not go(partial, B, cache()).save  # no whole chunk: nothing reusable is lost
    twice = [seq(0, A[: 3 * C], used=1), seq(1, A[: 3 * C], busy=True)]
    assert not go(twice, B, cache()).save  # the busy sequence holds it too
    c = cache()
    c.put(A[: 3 * C], 3 * C, b"x", 1, cuts=chunk_cuts(A[: 3 * C], TURNS))
    assert not go(seqs, B, c).save  # a snapshot holds it already


def test_least_recently_used_empty_or_idle_sequence_is_the_target() -> None:
    seqs = [seq(0, A[: 3 * C], used=1), seq(1, B[: 2 * C], used=2), seq(2, busy=True)]
    assert go(seqs, SHARED, cache()).target == 0
    seqs.append(seq(3, used=9))
    assert go(seqs, SHARED, cache()).target == 3  # an empty one first: nothing is lost


def test_images_are_reused_whole() -> None:
    img = MediaSpan(start=C - 10, n_tokens=30, n_pos=30, key=-5)
    prompt = [*range(C - 10), *[-5] * 30, *range(50)]
    seqs = [seq(0, prompt[: C + 20 + 10], C + 20, media=[img])]
    p = go(seqs, prompt, cache(), [img])
    assert p.reuse == img.end  # not the chunk boundary inside the image


def images(spans: list[tuple[int, int]]) -> list[MediaSpan]:
    """Images at the given (start, size), moved apart so that they neither touch nor overlap."""
    media: list[MediaSpan] = []
    end = 0
    for start, n in sorted(spans):
        start = max(start, end + 1)
        media.append(MediaSpan(start, n, n, -1 - len(media)))
        end = start + n
    return media


def with_images(text: list[int], media: list[MediaSpan]) -> list[int]:
    """`text` with each image's tokens (its key, repeated) written over its span."""
    out = list(text) + [7] * max(0, max((m.end for m in media), default=0) + 1 - len(text))
    for m in media:
        out[m.start : m.end] = [m.key] * m.n_tokens
    return out


@settings(max_examples=300)
@given(st.lists(st.sampled_from([7, 7, 7, END, START, NL]), max_size=120), st.lists(st.tuples(st.integers(0, 100), st.integers(1, 20)), max_size=3))
def test_chunks_never_cross_an_image_and_stay_within_their_size(text: list[int], spans: list[tuple[int, int]]) -> None:
    media = images(spans)
    prompt = with_images(text, media)
    cuts = chunk_cuts(prompt, TURNS, media, longest=16, least=6, near=30)
    assert cuts == sorted(set(cuts)) and all(0 < c <= len(prompt) for c in cuts)
    for m in media:
        assert not any(m.start < c < m.end for c in cuts)
        assert m.end in cuts and (m.start in cuts or m.start == 0 or m.start - 1 in [x.end - 1 for x in media])
    at = 0
    while at < len(prompt):  # a cold read, chunk by chunk, as the engine does it
        image = next((m for m in media if m.start == at), None)
        stop = image.end if image is not None else next_stop(at, len(prompt), cuts)
        assert at < stop <= len(prompt)
        if image is None:
            assert stop - at <= 16 and not any(at < m.start < stop for m in media)
            short = stop < len(prompt) and stop - at < 16 and stop not in [m.start for m in media]
            if short:  # only a turn's end (or its opening's) cuts a chunk short, far in only once it holds 6 tokens
                assert (prompt[stop - 1] == END or prompt[stop - 1] == NL) and (stop - at >= 6 or at < 30)
        assert boundary(stop, cuts) == stop or stop == len(prompt)
        at = stop


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from([7, 8, END, START, NL]), max_size=80),
    st.lists(st.sampled_from([7, 8, END, START, NL]), max_size=40),
    st.lists(st.sampled_from([7, 9, END, START, NL]), max_size=40),
)
def test_two_prompts_cut_alike_within_their_common_prefix_but_for_its_last_tokens(shared: list[int], tail_a: list[int], tail_b: list[int]) -> None:
    """Where a chunk ends depends on the tokens before it and on at most OPENING_MAX after it."""
    a, b = shared + tail_a, shared + tail_b
    k = len(shared) - OPENING_MAX
    for sizes in [{}, {"longest": 16, "least": 6, "near": 30}, {"longest": 5, "least": 3, "near": 0}]:
        cuts_a, cuts_b = chunk_cuts(a, TURNS, **sizes), chunk_cuts(b, TURNS, **sizes)
        assert [c for c in cuts_a if c <= k] == [c for c in cuts_b if c <= k]


def test_a_turn_ends_after_the_next_turn_s_opening() -> None:
    system = [7] * 10 + [END]
    user = [NL, START, 8, NL, *[7] * 6, END]  # "\n<|im_start|>user\n" ... "<|im_end|>"
    answer = [NL, START, 9, NL]  # the generation prompt's opening of the answer
    prompt = [*system, *user, *answer]
    assert chunk_cuts(prompt, TURNS) == [15, 26]  # after each opening, the prompt's end included
    assert chunk_cuts(prompt, ENDS) == [11, 22]  # with no openings known: after each end-of-turn token
    assert chunk_cuts([*system, 7, 7, START, 8, NL], TURNS) == [11]  # text before the control token: not an opening
    assert chunk_cuts([*system, START, *[8] * OPENING_MAX, NL], TURNS) == [11]  # too long for an opening
    assert chunk_cuts([*system, START, 8], TURNS) == [11]  # an opening cut short by the prompt's end: the turn's end


def test_a_turn_far_into_a_prompt_ends_a_chunk_only_once_it_is_long_enough() -> None:
    cuts = chunk_cuts([*[7] * 600, END, *[7] * 40, END, *[7] * 30, END, 7, 7], TURNS)
    assert cuts == [512, 601, 601 + 41 + 31]  # 40 tokens and a turn end: too short to end a chunk
    near = chunk_cuts([*[7] * 20, END, *[7] * 10, END, 7], TURNS)
    assert near == [21, 32]  # near the start every turn end does


def test_lead_follows_a_common_prefix_only_past_the_start() -> None:
    other = [*SHARED, 1, 2, 3]
    p, mine = [*SHARED, 9, 9], chunk_cuts(other, TURNS)
    assert lead(p, chunk_cuts(p, TURNS), other, mine, 0) == 2 * C
    assert lead(p, chunk_cuts(p, TURNS), other, mine, 2 * C) == 0
    assert lead(B, chunk_cuts(B, TURNS), other, mine, 0) == 0


def test_a_trimmed_conversation_is_saved_before_another_one_goes_on_from_its_prefix() -> None:
    seqs = [seq(0, [*SHARED, *A[: 2 * C]], 4 * C, used=1)]
    p = go(seqs, [*SHARED, *B], cache())
    assert (p.target, p.reuse, p.save) == (0, 2 * C, True)  # the shared prompt stays, A's two chunks go to a snapshot


def test_kv_computed_under_other_adapters_is_never_reused() -> None:
    tuned = seq(1, A[: 3 * C], used=1)
    tuned.adapter = 1
    seqs = [seq(0, used=2), tuned]
    p = go(seqs, [*A, 1], cache())  # the base model: the tuned sequence's KV is worthless
    assert p.reuse == 0 and p.source is None
    p = go(seqs, [*A, 1], cache(), adapter=1)
    assert (p.target, p.reuse) == (1, 3 * C)
    c = cache()
    c.put(A[: 3 * C], 3 * C, b"x", 1, adapter=1, cuts=chunk_cuts(A[: 3 * C], TURNS))
    p = go([seq(0)], [*A, 1], c)
    assert p.snapshot is None and p.reuse == 0
    p = go([seq(0)], [*A, 1], c, adapter=1)
    assert p.snapshot is not None and p.reuse == 3 * C


def test_a_sequence_under_another_adapter_is_snapshotted_under_its_own() -> None:
    tuned = seq(0, A[: 3 * C], used=1)
    tuned.adapter = 1
    base_copy = seq(1, A[: 3 * C], used=2, busy=True)  # the same tokens, under the base weights
    p = go([tuned, base_copy], B, cache())
    assert p.target == 0 and p.save  # the base sequence does not hold what the tuned one would lose


def test_adapter_sets_take_turns() -> None:
    assert adapter_turn([0], 0, 0, 8) == (0, 0)  # alone: no turns counted
    assert adapter_turn([2], 0, 5, 8) == (2, 1)  # the applied set has nothing to run
    assert adapter_turn([0, 1], 0, 3, 8) == (0, 4)
    assert adapter_turn([0, 1], 0, 8, 8) == (1, 1)  # its turn is over: the next set
    assert adapter_turn([0, 1, 3], 3, 8, 8) == (0, 1)  # after the last, the first


@given(st.sets(st.integers(0, 5), min_size=2), st.integers(0, 5), st.integers(1, 8))
def test_running_adapter_sets_each_get_their_turn(running: set[int], start: int, limit: int) -> None:
    sets = sorted(running)
    applied, turn, last = start, 0, {}
    for step in range(limit * len(sets) * 3):
        before = applied
        applied, turn = adapter_turn(sets, applied, turn, limit)
        assert applied in sets and 1 <= turn <= limit
        if applied != before or step == 0:
            assert turn == 1
        last[applied] = step
        assert all(step - last.get(s, -1) <= limit * (len(sets) - 1) + 1 for s in sets if s in last or step >= limit * len(sets))


# -- chunk ends at the ends of chat turns -----------------------------------------------------------


def cold_read(prompt: list[int], media: list[MediaSpan], cuts: list[int]) -> list[int]:
    """Where a cold read of `prompt` ends its chunks (each chunk is one batch)."""
    ends, at = [], 0
    while at < len(prompt):
        span = next((m for m in media if m.start == at), None)
        at = span.end if span is not None else next_stop(at, len(prompt), cuts)
        ends.append(at)
    return ends


def test_a_shared_system_turn_is_reused_with_the_next_turn_s_opening() -> None:
    system = [*[7] * 20, END, NL, START, 8, NL]  # 25 tokens: shorter than a chunk
    a, b = [*system, *[8] * 20, END, NL, START, 9, NL], [*system, *[6] * 25, END, NL, START, 9, NL]
    cuts_a = chunk_cuts(a, TURNS)
    assert cuts_a == [25, 50]
    done = seq(0, a)
    assert done.usable == 50 and done.cuts == cuts_a
    assert go([done], b, cache()).reuse == 25
    assert go([done], [*a, 9, 9, END, NL, START, 8, NL, 5, 5], cache()).reuse == 50  # the next turn: all of the previous prompt


def test_an_agent_turn_far_into_a_conversation_is_read_in_one_chunk_and_reused_whole() -> None:
    history = [7] * 1000 + [END]
    opening = [NL, START, 9, NL]
    call, result = [*[8] * 40, END, NL, START, 8, NL], [*[9] * 150, END]
    turn = [*history, *opening, *call, *result, *opening]  # the call alone is too short to end a chunk
    cuts = chunk_cuts(turn, TURNS)
    assert cold_read(turn, [], cuts)[-2:] == [len(history) + len(opening), len(turn)]
    assert cuts[-1] == len(turn)  # the answer's opening ends the last chunk
    done = seq(0, turn)
    nxt = [*turn, *[8] * 30, END, NL, START, 8, NL, *[9] * 80, END, *opening]
    assert go([done], nxt, cache()).reuse == len(turn)


def test_kv_is_reused_only_up_to_where_both_reads_cut_alike() -> None:
    """A cut that depends on what follows it (an opening, an image start) may be one prompt's
    alone: reuse then stops at the cut before."""
    system = [*[7] * 10, END]
    cached = [*system, NL, START, 8, NL, *[8] * 10]  # its system turn ends after the opening: 15
    other = [*system, *[9] * 20]  # no opening after its system turn: it ends at 11
    assert chunk_cuts(cached, TURNS)[0] == 15 and chunk_cuts(other, TURNS)[0] == 11
    assert go([seq(0, cached)], [*other, 5], cache()).reuse == 0  # they share 11 tokens, but cut them differently
    img = MediaSpan(21, 5, 5, -9)
    text = [*system, *[8] * 20]  # cut at 11 only
    prompt = [*text[:21], *[-9] * 5, 1, 1]  # an image starts at 21, where the two part
    assert chunk_cuts(prompt, TURNS, [img])[:2] == [11, 21]
    assert go([seq(0, text)], prompt, cache(), [img]).reuse == 11  # not 21: the text's read did not end a chunk there
    twin = seq(0, prompt[:26], media=[img])
    assert go([twin], [*prompt, 3], cache(), [img]).reuse == 26  # the same image: reused to its end


def turns(token: int) -> st.SearchStrategy[list[int]]:
    """A run of chat turns (each ending with END, maybe with an opening after it), maybe after an
    opening and before the start of another turn."""
    opening = [NL, START, token, NL]
    one = st.tuples(st.integers(1, 40), st.booleans()).map(lambda t: [token] * (t[0] - 1) + [END] + (opening if t[1] else []))
    return st.tuples(st.booleans(), st.lists(one, max_size=6), st.one_of(st.just(0), st.integers(0, 20))).map(
        lambda t: (opening if t[0] else []) + [x for turn in t[1] for x in turn] + [token] * t[2]
    )


@settings(max_examples=400)
@example([7] * 5 + [END], [NL, START, 8, NL], [9, 9], {})  # one prompt opens a turn where the other does not
@given(turns(7), turns(8), turns(9), st.sampled_from([{}, {"longest": 16, "least": 6, "near": 30}, {"longest": 40, "least": 12, "near": 0}]))
def test_reuse_ends_where_both_prompts_cut_and_they_cut_alike_before(shared: list[int], tail_a: list[int], tail_b: list[int], sizes: dict) -> None:
    """Reusing a conversation's KV for another prompt is exact: the reused prefix ends at a chunk
    end of both cold reads, and below it they cut in the same places."""
    a, b = [*shared, *tail_a], [*shared, *tail_b, 5]
    cuts_a, cuts_b = chunk_cuts(a, TURNS, **sizes), chunk_cuts(b, TURNS, **sizes)
    ends_a, ends_b = cold_read(a, [], cuts_a), cold_read(b, [], cuts_b)
    done = SeqState(0, a, boundary(len(a), cuts_a), cuts=cuts_a)
    assert done.usable == 0 or done.usable in ends_a
    r = plan([done], b, cuts_b, cache()).reuse
    c = PromptCache(1 << 30)
    c.put(a, done.usable, b"x", 1, cuts=cuts_a)
    assert plan([SeqState(0)], b, cuts_b, c).reuse == r  # a snapshot of it offers the same
    if r:
        assert r in ends_a and r in ends_b
        assert [e for e in ends_a if e <= r] == [e for e in ends_b if e <= r]
        assert lead(b, cuts_b, a, cuts_a, 0) >= r
