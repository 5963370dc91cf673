"""Hostile model output through every family's parser (issue 31): random text, the family's own
markers in any order and left unclosed, arguments nested 10,000 levels deep, and 1 MB inputs.

No parser may raise, and the whole text and any split of it must give the same message. The
deep cases also check the result is sane: every call's arguments are a JSON object that a
recursive reader can load (nesting bounded by `MAX_DEPTH`). How fast this runs is measured by
bench/parse_speed.py, never asserted here.

The builders of hostile inputs below are shared with that bench.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolserve.formats.jsonstream import MAX_DEPTH
from toolserve.formats.registry import FORMATS

from .formats_fixtures import SYNTAX
from .test_formats_conformance import check_contract
from .test_formats_fuzz import normalised, parse

FAMILIES = sorted(FORMATS)
DEEP = 10_000
SENTINEL = 7654321  # an argument every syntax writes as itself, replaced by a hostile value
M3_NS = "]<]minimax[>["
RANDOM_ALPHABET = "abcdefghij klmnop  \n{}[]<>\"':,=()|/\\_0123456789"


# ---- hostile inputs (also used by bench/parse_speed.py) ---------------------------------


def call_text(fmt_id: str, args: dict[str, Any], count: int = 1) -> str:
    """`count` calls of the `record` tool in the family's wire syntax, as one block."""
    sx = SYNTAX[fmt_id]
    return sx.block([sx.call("record", args, i) for i in range(count)])


def markers(fmt_id: str) -> list[str]:
    """Every marker the family's grammar reacts to."""
    g = FORMATS[fmt_id].GRAMMAR
    found = [t.marker for t in g.triggers] + [*g.reasoning_open, *g.reasoning_close, *g.drop, *(g.answer_wrap or ())]
    return [m for m in found if m]


def with_value(fmt_id: str, value: str) -> str:
    """One call whose object argument `o` is `value`, written as raw text in the family's syntax."""
    text = call_text(fmt_id, {"s": "x", "o": SENTINEL})
    assert str(SENTINEL) in text
    return text.replace(str(SENTINEL), value)


