"""The lenient reader (formats/lenient.py): answers that are nothing but JSON call objects, fenced
or bare, as tool-trained models write them outside their family's markup, become calls under
tool_choice auto; everything else stays text, whole; any split of the stream gives the same."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.formats.deltas import rebuild
from toolserve.formats.lenient import LenientCalls, lenient_calls
from toolserve.formats.registry import FORMATS
from toolserve.serving.chat import ChatOptions, OutputShaper
from toolserve.types import ContentDelta, ToolCallStart, ToolSpec

WEATHER = ToolSpec("get_weather", "Current weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                                       "required": ["city"]})
TIME = ToolSpec("get_time", "The time in a zone", {"type": "object", "properties": {"zone": {"type": "string"}}})
ODD = ToolSpec("odd", "A tool whose schema has a broken reference", {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})
TOOLS = (WEATHER, TIME, ODD)

PARIS = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TOKYO = '{"name": "get_weather", "arguments": {"city": "Tokyo"}}'
UTC = '{"name": "get_time", "parameters": {"zone": "UTC"}}'
PACKAGE_JSON = '{\n  "name": "my-app",\n  "version": "1.0.0",\n  "scripts": {"start": "node index.js"}\n}'

# (answer, the calls it is: [(name, arguments)], or None: it stays text)
CASES = [
    ("fenced json", f"```json\n{PARIS}\n```", [("get_weather", '{"city": "Paris"}')]),
    ("fenced plain", f"```\n{PARIS}\n```", [("get_weather", '{"city": "Paris"}')]),
    ("fenced JSON tag", f"```JSON\n{PARIS}\n```", [("get_weather", '{"city": "Paris"}')]),
    ("bare object", PARIS, [("get_weather", '{"city": "Paris"}')]),
    ("whitespace around", f"\n\n  {PARIS}  \n", [("get_weather", '{"city": "Paris"}')]),
    ("parameters key", UTC, [("get_time", '{"zone": "UTC"}')]),
    ("list", f"[{PARIS}, {UTC}]", [("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "UTC"}')]),
    ("fenced list", f"```json\n[{PARIS},\n {TOKYO}]\n```",
     [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Tokyo"}')]),
    ("two fences", f"```json\n{PARIS}\n```\n\n```json\n{TOKYO}\n```",
     [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Tokyo"}')]),
    ("two bare objects", f"{PARIS}\n{TOKYO}", [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Tokyo"}')]),
    ("fence left open at the end", f"```json\n{PARIS}\n", [("get_weather", '{"city": "Paris"}')]),
    ("type and id keys", '{"type": "function", "id": "c1", "name": "get_time", "arguments": {}}', [("get_time", "{}")]),
    ("a schema the validator cannot use checks nothing", '{"name": "odd", "arguments": {"x": 1}}', [("odd", '{"x": 1}')]),
    ("string arguments decoded", '{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}',
     [("get_weather", '{"city": "Rome"}')]),
    ("null arguments", '{"name": "get_time", "arguments": null}', [("get_time", "{}")]),
    ("canonical arguments", '{"name":"get_weather","arguments":{ "city" :"Oslo" }}', [("get_weather", '{"city": "Oslo"}')]),
    ("schema-invalid arguments: text", '{"name": "get_weather", "arguments": {"town": 3}}', None),
    ("a wrong type: text", '{"name": "get_weather", "arguments": {"city": 3}}', None),
    # text
    ("prose before", f"Here is the call:\n```json\n{PARIS}\n```", None),
    ("prose after", f"```json\n{PARIS}\n```\nThis gets the weather.", None),
    ("prose around bare", f"Call {PARIS} now", None),
    ("unknown name", '{"name": "get_news", "arguments": {}}', None),
    ("one unknown in a list", f'[{PARIS}, {{"name": "get_news", "arguments": {{}}}}]', None),
    ("package.json", PACKAGE_JSON, None),
    ("fenced package.json", f"```json\n{PACKAGE_JSON}\n```", None),
    ("name is a tool but extra keys", '{"name": "get_weather", "city": "Paris", "arguments": {}}', None),
    ("no arguments key", '{"name": "get_time"}', None),
    ("both argument keys", '{"name": "get_time", "arguments": {}, "parameters": {}}', None),
    ("arguments not an object", '{"name": "get_weather", "arguments": ["Paris"]}', None),
    ("arguments a broken string", '{"name": "get_weather", "arguments": "{city"}', None),
    ("type not function", '{"type": "tool", "name": "get_time", "arguments": {}}', None),
    ("other fence language", f"```python\n{PARIS}\n```", None),
    ("broken json", '{"name": "get_weather", "arguments": {"city": "Paris"}', None),
    ("json then junk", f"{PARIS}}}", None),
    ("list of strings", '["red", "green", "blue"]', None),
    ("empty list", "[]", None),
    ("plain answer", "The weather in Paris is sunny.", None),
    ("number", "42", None),
    ("empty", "", None),
    ("too deep", "[" * 300 + "]" * 300, None),
    ("nested keys are free", '{"name": "get_weather", "arguments": {"city": "x", "name": {"a": [1, {"b": 2}]}}}',
     [("get_weather", '{"city": "x", "name": {"a": [1, {"b": 2}]}}')]),
    ("keys with quotes and escapes in values", '{"name": "get_weather", "arguments": {"city": "a\\"b,c: {"}}',
     [("get_weather", '{"city": "a\\"b,c: {"}')]),
    ("escaped key", '{"na\\u006de": "get_time", "arguments": {}}', None),
    ("extra key after arguments", '{"name": "get_time", "arguments": {}, "version": 2}', None),
    ("NaN", '{"name": "get_weather", "arguments": {"city": NaN}}', None),
]


@pytest.mark.parametrize(("answer", "expected"), [(a, e) for _, a, e in CASES], ids=[c[0] for c in CASES])
def test_lenient_calls_table(answer: str, expected: list[tuple[str, str]] | None) -> None:
    assert lenient_calls(answer, TOOLS) == expected


def _shaped(pieces: list[str], opts: ChatOptions, fmt: str = "hermes") -> tuple[list, object]:
    shaper = OutputShaper(FORMATS[fmt], opts, thinking_open=False, parse=True)
    deltas = [d for p in pieces for d in shaper.feed(p)] + shaper.finish()
    return deltas, rebuild(deltas)


def _ids() -> object:
    n = iter(range(1000))
    return lambda: f"call_{next(n)}"


@pytest.mark.parametrize(("answer", "expected"), [(a, e) for _, a, e in CASES], ids=[c[0] for c in CASES])
def test_through_the_shaper(answer: str, expected: list[tuple[str, str]] | None) -> None:
    """The family's parser first, then the rule: calls (finish reason tool_calls) or the text unchanged."""
    _, msg = _shaped([answer], ChatOptions(tools=TOOLS))
    plain = FORMATS["hermes"].parse(answer, TOOLS)
    if expected is None:
        assert msg.tool_calls == [] and msg.content == plain.content  # type: ignore[attr-defined]
    else:
        assert [(c.name, c.arguments) for c in msg.tool_calls] == expected  # type: ignore[attr-defined]
        assert msg.content == ""  # type: ignore[attr-defined]
        assert all(json.loads(c.arguments) is not None for c in msg.tool_calls)  # type: ignore[attr-defined]


