"""Stop strings and UTF-8 streaming: the same result whatever the split of the input."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve.serving.text import StopMatcher, Utf8Stream


def run_stops(pieces: list[str], stops: list[str]) -> tuple[str, bool]:
    m = StopMatcher(stops)
    out = []
    for p in pieces:
        out.append(m.feed(p))
        if m.stopped:
            return "".join(out), True
    out.append(m.flush())
    return "".join(out), m.stopped


def reference(text: str, stops: list[str]) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["Hello", " wor", "ld"], ["world"], ("Hello ", True)),
        (["ab", "c"], ["bc"], ("a", True)),
        (["a", "b", "x"], ["bc"], ("abx", False)),
        (["one\n\n", "two"], ["\n\n"], ("one", True)),
        (["xx<|end", "|>yy"], ["<|end|>", "zz"], ("xx", True)),
        (["stop at start"], ["stop"], ("", True)),
        (["no stops"], [], ("no stops", False)),
        (["ab"], ["b", "ab"], ("", True)),  # the earliest match wins
        (["tail a"], ["ab"], ("tail a", False)),  # a held tail is released at the end
        (["|", "|", "b", "é"], ["||bé", "b"], ("", True)),  # a longer stop that starts earlier wins
        (["x|", "|b"], ["||bé", "b"], ("x||", True)),  # ... only if it completes (here at the end)
    ],
)
def test_stop_table(pieces: list[str], stops: list[str], expected: tuple[str, bool]) -> None:
    assert run_stops(pieces, stops) == expected


def test_holds_back_only_a_possible_stop_prefix() -> None:
    m = StopMatcher(["</end>"])
    assert m.feed("text </e") == "text "
    assert m.feed("x") == "</ex"


def _splits(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


alphabet = st.sampled_from(list("ab<|>\n é"))


@given(st.text(alphabet, max_size=40), st.lists(st.text(alphabet, min_size=1, max_size=4), max_size=3), st.lists(st.integers(0, 100), max_size=10))
def test_stop_split_invariance(text: str, stops: list[str], cuts: list[int]) -> None:
    assert run_stops(_splits(text, cuts), stops) == reference(text, stops)


@given(st.text(max_size=30).filter(lambda t: "\ufffd" not in t), st.lists(st.integers(0, 200), max_size=12))
def test_utf8_never_splits_a_character(text: str, cuts: list[int]) -> None:
    data = text.encode("utf-8")
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    dec = Utf8Stream()
    pieces = [dec.feed(data[a:b]) for a, b in itertools.pairwise(bounds)] + [dec.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)  # no replacement characters from a split