def repeat(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def repeated_markers(fmt_id: str, size: int) -> str:
    return repeat("".join(t.marker for t in FORMATS[fmt_id].GRAMMAR.triggers), size)


def repeated_unclosed(fmt_id: str, size: int) -> str:
    one = call_text(fmt_id, {"s": "abcdefgh", "i": 12345, "o": {"k": [1, 2]}})
    return repeat(one[:len(one) * 2 // 3], size)


def random_text(fmt_id: str, size: int) -> str:
    return "".join(random.Random(31).choices(RANDOM_ALPHABET, k=size))


def deep_call(fmt_id: str, size: int) -> str:
    depth = size // 2
    return with_value(fmt_id, "[" * depth + "]" * depth)


def long_call(fmt_id: str, size: int) -> str:
    return call_text(fmt_id, {"s": repeat("lorem ipsum ", size)})


def many_calls(fmt_id: str, size: int) -> str:
    one = call_text(fmt_id, {"s": "x y", "i": 42})
    return call_text(fmt_id, {"s": "x y", "i": 42}, count=max(1, size // len(one)))


HOSTILE = {"markers": repeated_markers, "unclosed": repeated_unclosed, "random": random_text, "deep": deep_call,
           "long": long_call, "calls": many_calls}


# ---- checks -----------------------------------------------------------------------------


def depth_of(value: Any) -> int:
    """Nesting depth of a JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def split_at(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def same_whole_and_split(fmt_id: str, text: str, pieces: list[str], tools: bool = True,
                         thinking_open: bool = False) -> tuple[str, list[tuple[str, str]]]:
    """Parses `text` whole and in `pieces`: no exception, the delta contract, the same message.
    Returns its content and its calls (name, arguments)."""
    assert "".join(pieces) == text
    whole = parse(fmt_id, [text], tools, thinking_open)
    split = parse(fmt_id, pieces, tools, thinking_open)
    check_contract(whole)
    check_contract(split)
    msg = normalised(whole)
    assert normalised(split) == msg
    return msg[0], msg[2]


def _not_json(name: str) -> None:
    raise AssertionError(f"{name} in arguments: not standard JSON")


def assert_sane(calls: list[tuple[str, str]]) -> None:
    """Every call's arguments are a standard JSON object (no NaN or Infinity) that nests no
    deeper than MAX_DEPTH."""
    for _name, arguments in calls:
        args = json.loads(arguments, parse_constant=_not_json)
        assert isinstance(args, dict)
        assert depth_of(args) <= MAX_DEPTH


# ---- random text and marker soup --------------------------------------------------------


@st.composite
def marker_soup(draw: st.DrawFn, fmt_id: str) -> str:
    """The family's markers, pieces of its valid calls (so calls left open anywhere) and
    random characters, in any order."""
    valid = call_text(fmt_id, {"s": "x", "i": 1, "o": {"k": [1, "v"]}})
    piece = st.one_of(
        st.sampled_from(markers(fmt_id)),
        st.integers(0, len(valid)).flatmap(lambda a: st.integers(a, len(valid)).map(lambda b: valid[a:b])),
        st.text(st.sampled_from(RANDOM_ALPHABET), max_size=8),
        st.text(max_size=4),
    )
    return "".join(draw(st.lists(piece, max_size=12)))


@pytest.mark.parametrize("fmt_id", FAMILIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), tools=st.booleans(), thinking_open=st.booleans())
def test_marker_soup_any_split(fmt_id: str, data: st.DataObject, tools: bool, thinking_open: bool) -> None:
    text = data.draw(marker_soup(fmt_id))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    same_whole_and_split(fmt_id, text, split_at(text, cuts), tools, thinking_open)


@pytest.mark.parametrize("fmt_id", FAMILIES)
def test_every_marker_left_open(fmt_id: str) -> None:
    """Each marker alone, after text, twice, and a valid call cut at every character."""
    texts = [t for m in markers(fmt_id) for t in (m, "Hi " + m, m + m, m + " x " + m)]
    valid = call_text(fmt_id, {"s": "x", "o": {"k": [1, "v"]}})
    texts += [valid[:i] for i in range(1, len(valid))]
    for text in texts:
        _, calls = same_whole_and_split(fmt_id, text, split_at(text, list(range(0, len(text), 3))))
        assert_sane(calls)


# ---- deep nesting -----------------------------------------------------------------------


def deep_values() -> dict[str, str]:
    """Argument values nested DEEP levels: closed, never closed, objects, Python-style."""
    return {
        "arrays": "[" * DEEP + "]" * DEEP,
        "arrays_unclosed": "[" * DEEP + "1",
        "objects": '{"a": ' * DEEP + "1" + "}" * DEEP,
        "kv_objects": "{a:" * DEEP + "1" + "}" * DEEP,
        "python_lists": "[" * DEEP + "1" + "]" * DEEP,
    }


def m3_deep_elements() -> str:
    """MiniMax M3 writes objects as nested elements: DEEP of them, inside one parameter."""
    inner = f"{M3_NS}<k>" * DEEP + "1" + f"{M3_NS}</k>" * DEEP
    return (f'{M3_NS}<tool_call>\n{M3_NS}<invoke name="record">{M3_NS}<o>{inner}{M3_NS}</o>'
            f"{M3_NS}</invoke>\n{M3_NS}</tool_call>")


DEEP_CASES = [(f, name) for f in FAMILIES for name in deep_values()] + [("minimax_m3", "elements")]


@pytest.mark.parametrize(("fmt_id", "shape"), DEEP_CASES)
@pytest.mark.parametrize("tools", [True, False])
def test_deep_nesting_is_bounded(fmt_id: str, shape: str, tools: bool) -> None:
    text = m3_deep_elements() if shape == "elements" else with_value(fmt_id, deep_values()[shape])
    text += "\nAfter."
    _, calls = same_whole_and_split(fmt_id, text, split_at(text, list(range(0, len(text), 997))), tools)
    assert_sane(calls)


def test_a_deep_call_is_malformed_and_its_neighbours_are_kept() -> None:
    """Past MAX_DEPTH the call is treated as malformed (what parsed is kept, the rest of its block
    dropped), and the calls and text around it are read as usual."""
    ok = call_text("hermes", {"s": "ok"})
    deep = with_value("hermes", "[" * DEEP + "]" * DEEP)
    content, calls = same_whole_and_split("hermes", f"Hi.\n{ok}\n{deep}\n{ok}\nBye.",
                                          [f"Hi.\n{ok}\n", f"{deep}\n{ok}\nBye."])
    assert content == "Hi.\nBye."
    assert [json.loads(a).get("s") for _, a in calls] == ["ok", "x", "ok"]
    assert depth_of(json.loads(calls[1][1])) == MAX_DEPTH


def test_nesting_up_to_the_bound_is_read() -> None:
    value: Any = 1
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    text = with_value("hermes", json.dumps(value))
    _, calls = same_whole_and_split("hermes", text, split_at(text, [5, 40, len(text) - 5]))
    assert [json.loads(a) for _, a in calls] == [{"s": "x", "o": value}]


# ---- values JSON cannot hold ------------------------------------------------------------

# Python literals and JSON extensions a model may write where a value goes: each is read as
# JSON holds it, kept as text, or left out, and never breaks the parser or its JSON
ODD_VALUES = ["{1, 2}", '{"a": {1, 2}}', "{(1, 2): 3}", 'b"x"', "1j", "...", '{"a": ...}', "NaN", "-Infinity",
              '{"a": NaN}', "1e400", '{"a": 1e400}', "[1e400]", 'float("nan")', "{'a': None, 'b': (1,)}"]


@pytest.mark.parametrize("fmt_id", FAMILIES)
@pytest.mark.parametrize("tools", [True, False])
def test_values_json_cannot_hold(fmt_id: str, tools: bool) -> None:
    for value in ODD_VALUES:
        text = with_value(fmt_id, value)
        _, calls = same_whole_and_split(fmt_id, text, split_at(text, [len(text) // 2]), tools)
        assert_sane(calls)


# ---- 1 MB inputs ------------------------------------------------------------------------


@settings(max_examples=6, deadline=None)
@given(fmt_id=st.sampled_from(FAMILIES), kind=st.sampled_from(sorted(HOSTILE)), data=st.data())
def test_one_megabyte(fmt_id: str, kind: str, data: st.DataObject) -> None:
    text = HOSTILE[kind](fmt_id, 1_000_000)
    cuts = data.draw(st.lists(st.integers(0, len(text)), min_size=1, max_size=30))
    _, calls = same_whole_and_split(fmt_id, text, split_at(text, cuts))
    assert_sane(calls)
