"""The n-gram drafter of speculative decoding (engine/speculative.py): pure, tested with lists."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.engine.speculative import (
    CPU_COSTS,
    DRAFT_MAX,
    DRAFT_MIN,
    HISTORY_LEAD,
    SURE_MATCH,
    Budget,
    Drafter,
    History,
    Worth,
)

CASES = [
    # (context, limit, draft)
    ([1, 2, 3, 4, 5, 6], 4, []),  # nothing repeats
    ([1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4], 3, [5, 6, 7]),  # the last 4 tokens appeared before: what followed
    ([1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4], 10, [5, 6, 7, 1, 2, 3, 4, 5, 6, 7]),  # on into the draft itself
    ([9, 2, 3, 4, 5, 1, 2, 3, 4], 3, []),  # agreement of 3 < MATCH_MIN (4): the 9 differs from the 1
    ([1, 2, 3, 4, 5, 8, 1, 2, 3, 4, 6, 8, 1, 2, 3, 4], 2, [6, 8]),  # two candidates agreeing as far: the latest
    ([7, 1, 2, 3, 4, 5, 0, 7, 1, 2, 3, 4, 6, 9, 7, 1, 2, 3, 4], 2, [6, 9]),  # equal agreement (5): the latest
    ([0, 7, 1, 2, 3, 4, 5, 9, 7, 1, 2, 3, 4, 6, 0, 7, 1, 2, 3, 4], 2, [5, 9]),  # longer agreement wins over recency
    ([1, 2, 3, 4, 5, 1, 2, 3, 4], 0, []),  # no room
    ([-5, 2, 3, 4, 5, -5, 2, 3, 4], 4, [5]),  # an image's stand-in id is never drafted
    ([1, 1, 1, 1, 1, 1], 3, [1, 1, 1]),  # a run: the period continues
    ([1, 2, 1, 2, 1, 2, 1, 2], 4, [1, 2, 1, 2]),
]


@pytest.mark.parametrize(("context", "limit", "draft"), CASES)
def test_draft(context: list[int], limit: int, draft: list[int]) -> None:
    assert Drafter(context).draft(limit) == draft


def test_a_draft_follows_tokens_as_they_come() -> None:
    d = Drafter([10, 11, 12, 13, 14, 15, 16, 17])
    assert d.draft(4) == []
    d.extend([10, 11, 12])
    assert d.draft(4) == []  # three tokens agree: too few
    d.extend([13])
    assert d.draft(4) == [14, 15, 16, 17]
    d.extend([14, 99])
    assert d.draft(4) == []  # the copy departed from its source


def test_budget_doubles_on_a_whole_draft_and_shrinks_after_a_miss() -> None:
    b = Budget(start=8)
    b.update(8, 8)
    assert b.limit == 16
    b.update(16, 16)
    b.update(32, 32)
    assert b.limit == DRAFT_MAX
    b.update(32, 5)
    assert b.limit == 6
    b.update(6, 0)
    assert b.limit == DRAFT_MIN
    b.update(0, 0)  # no draft: nothing learnt
    assert b.limit == DRAFT_MIN


AGREED = [
    # (context, how far the source drafted from agreed with the context's end)
    ([1, 2, 3, 4, 5, 6], 0),  # no draft
    ([1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4], 4),  # the earlier 1 2 3 4 starts the context
    ([0, 7, 1, 2, 3, 4, 5, 9, 7, 1, 2, 3, 4, 6, 0, 7, 1, 2, 3, 4], 6),  # 0 7 1 2 3 4 agrees further than 7 1 2 3 4
    ([9, 2, 3, 4, 5, 1, 2, 3, 4], 0),  # 3 agree: too few to draft
]


@pytest.mark.parametrize(("context", "agreed"), AGREED)
def test_a_draft_says_how_far_its_source_agreed(context: list[int], agreed: int) -> None:
    d = Drafter(context)
    d.draft(4)
    assert d.agreed == agreed


def test_the_chance_of_a_draft_token_starts_from_its_agreement_and_follows_the_drafts_kept() -> None:
    b = Budget()
    assert b.chance(4) == pytest.approx(0.8) and b.chance(24) == pytest.approx(0.96)
    b.update(8, 0)  # one token compared, none kept
    assert b.chance(4) == pytest.approx((0 + 2 * 0.8) / (1 + 2))
    b.update(8, 8)  # eight compared, eight kept
    assert b.chance(4) == pytest.approx((8 + 2 * 0.8) / (9 + 2))


# seconds of a decode of n tokens (a token and its draft) on a 2-core AMD EPYC: Qwen2.5-Coder-0.5B
# Q4_K_M on the CPU, and a GPU-like engine where rows come nearly free
CPU = {1: 0.0211, 2: 0.0358, 3: 0.0424, 5: 0.0651, 9: 0.0959, 17: 0.1441}
GPU = {1: 0.010, 2: 0.0101, 3: 0.0102, 5: 0.0103, 9: 0.0105, 17: 0.011}
KEEP = [
    # (costs, draft length, chance, tokens kept)
    (CPU, 8, 0.33, 0),  # prose: a third kept does not pay for even one row
    (CPU, 8, 0.6, 0),
    (CPU, 8, 0.8, 2),  # 1 + 0.8 + 0.64 expected tokens for 2.0x the time
    (CPU, 8, 0.9, 6),
    (CPU, 16, 0.98, 16),  # a copy: the whole draft
    (GPU, 8, 0.33, 4),  # rows nearly free: a prose draft pays too
    (GPU, 8, 0.6, 8),
    (GPU, 64, 0.9, 28),  # against 6 on the CPU
    (GPU, 64, 0.98, 64),
    (GPU, 8, 0.0, 0),  # nothing can be kept
]


def test_the_cpus_costs_grow_with_the_rows_and_stop_prose_drafts() -> None:
    sizes = sorted(CPU_COSTS)
    assert sizes[0] == 1 and CPU_COSTS[1] == 1.0
    assert all(CPU_COSTS[a] < CPU_COSTS[b] <= b for a, b in itertools.pairwise(sizes))  # no more than as many lone tokens
    w = Worth(CPU_COSTS)
    assert w.keep(8, 0.33) == 0 and w.keep(16, 0.98) == 16


@pytest.mark.parametrize(("costs", "length", "chance", "kept"), KEEP)
def test_a_draft_is_cut_to_what_pays_for_its_rows(costs: dict[int, float], length: int, chance: float, kept: int) -> None:
    assert Worth(costs).keep(length, chance) == kept


def test_sizes_not_timed_lie_on_the_line_between_those_timed_and_on_the_last_slope_beyond() -> None:
    w = Worth({1: 1.0, 3: 3.0, 5: 4.0})
    assert w.ratio[:8] == pytest.approx([0.0, 1.0, 2.0, 3.0, 3.5, 4.0, 4.5, 5.0])
    assert len(w.ratio) == DRAFT_MAX + 2
    assert Worth({1: 1.0, 2: 1.5, 3: 1.2}).ratio[3] == 1.5  # more rows never cost less
    assert Worth({1: 1.0, 2: 17.0, 5: 47.0}).ratio[2:6] == [2.0, 3.0, 4.0, 5.0]  # nor more than as many lone tokens
    assert Worth({1: 1.0}).ratio[9] == 1.0  # only a lone token's cost given: rows taken as free
    with pytest.raises(ValueError):
        Worth({2: 1.0, 3: 2.0})


def rate(w: Worth, k: int, chance: float) -> float:
    return sum(chance**i for i in range(k + 1)) / w.ratio[k + 1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=5, max_size=5), st.integers(0, 64), st.integers(0, 100), st.integers(0, 100))
def test_the_draft_kept_brings_the_most_tokens_in_time_and_grows_with_the_chance(
    steps: list[int], length: int, low: int, high: int
) -> None:
    costs = {n: 1000.0 + sum(steps[:i]) for i, n in enumerate((1, 2, 3, 9, 17, 33))}
    w = Worth(costs)
    lo, hi = sorted((low / 100, high / 100))
    k = w.keep(length, lo)
    assert 0 <= k <= length
    best = max([1.0, *(rate(w, j, lo) for j in range(1, length + 1))])
    assert (1.0 if k == 0 else rate(w, k, lo)) >= best - 1e-6  # (drafts past a chance**k of 1e-4 add nothing)
    assert w.keep(length, hi) >= k


tokens = st.lists(st.integers(0, 5), max_size=80)


@settings(max_examples=300, deadline=None)
@given(tokens, st.integers(0, 40))
def test_a_draft_continues_an_earlier_occurrence_of_the_end(context: list[int], limit: int) -> None:
    """Whatever the context, a draft is what followed an earlier place whose last MATCH_MIN
    tokens equal the context's last ones (read on into the draft itself past the context's
    end), and it is never longer than asked."""
    d = Drafter(context)
    draft = d.draft(limit)
    assert len(draft) <= limit
    if draft:
        n, m, ext = len(context), d.match_min, context + draft
        sources = [s for s in range(m, n) if context[s - m : s] == context[n - m :] and ext[s : s + len(draft)] == draft]
        assert sources, (context, draft)


@settings(max_examples=300, deadline=None)
@given(tokens, st.integers(0, 80), st.integers(1, 20))
def test_extending_in_pieces_drafts_as_indexing_at_once(context: list[int], cut: int, limit: int) -> None:
    whole = Drafter(context)
    pieces = Drafter(context[:cut])
    for i in range(cut, len(context), 3):
        pieces.extend(context[i : i + 3])
    assert pieces.draft(limit) == whole.draft(limit)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=4, max_size=30, unique=True), st.integers(1, 30))
def test_a_repeated_text_drafts_its_own_continuation(text: list[int], limit: int) -> None:
    """A text (no token twice) said once and then again up to some point: the draft is the rest
    of it and on (the text said a third time), as far as the limit allows."""
    for said in range(4, len(text)):
        draft = Drafter(text + text[:said]).draft(limit)
        assert draft == (text * (2 + limit // len(text)))[said : said + limit]


# -- the history of earlier answers -----------------------------------------------------------

ANSWER = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]


def test_a_request_asked_again_drafts_its_earlier_answer() -> None:
    history = History()
    prompt = [1, 2, 3, 4, 5, 6]
    first = Drafter(prompt, history=history)
    first.extend(ANSWER)
    history.add(first.answer(len(prompt)))
    again = Drafter(prompt, history=history)
    assert again.draft(4) == ANSWER[:4]  # the prompt's end agrees with what led to that answer
    assert again.draft(50) == ANSWER  # and no further than that answer went
    assert Drafter(prompt).draft(4) == []  # without the history there is nothing to go on


def test_the_history_keeps_an_answer_with_the_end_of_its_prompt() -> None:
    prompt = list(range(100, 100 + HISTORY_LEAD + 10))
    d = Drafter(prompt)
    assert d.answer(len(prompt)) == []  # nothing answered: nothing kept
    d.extend([7, 8])
    assert d.answer(len(prompt)) == [*prompt[-HISTORY_LEAD:], 7, 8]


def test_history_or_context_the_longer_agreement_wins() -> None:
    history = History()
    history.add([9, 9, 1, 2, 3, 4, 70, 71])  # agrees with the context's end on 4 tokens
    context = [5, 6, 7, 1, 2, 3, 4, 80, 81, 0, 5, 6, 7, 1, 2, 3, 4]  # its own earlier occurrence: 7
    assert Drafter(context, history=history).draft(2) == [80, 81]
    history.add([0, 5, 6, 7, 1, 2, 3, 4, 90, 91])  # now the history agrees as far (8 > 7)
    assert Drafter(context, history=history).draft(2) == [90, 91]


def test_on_equal_agreement_the_history_unless_its_draft_is_shorter() -> None:
    history = History()
    history.add([5, 6, 1, 2, 3, 4, 60, 61, 62])
    context = [7, 6, 1, 2, 3, 4, 50, 51, 52, 53, 8, 6, 1, 2, 3, 4]  # both agree on 5 tokens
    assert Drafter(context, history=history).draft(3) == [60, 61, 62]  # an earlier answer
    assert Drafter(context, history=history).draft(4) == [50, 51, 52, 53]  # the history's ends at 3


def test_a_draft_never_crosses_from_one_remembered_text_into_the_next() -> None:
    history = History()
    history.add([1, 2, 3, 4, 5])
    history.add([6, 7, 8])
    assert Drafter([0, 1, 2, 3, 4], history=history).draft(10) == [5]


def test_a_full_history_forgets_its_oldest_half() -> None:
    history = History(limit=40)
    for i in range(10):
        history.add([i] * 6 + [100 + i])
    kept = history.index.tokens
    assert len(kept) <= 40
    assert 109 in kept and 100 not in kept
    assert Drafter([9] * 6, history=history).draft(1) == [109]  # the newest text is there
    assert Drafter([1, 2, 3, 8, 8, 8, 8], history=history).draft(10)[-1] == 108
    history.add(list(range(1000, 1100)))  # longer than the whole history: its end is kept
    assert history.index.tokens[-20:] == list(range(1080, 1100)) and len(history.index.tokens) <= 40


@settings(max_examples=300, deadline=None)
@given(tokens, st.lists(tokens, max_size=4), st.integers(0, 40))
def test_a_draft_with_a_history_continues_an_earlier_occurrence(context: list[int], texts: list[list[int]], limit: int) -> None:
    """Whatever the context and the history, a draft is what followed an occurrence, in the
    context (read on into the draft) or in one remembered text, whose last MATCH_MIN tokens
    equal the context's last ones."""
    history = History()
    for text in texts:
        history.add(text)
    d = Drafter(context, history=history)
    draft = d.draft(limit)
    assert len(draft) <= limit
    if draft:
        n, m, ext = len(context), d.match_min, context + draft
        own = [s for s in range(m, n) if context[s - m : s] == context[n - m :] and ext[s : s + len(draft)] == draft]
        past = [s for t in texts for s in range(m, len(t)) if t[s - m : s] == context[n - m :] and t[s : s + len(draft)] == draft]
        assert own or past, (context, texts, draft)


