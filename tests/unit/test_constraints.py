"""Every family's constraint, from the declaration its parser reads (issue 32): for any tools,
the grammar compiles, accepts what the family's renderer writes, and whatever it accepts the
family's parser reads back as calls whose arguments validate against the tools' schemas."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import jsonschema
import llguidance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolserve.errors import Unsupported
from toolserve.formats import constraint
from toolserve.formats.grammar import Writer
from toolserve.formats.registry import FORMATS
from toolserve.types import ToolCall, ToolSpec

IDS = sorted(FORMATS)
NAMES = st.text(string.ascii_lowercase, min_size=1, max_size=8).map(lambda s: "p_" + s)
# text a model may put in a string: letters, spaces, punctuation, quotes, newlines, non-ASCII
TEXT = st.text(st.sampled_from([*string.ascii_letters, *" .,:;!?'\"\\/-_()[]{}<>=\n", "é", "日", "🙂"]), max_size=12)


@pytest.fixture(scope="module")
def tok() -> Iterator[Any]:
    yield from vocab()


def vocab() -> Iterator[Any]:
    """The bundled model's vocabulary as llguidance reads it."""
    import llama_cpp
    from llguidance.llamacpp import lltokenizer_from_vocab

    from toolserve.models.files import bundled_model

    llm = llama_cpp.Llama(str(bundled_model()), vocab_only=True, verbose=False)
    yield lltokenizer_from_vocab(llm._model.vocab)  # it reads llama.cpp's vocabulary in place: llm lives on
    llm.close()


# ---- schemas and values ----------------------------------------------------------------------

SCALARS = st.one_of(
    st.just({"type": "string"}),
    st.builds(lambda words: {"type": "string", "enum": words}, st.lists(st.text(string.ascii_lowercase + " ", min_size=1, max_size=6), min_size=1, max_size=3, unique=True)),
    st.just({"type": "string", "pattern": "^[a-z]{1,5}$"}),
    st.just({"type": "string", "maxLength": 6}),
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span}, st.integers(-50, 50), st.integers(0, 100)),
    st.just({"type": "integer"}),
    st.just({"type": "number"}),
    st.just({"type": "boolean"}),
    st.just({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.builds(lambda items: {"type": "array", "items": items}, inner),
    st.builds(lambda props, req: {"type": "object", "properties": props, "required": [k for k in props if req]},
              st.dictionaries(NAMES, inner, min_size=1, max_size=2), st.booleans()),
), max_leaves=3)


@st.composite
def tool_specs(draw: st.DrawFn) -> list[ToolSpec]:
    names = draw(st.lists(st.sampled_from(["get_weather", "book_room", "ping", "search_docs"]), min_size=1, max_size=3, unique=True))
    tools = []
    for name in names:
        props = draw(st.dictionaries(NAMES, VALUES, max_size=4))
        required = [k for k in props if draw(st.booleans())]
        tools.append(ToolSpec(name, f"{name} tool", {"type": "object", "properties": props, "required": required}))
    return tools