@pytest.mark.parametrize("choice", ["none", "required"])
def test_only_under_auto(choice: str) -> None:
    _, msg = _shaped([f"```json\n{PARIS}\n```"], ChatOptions(tools=TOOLS, tool_choice=choice))
    assert msg.tool_calls == []  # type: ignore[attr-defined]


def test_no_tools_no_calls() -> None:
    _, msg = _shaped([PARIS], ChatOptions())
    assert msg.tool_calls == [] and msg.content == PARIS  # type: ignore[attr-defined]


def test_family_markup_ends_the_holding() -> None:
    """A `<tool_call>` block after a fenced object: the answer is not calls alone; the block is the call."""
    answer = f"```json\n{PARIS}\n```\n<tool_call>\n{TOKYO}\n</tool_call>"
    _, msg = _shaped([answer], ChatOptions(tools=TOOLS))
    assert [json.loads(c.arguments)["city"] for c in msg.tool_calls] == ["Tokyo"]  # type: ignore[attr-defined]
    assert msg.content == f"```json\n{PARIS}\n```"  # type: ignore[attr-defined]


def test_prose_streams_at_once_and_a_call_is_held() -> None:
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True)
    assert shaper.feed("The weather") == [ContentDelta("The weather")]
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True)
    assert shaper.feed("```json\n" + PARIS[:30]) == []
    assert shaper.feed(PARIS[30:] + "\n```") == []
    out = shaper.finish()
    assert isinstance(out[0], ToolCallStart) and out[0].name == "get_weather" and shaper.calls == 1
    # a JSON document goes out once it cannot be calls: at the first key a call has not
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True)
    assert shaper.feed('```json\n{\n  "name": "get_weather",\n  "vers') == []
    assert shaper.feed('ion": "1.0.0",') == [ContentDelta('```json\n{\n  "name": "get_weather",\n  "version": "1.0.0",')]
    assert shaper.feed('\n  "private": true\n}\n```') == [ContentDelta('\n  "private": true\n}\n```')]
    assert shaper.finish() == [] and shaper.calls == 0
    # in a list, the keys of each item; a value that is no object waits for the end of the list
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True)
    assert shaper.feed(f'[{PARIS}, {{"name": "x", "argu') == []
    assert shaper.feed('ments": {}, "extra": 1}') == [ContentDelta(f'[{PARIS}, {{"name": "x", "arguments": {{}}, "extra": 1}}')]
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True)
    assert shaper.feed('["red", "gre') == []
    assert shaper.feed('en"]\nThose are colours.') == [ContentDelta('["red", "green"]\nThose are colours.')]


