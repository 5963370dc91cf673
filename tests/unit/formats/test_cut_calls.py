"""A call cut off inside its arguments (max_tokens) is returned as generated: open strings,
arrays and objects of what the model wrote are closed, and no key or value is ever added."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.formats.deltas import rebuild
from toolserve.formats.jsonstream import repair_json_prefix
from toolserve.formats.registry import FORMATS
from toolserve.types import Delta, ToolSpec

RECORD = ToolSpec("record", parameters={
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "ok": {"type": "boolean"},
                   "when": {"type": "object"}, "tags": {"type": "array"}},
    "required": ["city", "days"]})
HEAD = '<tool_call>\n{"name": "record", "arguments": '

# (what the model wrote of the arguments before the cut, the arguments returned)
CUTS = [
    ("{", "{}"),
    ('{"', "{}"),  # inside the first key
    ('{"ci', "{}"),
    ('{"city"', "{}"),  # key ended, no colon
    ('{"city":', "{}"),  # after the colon: dropped, never null
    ('{"city": ', "{}"),
    ('{"city": "', '{"city": ""}'),  # an opened string is closed
    ('{"city": "Par', '{"city": "Par"}'),
    ('{"city": "Pa\\', '{"city": "Pa"}'),  # inside an escape
    ('{"city": "Pa\\u00', '{"city": "Pa"}'),
    ('{"city": "Paris"', '{"city": "Paris"}'),
    ('{"city": "Paris",', '{"city": "Paris"}'),
    ('{"city": "Paris", "da', '{"city": "Paris"}'),  # inside the second key
    ('{"city": "Paris", "days": ', '{"city": "Paris"}'),
    ('{"city": "Paris", "days": 1', '{"city": "Paris"}'),  # a number may still grow: dropped
    ('{"city": "Paris", "days": 12,', '{"city": "Paris", "days": 12}'),
    ('{"city": "Paris", "days": -', '{"city": "Paris"}'),
    ('{"city": "Paris", "ok": tr', '{"city": "Paris"}'),  # a literal not yet ended: dropped
    ('{"city": "Paris", "ok": true', '{"city": "Paris", "ok": true}'),
    ('{"when": {', '{"when": {}}'),  # an opened object is closed
    ('{"when": {"day": "mon", "hour"', '{"when": {"day": "mon"}}'),
    ('{"when": {"day": "mon", "hour": 2', '{"when": {"day": "mon"}}'),
    ('{"when": {"day": "mon"}, "tags": [', '{"when": {"day": "mon"}, "tags": []}'),
    ('{"tags": ["a", "b', '{"tags": ["a", "b"]}'),
    ('{"tags": ["a",', '{"tags": ["a"]}'),
    ('{"tags": ["a", 3', '{"tags": ["a"]}'),
    ('{"tags": [{"k": [1, {"x": "y', '{"tags": [{"k": [1, {"x": "y"}]}]}'),
    ('{"tags": [[], {}, [', '{"tags": [[], {}, []]}'),
]


def parse(pieces: list[str]) -> list[Delta]:
    p = FORMATS["hermes"].new_parser([RECORD])
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += p.feed(piece)
    return deltas + p.finish()


@pytest.mark.parametrize(("prefix", "expected"), CUTS, ids=[c[0] for c in CUTS])
def test_cut_call_is_returned_as_generated(prefix: str, expected: str) -> None:
    text = HEAD + prefix
    whole = rebuild(parse([text]))
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [("record", expected)]
    assert whole.content == ""
    for k in range(1, len(text)):  # streamed at every split point: the same call
        split = rebuild(parse([text[:k], text[k:]]))
        assert [(c.name, c.arguments) for c in split.tool_calls] == [("record", expected)], k
    one_by_one = rebuild(parse(list(text)))
    assert [(c.name, c.arguments) for c in one_by_one.tool_calls] == [("record", expected)]


@pytest.mark.parametrize(("prefix", "expected"), CUTS, ids=[c[0] for c in CUTS])
def test_repair_json_prefix(prefix: str, expected: str) -> None:
    assert repair_json_prefix(prefix) == expected


def partial_of(got: Any, full: Any) -> bool:
    """`got` holds nothing `full` does not: containers hold a prefix of `full`'s members, each
    equal except the last, which may itself be partial; strings may be cut; the rest equal."""
    if isinstance(full, dict):
        if not isinstance(got, dict) or list(got) != list(full)[:len(got)]:
            return False
        keys = list(got)
        return all(got[k] == full[k] for k in keys[:-1]) and (not keys or partial_of(got[keys[-1]], full[keys[-1]]))
    if isinstance(full, list):
        if not isinstance(got, list) or len(got) > len(full):
            return False
        return not got or (got[:-1] == full[:len(got) - 1] and partial_of(got[-1], full[len(got) - 1]))
    if isinstance(full, str):
        return isinstance(got, str) and full.startswith(got)
    return type(got) is type(full) and got == full


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10,
)
objects = st.dictionaries(st.text(max_size=5), json_values, max_size=4)


@settings(max_examples=300, deadline=None)
@given(value=objects, ascii_escapes=st.booleans(), indent=st.sampled_from([None, 0, 2]), data=st.data())
def test_any_prefix_repairs_to_valid_json_holding_only_what_it_holds(value: dict, ascii_escapes: bool,
                                                                     indent: int | None, data: st.DataObject) -> None:
    text = json.dumps(value, ensure_ascii=ascii_escapes, indent=indent)
    k = data.draw(st.integers(1, len(text)))
    repaired = repair_json_prefix(text[:k])
    assert repaired is not None
    got = json.loads(repaired)
    assert partial_of(got, value), (text[:k], repaired)
    assert repaired == json.dumps(got, ensure_ascii=False)  # canonical
    if k == len(text):
        assert got == value


@settings(max_examples=150, deadline=None)
@given(value=objects, data=st.data())
def test_cut_calls_stream_as_they_parse(value: dict, data: st.DataObject) -> None:
    """Any cut of a call, fed in any pieces, gives the same call, which holds only what was written."""
    text = HEAD + json.dumps(value, ensure_ascii=False) + "}\n</tool_call>"
    k = data.draw(st.integers(len(HEAD) + 1, len(text)))
    cut = text[:k]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, k - 1)), max_size=12)))
    pieces = [cut[a:b] for a, b in zip([0, *cuts], [*cuts, k], strict=False)]
    whole, split = rebuild(parse([cut])), rebuild(parse(pieces))
    assert [(c.name, c.arguments) for c in split.tool_calls] == [(c.name, c.arguments) for c in whole.tool_calls]
    assert (split.content, split.reasoning) == (whole.content, whole.reasoning)
    assert len(whole.tool_calls) == 1
    assert partial_of(json.loads(whole.tool_calls[0].arguments), value)


@pytest.mark.parametrize(("fmt_id", "head", "tail"), [
    ("function_tag", "<function=record>", "</function>"),
    ("mistral", '[TOOL_CALLS][{"name": "record", "arguments": ', "}]"),
    ("granite", '<|tool_call|>[{"name": "record", "arguments": ', "}]"),
    ("generic_json", '{"tool_calls": [{"name": "record", "arguments": ', "}]}"),
    ("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>record<｜tool▁sep｜>", "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
])
def test_json_families_never_invent_a_value(fmt_id: str, head: str, tail: str) -> None:
    args = {"city": "Paris", "days": 12, "when": {"day": "mon", "hour": 20}, "tags": ["a", 3, None]}
    text = head + json.dumps(args) + tail
    for k in range(len(head) + 1, len(text) + 1):
        p = FORMATS[fmt_id].new_parser([RECORD])
        msg = rebuild(p.feed(text[:k]) + p.finish())
        for call in msg.tool_calls:
            assert partial_of(json.loads(call.arguments), args), (fmt_id, text[:k], call.arguments)


def _dsml(block: str) -> tuple[str, str]:
    d = "｜DSML｜"
    params = (f'<{d}parameter name="city" string="true">Paris</{d}parameter>\n'
              f'<{d}parameter name="days" string="false">12</{d}parameter>\n'
              f'<{d}parameter name="when" string="false">{{"day": "mon", "hour": 20}}</{d}parameter>\n'
              f'<{d}parameter name="tags" string="false">["a", 3, null]</{d}parameter>\n')
    return f'<{d}{block}>\n<{d}invoke name="record">\n{params}</{d}invoke>\n</{d}{block}>', ""


def _m3() -> tuple[str, str]:
    ns = "]<]minimax[>["
    params = (f"{ns}<city>Paris{ns}</city>{ns}<days>12{ns}</days>{ns}<when>{ns}<day>mon{ns}</day>{ns}<hour>20{ns}</hour>"
              f"{ns}</when>{ns}<tags>{ns}<item>a{ns}</item>{ns}<item>3{ns}</item>{ns}<item>null{ns}</item>{ns}</tags>")
    return f'{ns}<tool_call>\n{ns}<invoke name="record">{params}{ns}</invoke>\n{ns}</tool_call>', ""


def _xml(open_call: str, param: str, close_param: str, close_call: str) -> tuple[str, str]:
    values = (("city", "Paris"), ("days", "12"), ("when", '{"day": "mon", "hour": 20}'), ("tags", '["a", 3, null]'))
    return open_call + "".join(param.format(k) + v + close_param for k, v in values) + close_call, ""


@pytest.mark.parametrize(("fmt_id", "text"), [
    ("deepseek_v32", _dsml("function_calls")[0]),
    ("deepseek_v4", _dsml("tool_calls")[0]),
    ("minimax_m3", _m3()[0]),
    ("qwen3_coder", _xml("<tool_call>\n<function=record>\n", "<parameter={}>\n", "\n</parameter>\n",
                         "</function>\n</tool_call>")[0]),
    ("minimax_m2", _xml('<minimax:tool_call>\n<invoke name="record">\n', '<parameter name="{}">', "</parameter>\n",
                        "</invoke>\n</minimax:tool_call>")[0]),
])
def test_markup_families_never_invent_a_value(fmt_id: str, text: str) -> None:
    """Cut anywhere, a markup call holds a prefix of what was written: a string as far as it got,
    any other value only once its element closed (never a number cut short, never a key alone)."""
    args = {"city": "Paris", "days": 12, "when": {"day": "mon", "hour": 20}, "tags": ["a", 3, None]}
    seen_whole = False
    for k in range(1, len(text) + 1):
        p = FORMATS[fmt_id].new_parser([RECORD])
        msg = rebuild(p.feed(text[:k]) + p.finish())
        for call in msg.tool_calls:
            got = json.loads(call.arguments)
            assert partial_of(got, args), (fmt_id, text[:k], call.arguments)
            seen_whole = seen_whole or got == args
    assert seen_whole