def test_an_earlier_answer_agreeing_far_is_drafted_as_far_as_sure_allows() -> None:
    history = History()
    lead = list(range(100, 100 + SURE_MATCH))
    history.add([*lead, *ANSWER])
    assert Drafter(lead, history=history).draft(2, sure=6) == ANSWER[:6]  # agrees on SURE_MATCH tokens
    assert Drafter(lead[1:], history=history).draft(2, sure=6) == ANSWER[:2]  # one short: the budget's limit
    own = Drafter([*lead, 7, *lead])  # the context's own source agrees as far, without a history
    assert own.draft(2, sure=6) == [7, *lead[:1]]


def test_among_sources_agreeing_as_far_the_latest_with_room_for_the_draft() -> None:
    """A repeating answer: every period agrees as far, and the one nearest the end of that text
    leaves no room; of those with room for the whole draft, the latest."""
    history = History()
    history.add([1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3, 4, 7, 1, 2, 3, 4])
    assert Drafter([9, 1, 2, 3, 4], history=history).draft(2) == [7, 1]
    assert Drafter([9, 1, 2, 3, 4], history=history).draft(5) == [7, 1, 2, 3, 4]
    assert Drafter([9, 1, 2, 3, 4], history=history).draft(6) == [6, 1, 2, 3, 4, 7]
