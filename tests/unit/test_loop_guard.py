"""The loop guard (serving/loops.py): answers whose last WINDOW tokens are one short span repeated
end there; lists, tables, code and short repeats never trip it. Tokens here are the words,
spaces and punctuation of a text, each distinct piece one id (a stand-in for a tokenizer)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.serving.loops import MAX_PERIOD, WINDOW, LoopGuard


def tokens(text: str) -> list[int]:
    ids: dict[str, int] = {}
    return [ids.setdefault(piece, len(ids)) for piece in re.findall(r"\w+|\s+|[^\w\s]", text)]


def cut_at(toks: list[int]) -> int | None:
    """The number of tokens after which the guard ends the answer, or None."""
    guard = LoopGuard()
    for i, t in enumerate(toks, 1):
        if guard.feed(t) is not None:
            return i
    return None


LOOPS = [
    ("a phrase", "A lone soul on the shore. " + "A lone soul, " * 200),
    ("a markup tag", "<tool_call>\n" + "<tool_response>\n\n" * 200),
    ("one token", "Hello " + "!" * 400),
    ("a sentence", "The sea is wide and deep and blue, and it goes on. " * 60),
    ("a code line", "def f():\n" + "    return f()\n" * 100),
]

LEFT_ALONE = [
    ("a numbered list", "".join(f"{i}. item number {i}\n" for i in range(1, 300))),
    ("numbers", ", ".join(str(i) for i in range(1000))),
    ("a table", "| n | square |\n|---|---|\n" + "".join(f"| {i} | {i * i} |\n" for i in range(200))),
    ("repeated code lines, a few", "x = 0\n" * 20 + "print(x)\n"),
    ("a long identical row", "[" + ", ".join(["0"] * 20) + "],\n" * 30),  # a 20-wide zero matrix: row longer than MAX_PERIOD
    ("a short answer repeated once", "Paris is the capital of France. " * 2),
    ("a poem with a refrain", "".join(f"Line {i} of the poem goes here.\nThe sea, the sea.\n" for i in range(80))),
]


@pytest.mark.parametrize(("what", "text"), LOOPS, ids=[w for w, _ in LOOPS])
def test_loops_end(what: str, text: str) -> None:
    toks = tokens(text)
    at = cut_at(toks)
    assert at is not None, what
    assert at <= len(toks)
    guard = LoopGuard()
    for t in toks[:at]:
        found = guard.feed(t)
    assert found is not None and 1 <= found.period <= MAX_PERIOD and found.repeats >= WINDOW // MAX_PERIOD


def test_a_loop_ends_as_soon_as_the_window_is_one_span() -> None:
    toks = [100, 101, 102] + [1, 2, 3, 4] * 100
    assert cut_at(toks) == 3 + WINDOW  # the first moment the last WINDOW tokens repeat one 4-token span


@pytest.mark.parametrize(("what", "text"), LEFT_ALONE, ids=[w for w, _ in LEFT_ALONE])
def test_repetitive_answers_are_left_alone(what: str, text: str) -> None:
    assert cut_at(tokens(text)) is None, what


def periodic(window: list[int]) -> bool:
    return any(all(window[i] == window[i - p] for i in range(p, len(window))) for p in range(1, MAX_PERIOD + 1))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.integers(1, 40)), min_size=1, max_size=12)
)
def test_the_guard_fires_exactly_where_the_tail_is_one_short_span(parts: list[tuple[list[int], int]]) -> None:
    """Against the definition, checked the slow way, on streams of spans repeated at random."""
    toks = [t for span, times in parts for t in span * times]
    expected = next((i for i in range(WINDOW, len(toks) + 1) if periodic(toks[i - WINDOW:i])), None)
    assert cut_at(toks) == expected