def value_of(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    """A value valid against one of SCALARS / VALUES' schemas."""
    if "anyOf" in schema:
        return value_of(draw, draw(st.sampled_from(schema["anyOf"])))
    kind = schema["type"]
    if kind == "string":
        if "enum" in schema:
            return draw(st.sampled_from(schema["enum"]))
        if "pattern" in schema:
            return draw(st.text(string.ascii_lowercase, min_size=1, max_size=5))
        return draw(TEXT)[: schema.get("maxLength", 12)]
    if kind == "integer":
        return draw(st.integers(schema.get("minimum", -1000), schema.get("maximum", 1000)))
    if kind == "number":
        return draw(st.floats(-1e3, 1e3, allow_nan=False).map(lambda f: round(f, 3)))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "array":
        return [value_of(draw, schema["items"]) for _ in range(draw(st.integers(0, 2)))]
    props = schema["properties"]
    return {k: value_of(draw, v) for k, v in props.items() if k in schema["required"] or draw(st.booleans())}


@st.composite
def calls_for(draw: st.DrawFn, tools: list[ToolSpec], many: bool) -> list[ToolCall]:
    out = []
    for i in range(draw(st.integers(1, 3)) if many else 1):
        t = draw(st.sampled_from(tools))
        args = value_of(draw, {"type": "object", "properties": t.parameters["properties"], "required": t.parameters["required"]})
        out.append(ToolCall(f"call_{i}", t.name, json.dumps(args)))
    return out


# ---- helpers ---------------------------------------------------------------------------------------


def accepts(tok: Any, grammar: str, text: str) -> bool:
    m = llguidance.LLMatcher(tok, grammar, log_level=0)
    assert not m.is_error(), m.get_error()
    return bool(m.consume_tokens(tok.tokenize_str(text)) and m.is_accepting())


def rendered(fmt_id: str, calls: list[ToolCall]) -> str:
    """Calls as the family writes them: a block each, in a row, inside one wrap where the
    family has one (DeepSeek's calls begin/end, Kimi's section)."""
    fmt = FORMATS[fmt_id]
    if fmt_id == "generic_json":  # one object holds the list
        return json.dumps({"tool_calls": [{"name": c.name, "arguments": json.loads(c.arguments)} for c in calls]}, ensure_ascii=False)
    blocks = [fmt.render_tool_call(c) for c in calls]
    wrap = fmt.GRAMMAR.calls_wrap
    if wrap is None or not wrap[1]:
        return "\n".join(blocks)
    opens, close = wrap
    inner = [b.removeprefix(opens[0]).removesuffix(close) for b in blocks]
    return opens[0] + "".join(inner) + close


def check_calls(fmt_id: str, tools: list[ToolSpec], text: str) -> list[ToolCall]:
    """The family's parser reads `text`: every call names an offered tool, its arguments valid."""
    parsed = FORMATS[fmt_id].parse(text, tools)
    by_name = {t.name: t for t in tools}
    for call in parsed.tool_calls:
        assert call.name in by_name, (call, text)
        jsonschema.validate(json.loads(call.arguments), by_name[call.name].parameters)
    return parsed.tool_calls


# ---- tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt_id", IDS)
@pytest.mark.parametrize("parallel", [True, False])
def test_constraints_compile_for_every_family(fmt_id: str, parallel: bool) -> None:
    tools = [ToolSpec("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                                           "required": ["city"]}),
             ToolSpec("ping", "p", {"type": "object", "properties": {}}),
             # a $ref to the tool's own $defs: it must resolve wherever the family nests the schema
             ToolSpec("convert", "c", {"type": "object", "properties": {"unit": {"$ref": "#/$defs/unit"}}, "required": ["unit"],
                                       "$defs": {"unit": {"type": "string", "enum": ["C", "F"]}}})]
    fmt = FORMATS[fmt_id]
    grammars = [constraint.required(fmt, tools, parallel, thinking_open=False).grammar,
                constraint.lazy(fmt, tools, parallel).grammar]
    if fmt.REASONING is not None:
        grammars.append(constraint.required(fmt, tools, parallel, thinking_open=True).grammar)
    for g in grammars:
        assert not llguidance.LLMatcher.validate_grammar(g), g


@pytest.mark.parametrize("fmt_id", IDS)
def test_what_the_renderer_writes_is_accepted_and_reads_back(tok: Any, fmt_id: str) -> None:
    @given(data=st.data(), tools=tool_specs(), parallel=st.booleans())
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(data: st.DataObject, tools: list[ToolSpec], parallel: bool) -> None:
        fmt = FORMATS[fmt_id]
        calls = data.draw(calls_for(tools, parallel))
        text = rendered(fmt_id, calls)
        c = constraint.required(fmt, tools, parallel, thinking_open=False)
        assert accepts(tok, c.grammar, text), (text, [t.parameters for t in tools], c.grammar)
        got = check_calls(fmt_id, tools, text)
        assert [(g.name, json.loads(g.arguments)) for g in got] == [(c.name, json.loads(c.arguments)) for c in calls]
        if not parallel:  # one call only
            assert not accepts(tok, c.grammar, rendered(fmt_id, calls + calls))
        if fmt_id != "generic_json":  # lazily: from the first marker the renderer wrote on
            lz = constraint.lazy(fmt, tools, parallel)
            at = min((text.find(m) for m, _ in lz.triggers if text.find(m) >= 0), default=-1)
            assert at >= 0, (text, lz.triggers)
            assert accepts(tok, lz.grammar, text[at:]), (text[at:], lz.grammar)

    check()


@pytest.mark.parametrize("fmt_id", IDS)
def test_whatever_the_grammar_accepts_reads_back_as_valid_calls(tok: Any, fmt_id: str) -> None:
    """Random edits of a call as written: where the grammar still accepts the text, the parser
    reads calls from it and each one's arguments validate."""

    @given(data=st.data(), tools=tool_specs())
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(data: st.DataObject, tools: list[ToolSpec]) -> None:
        fmt = FORMATS[fmt_id]
        text = rendered(fmt_id, data.draw(calls_for(tools, True)))
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(text)))
            cut = data.draw(st.integers(0, 3))
            text = text[:at] + data.draw(st.sampled_from(["", "x", "1", '"', "\\", "\n", " ", "}", "]", "0.5", "true", "é"])) + text[at + cut :]
        grammar = constraint.required(fmt, tools, True, thinking_open=False).grammar
        if accepts(tok, grammar, text):
            assert check_calls(fmt_id, tools, text), text

    check()


