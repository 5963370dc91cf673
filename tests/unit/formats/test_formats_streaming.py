"""Streaming behaviour beyond the conformance table: held-back partial markers, labels of
text before a marker, arguments streaming as they arrive, and the incremental JSON reader."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.formats.deltas import rebuild
from toolserve.formats.jsonstream import JsonReader, close_json_prefix
from toolserve.formats.registry import FORMATS
from toolserve.formats.schema import coerce, ordered_params
from toolserve.types import ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart, ToolSpec

WEATHER = ToolSpec("get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"},
                                                                            "days": {"type": "integer"}}})


def test_partial_marker_is_held_then_released() -> None:
    p = FORMATS["hermes"].new_parser([WEATHER])
    assert p.feed("Hello <tool_ca") == [ContentDelta("Hello")]
    assert p.feed("lendar>") == [ContentDelta(" <tool_calendar>")]
    assert p.finish() == []


def test_text_before_marker_keeps_its_own_label() -> None:
    p = FORMATS["hermes"].new_parser([WEATHER])
    out = p.feed("<think>plan</think>answer<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>")
    assert out[:2] == [ReasoningDelta("plan"), ContentDelta("answer")]
    assert isinstance(out[2], ToolCallStart)


def test_arguments_stream_as_they_arrive() -> None:
    p = FORMATS["hermes"].new_parser([WEATHER])
    out = p.feed('<tool_call>{"name": "get_weather", "arguments": {"city": "Par')
    assert isinstance(out[0], ToolCallStart) and out[0].name == "get_weather"
    assert out[1:] == [ToolCallArgs(0, '{"city": "Par')]
    # the number may still grow, and a key is only written with its value's first output
    assert p.feed('is", "days": 1') == [ToolCallArgs(0, 'is"')]
    assert p.feed("2}}</tool_call>") == [ToolCallArgs(0, ', "days": 12}')]


def test_raw_string_values_stream() -> None:
    p = FORMATS["qwen3_coder"].new_parser([WEATHER])
    out = p.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nNew Yo")
    assert [d for d in out if isinstance(d, ToolCallArgs)] == [ToolCallArgs(0, '{"city": "New Yo')]
    out = p.feed("rk\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
    assert "".join(d.fragment for d in out if isinstance(d, ToolCallArgs)) == 'rk", "days": 3}'


def test_no_tools_accepts_any_name_and_unknown_name_is_content_with_tools() -> None:
    text = '<tool_call>{"name": "anything", "arguments": {"x": 1}}</tool_call>'
    assert [c.name for c in FORMATS["hermes"].parse(text).tool_calls] == ["anything"]
    msg = FORMATS["hermes"].parse(text, [WEATHER])
    assert msg.tool_calls == [] and msg.content == text


def test_broken_arguments_after_start_keep_what_parsed() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Par'
    for pieces in ([text], list(text)):
        p = FORMATS["hermes"].new_parser([WEATHER])
        deltas = [d for piece in pieces for d in p.feed(piece)] + p.finish()
        assert [(c.name, c.arguments) for c in rebuild(deltas).tool_calls] == [("get_weather", '{"city": "Par"}')]


def test_ids_are_stable_and_unique() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call><tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    calls = FORMATS["hermes"].parse(text, [WEATHER]).tool_calls
    assert len({c.id for c in calls}) == 2


# ---- the incremental JSON reader -------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, ascii_escapes=st.booleans(), indent=st.sampled_from([None, 0, 2]), data=st.data())
def test_reader_gives_canonical_json_for_any_split(value: object, ascii_escapes: bool, indent: int | None,
                                                   data: st.DataObject) -> None:
    obj = {"v": value}
    text = json.dumps(obj, ensure_ascii=ascii_escapes, indent=indent)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=20)))
    reader = JsonReader()
    out = []
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=False):
        reader.feed(text[a:b], 0)
        out.append("".join(reader.out))
        reader.out.clear()
    assert reader.done and not reader.failed
    assert "".join(out) == json.dumps(obj, ensure_ascii=False)


def test_reader_stops_after_the_value_and_fails_on_garbage() -> None:
    r = JsonReader()
    assert r.feed('{"a": 1} tail', 0) == 8 and r.done
    r = JsonReader()
    r.feed('{"a": tru', 0)
    assert not r.done and not r.failed
    r.feed("x", 0)
    assert r.failed


def test_close_json_prefix() -> None:
    for prefix, whole in [("", "{}"), ("{", "{}"), ('{"a": "x', '{"a": "x"}'),
                          ('{"a": [1, {"b": "c\\"', '{"a": [1, {"b": "c\\""}]}')]:
        assert prefix + close_json_prefix(prefix) == whole if prefix else close_json_prefix(prefix) == whole
        json.loads(prefix + close_json_prefix(prefix) if prefix else whole)


def test_close_json_prefix_never_invents_a_value() -> None:
    for prefix in ('{"a', '{"a"', '{"a": ', '{"a": 1, ', "[1, "):
        with pytest.raises(ValueError):
            close_json_prefix(prefix)


def test_schema_coercion() -> None:
    assert coerce("42", {"type": "integer"}) == 42
    assert coerce("4.0", {"type": "integer"}) == 4
    assert coerce("-1.5", {"type": "number"}) == -1.5
    assert coerce("True", {"type": "boolean"}) is True
    assert coerce("null", {"type": ["integer", "null"]}) is None
    assert coerce('{"a": 1}', {"type": "object"}) == {"a": 1}
    assert coerce("['x', 2]", {"type": "array"}) == ["x", 2]
    assert coerce("many", {"type": "integer"}) == "many"
    assert coerce(" 7 ", {"type": "string"}) == " 7 "
    assert coerce("3", {"anyOf": [{"type": "integer"}, {"type": "string"}]}) == 3
    assert ordered_params({"properties": {"a": {}, "b": {}, "c": {}}, "required": ["c"]}) == ["c", "a", "b"]
