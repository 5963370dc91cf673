"""The n-gram drafter of speculative decoding (engine/speculative.py): pure, tested with lists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.engine.speculative import DRAFT_MAX, DRAFT_MIN, Budget, Drafter

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