@pytest.mark.parametrize("fmt_id", [f for f in IDS if FORMATS[f].REASONING is not None and f != "gpt_oss"])
def test_reasoning_first_then_calls(tok: Any, fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    assert fmt.REASONING is not None
    open_, close = fmt.REASONING
    tools = [ToolSpec("ping", "p", {"type": "object", "properties": {}})]
    call = rendered(fmt_id, [ToolCall("call_1", "ping", "{}")])
    free = constraint.required(fmt, tools, False, thinking_open=False).grammar
    assert accepts(tok, free, call) and accepts(tok, free, f"{open_}Let me think: a ping.{close}\n\n{call}")
    assert not accepts(tok, free, f"{open_}Let me think: a ping.{close}\n\nHello")
    opened = constraint.required(fmt, tools, False, thinking_open=True)
    assert opened.triggers == ((close, False),)  # the grammar holds from the close on
    assert accepts(tok, opened.grammar, f"{close}\n\n{call}")


def test_python_parameter_names_must_be_identifiers() -> None:
    tools = [ToolSpec("f", parameters={"type": "object", "properties": {"a-b": {}}})]
    with pytest.raises(Unsupported, match="identifier"):
        constraint.required(FORMATS["gemma3_tool_code"], tools, True, thinking_open=False)


def test_a_marker_that_is_a_special_token_is_written_as_that_token_or_its_text() -> None:
    w = Writer({"<|action_start|>": 7, "<|plugin|>": 9})
    assert w.mark("<|action_start|><|plugin|>") == '(<[7]> | "<|action_start|>") (<[9]> | "<|plugin|>")'
    assert w.mark("x<|plugin|>y") == '"x" (<[9]> | "<|plugin|>") "y"'
    assert Writer().mark("<tool_call>") == '"<tool_call>"'


@pytest.mark.parametrize("fmt_id", [f for f in IDS if f != "generic_json"])
def test_layout_newlines_the_grammar_allows_are_read(tok: Any, fmt_id: str) -> None:
    """The grammar lets a newline follow a block's marker and precede its close (a model may
    write one); the parser reads the same calls from such a block (DeepSeek V3's header did not)."""
    fmt = FORMATS[fmt_id]
    tools = [ToolSpec("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]
    calls = [ToolCall("call_0", "get_weather", json.dumps({"city": "Paris"}))]
    text = rendered(fmt_id, calls)
    t = constraint.canonical(fmt)
    at = text.find(t.marker) + len(t.marker)
    spaced = text[:at] + "\n" + text[at:]
    c = constraint.required(fmt, tools, False, thinking_open=False)
    if not accepts(tok, c.grammar, spaced):
        return  # the family's marker already ends its line, or the body begins with its own lead
    got = check_calls(fmt_id, tools, spaced)
    assert [(g.name, json.loads(g.arguments)) for g in got] == [("get_weather", {"city": "Paris"})], spaced


@pytest.mark.parametrize("fmt_id", [f for f in IDS if f != "generic_json"])
@pytest.mark.parametrize("lead", ["\n", "\n\n", "\n\n\n"])
def test_newlines_before_a_bounded_value_are_never_read_as_part_of_it(tok: Any, fmt_id: str, lead: str) -> None:
    """Newlines a model writes before a value: where the grammar lets them through, the value
    read back still matches its schema (Qwen3-Coder's grammar let two through after the open
    tag, the reader took one as layout, and "\\none" failed `^[a-z]{2,8}$`)."""
    schema = {"type": "object", "required": ["code", "tag", "n"], "properties": {
        "code": {"type": "string", "pattern": "^[a-z]{2,8}$"}, "tag": {"type": "string", "maxLength": 4},
        "n": {"type": "integer", "minimum": 0, "maximum": 9}}}
    tools = [ToolSpec("get_code", "c", schema)]
    text = rendered(fmt_id, [ToolCall("call_0", "get_code", json.dumps({"code": "qzx", "tag": "wv", "n": 7}))])
    grammar = constraint.required(FORMATS[fmt_id], tools, False, thinking_open=False).grammar
    assert accepts(tok, grammar, text), text
    for value in ("qzx", "wv", "7"):
        at = text.find(value)
        spaced = text[:at] + lead + text[at:]
        if accepts(tok, grammar, spaced):
            check_calls(fmt_id, tools, spaced)


@pytest.mark.parametrize("fmt_id", IDS)
def test_an_array_holds_between_min_items_and_max_items(tok: Any, fmt_id: str) -> None:
    """minItems / maxItems hold in every family's grammar (the literal styles, key-value and
    pythonic, spelt a list as any number of items: CI drew FunctionGemma writing 7 of at most 3)."""
    schema = {"type": "object", "required": ["colors"], "properties": {
        "colors": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "minItems": 2, "maxItems": 3}}}
    tools = [ToolSpec("paint", "p", schema)]
    grammar = constraint.required(FORMATS[fmt_id], tools, False, thinking_open=False).grammar
    for n in range(1, 6):
        colors = (["red", "green", "blue"] * 2)[:n]
        text = rendered(fmt_id, [ToolCall("call_0", "paint", json.dumps({"colors": colors}))])
        assert accepts(tok, grammar, text) == (2 <= n <= 3), (n, text)


def test_glm_values_with_backslashes_read_back_and_hold_their_bounds(tok: Any) -> None:
    """GLM's reader decodes JSON's short escapes (`\\n`, `\\"`, `\\\\`): its renderer doubles a
    string's backslashes, and a bounded string's grammar counts an escape as the one character
    it reads as (it counted raw characters: `\\n\\n` met minLength 4 and read back as 2)."""
    fmt = FORMATS["glm45"]
    tools = [ToolSpec("f", "", {"type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 4}},
                                "required": ["s"]})]
    grammar = constraint.required(fmt, tools, False, thinking_open=False).grammar

    def call(raw: str) -> str:
        return f"<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>{raw}</arg_value>\n</tool_call>"

    for value in ["C:\\n", "a\\b\\", '\\"\\', "\\\\\\\\", "a\nb"]:  # backslashes next to what would read as escapes
        text = rendered("glm45", [ToolCall("c", "f", json.dumps({"s": value}))])
        assert accepts(tok, grammar, text), text
        assert [json.loads(c.arguments) for c in check_calls("glm45", tools, text)] == [{"s": value}]
    assert accepts(tok, grammar, call("\\n\\t\\\\"))  # three escapes: three characters
    assert not accepts(tok, grammar, call("\\n\\n"))  # four raw characters, two read
    assert not accepts(tok, grammar, call("ab\\q"))  # a backslash the reader keeps would count twice