def test_reasoning_passes_while_content_is_held() -> None:
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True)
    out = shaper.feed("<think>weather needed</think>\n```json\n")
    assert [type(d).__name__ for d in out] == ["ReasoningDelta"]
    assert shaper.feed(PARIS + "\n```") == []
    assert [d.name for d in shaper.finish() if isinstance(d, ToolCallStart)] == ["get_weather"]


def test_repeat_and_parallel_rules_hold() -> None:
    """The shaper's rules apply to lenient calls as to markup ones: a repeated call ends the
    answer; parallel_tool_calls false keeps the first."""
    _, msg = _shaped([f"[{PARIS}, {PARIS}]"], ChatOptions(tools=TOOLS))
    assert len(msg.tool_calls) == 1  # type: ignore[attr-defined]
    _, msg = _shaped([f"[{PARIS}, {UTC}]"], ChatOptions(tools=TOOLS, parallel_tool_calls=False))
    assert [c.name for c in msg.tool_calls] == ["get_weather"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("fmt", ["llama3_json", "mistral", "granite", "function_tag", "qwen3_coder"])
def test_other_families(fmt: str) -> None:
    _, msg = _shaped([f"```json\n{PARIS}\n```"], ChatOptions(tools=TOOLS), fmt)
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city": "Paris"}')]  # type: ignore[attr-defined]
    _, msg = _shaped([PACKAGE_JSON], ChatOptions(tools=TOOLS), fmt)
    assert msg.tool_calls == [] and msg.content == PACKAGE_JSON  # type: ignore[attr-defined]


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(CASES), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_split_gives_the_same_answer(case: tuple[str, str, object], cuts: list[int]) -> None:
    _, answer, _ = case
    opts = ChatOptions(tools=TOOLS)
    whole, _ = _shaped([answer], opts)
    pieces, _ = _shaped(_split(answer, cuts), opts)
    a, b = rebuild(whole), rebuild(pieces)
    assert (a.content, a.reasoning, [(c.name, c.arguments) for c in a.tool_calls]) == (
        b.content, b.reasoning, [(c.name, c.arguments) for c in b.tool_calls])


def test_lenient_layer_alone_keeps_ids_fresh() -> None:
    layer = LenientCalls(TOOLS, id_factory=_ids())  # type: ignore[arg-type]
    out = layer.finish(layer.feed([ContentDelta(f"[{PARIS}, {UTC}]")]))
    assert [d.id for d in out if isinstance(d, ToolCallStart)] == ["call_0", "call_1"]


def test_off_where_the_template_renders_no_tools() -> None:
    """A template that knows no tools (toolserve injects the family's prompt, asking for its
    markup): the model was not trained to call, and its JSON stays text."""
    shaper = OutputShaper(FORMATS["hermes"], ChatOptions(tools=TOOLS), thinking_open=False, parse=True, lenient=False)
    msg = rebuild(shaper.feed(f"```json\n{PARIS}\n```") + shaper.finish())
    assert msg.tool_calls == [] and msg.content == f"```json\n{PARIS}\n```"
