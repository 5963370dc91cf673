"""Grammar helpers: schemas moved into one document, closed objects, one JSON layout, compile errors
(every family's call grammar: test_constraints.py)."""

from __future__ import annotations

import llguidance
import pytest

from toolserve.formats.grammar import call_object_schema, relocate
from toolserve.types import ToolSpec

ADDR = {"type": "object", "properties": {"zip": {"type": "string"}}}


def test_relocate_rewrites_local_refs() -> None:
    schema = {"type": "object", "$defs": {"addr": ADDR}, "properties": {"to": {"$ref": "#/$defs/addr"}, "cc": {"items": {"$ref": "#/definitions/addr"}}}}
    fixed, defs = relocate(schema, "t0")
    assert "$defs" not in fixed
    assert fixed["properties"]["to"] == {"$ref": "#/$defs/t0_addr"}
    assert fixed["properties"]["cc"]["items"] == {"$ref": "#/$defs/t0_addr"}
    assert defs == {"t0_addr": ADDR}


def test_relocate_keeps_recursion_to_the_root() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    fixed, defs = relocate(tree, "t1")
    assert fixed["properties"]["kids"]["items"] == {"$ref": "#/$defs/t1_root"}
    assert defs["t1_root"] == fixed


def test_two_tools_with_same_def_names_do_not_clash() -> None:
    a = ToolSpec("a", parameters={"type": "object", "$defs": {"x": {"type": "string"}}, "properties": {"v": {"$ref": "#/$defs/x"}}})
    b = ToolSpec("b", parameters={"type": "object", "$defs": {"x": {"type": "integer"}}, "properties": {"v": {"$ref": "#/$defs/x"}}})
    schema = call_object_schema([a, b])
    assert set(schema["$defs"]) == {"t0_x", "t1_x"}


def test_objects_are_closed_unless_the_schema_says_otherwise() -> None:
    from toolserve.formats.grammar import closed

    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}, "c": {"enum": [{"properties": {}}]}}}
    out = closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["c"] == {"enum": [{"properties": {}}]}  # values are data, not schemas
    assert closed({"type": "object", "properties": {}, "additionalProperties": True})["additionalProperties"] is True
    odd = closed({"properties": {"properties": {"type": "string"}}})  # a parameter named "properties"
    assert odd["properties"] == {"properties": {"type": "string"}}


@pytest.fixture(scope="module")
def smollm2_tokenizer():  # type: ignore[no-untyped-def]
    import llama_cpp
    from llguidance.llamacpp import lltokenizer_from_vocab

    from toolserve.models.files import bundled_model

    llm = llama_cpp.Llama(str(bundled_model()), vocab_only=True, verbose=False)
    yield lltokenizer_from_vocab(llm._model.vocab)  # it reads llama.cpp's vocabulary in place: llm lives on
    llm.close()


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ('{"a": 1, "b": "x y"}', True),
        ('{"a":1,"b":"x"}', False),
        ('{ "a": 1, "b": "x"}', False),
        ('{"a": 1,\n"b": "x"}', False),
        ('{"a": 1, "b": "x"}\n\n', False),
    ],
)
def test_json_has_one_layout(smollm2_tokenizer, text: str, accepted: bool) -> None:  # type: ignore[no-untyped-def]
    """No free blank space in constrained JSON: a weak model cannot pad until max_tokens."""
    from toolserve.formats.grammar import response_format_grammar

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"]}
    matcher = llguidance.LLMatcher(smollm2_tokenizer, response_format_grammar("json_schema", schema), log_level=0)
    ok = matcher.consume_tokens(smollm2_tokenizer.tokenize_str(text)) and matcher.is_accepting()
    assert ok is accepted


def test_a_grammar_seen_before_is_not_compiled_again(smollm2_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from toolserve.constrain.matcher import Constrainer
    from toolserve.errors import InvalidRequest
    from toolserve.formats.grammar import response_format_grammar

    c = Constrainer(lambda: smollm2_tokenizer, lambda t: b"", 49152)
    grammar = response_format_grammar("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    first, again = c.factory(grammar, param="response_format"), c.factory(grammar, param="response_format")
    assert first._template is again._template  # the compiled matcher, shared
    one, two = first(), again()  # each generation still gets its own copy of it
    for token in smollm2_tokenizer.tokenize_str('{"a": 1'):
        one.accept(token)
    assert not one.abandoned and two.forbidden() is not None and not two.done()
    for _ in range(2):  # a grammar that does not compile is refused every time, never remembered
        with pytest.raises(InvalidRequest):
            c.factory('start: "a" undefined_rule\n', param="tools")


# a bounded text lexeme as the markup families wrote it before: an intersection that runs
# llguidance's lexer out of its expression budget once masks are computed over SmolLM2's vocabulary
BUDGET_BREAKER = (
    'start: "<parameter=" "city" ">" T "\\n"? "<parameter=" "unit" ">" ("C"|"F") "</parameter>"\n'
    "T: /(?s:.*)<\\/parameter>/ & ~/(?s:.*(?:<\\/parameter>|<parameter=|<\\/function>|<\\/tool_call>)(?s:.{12,}))/"
    " & /\\n?(?s:.{0,30})\\n?<\\/parameter>/\n"
)


def test_a_matcher_that_breaks_is_dropped_with_its_template(smollm2_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The copies of a compiled grammar share its lexer: one that runs out of budget leaves every
    later copy able to end the text only (answers of zero tokens). The broken answer goes on
    free, and the next generation compiles the grammar afresh."""
    from toolserve.constrain.matcher import Constrainer

    c = Constrainer(lambda: smollm2_tokenizer, lambda t: b"", 49152)
    factory = c.factory(BUDGET_BREAKER, param="tools")
    broken = factory()
    for token in smollm2_tokenizer.tokenize_str("<parameter=city>Paris</parameter>\n"):
        if broken.forbidden() is None:
            break
        broken.accept(token)
    assert broken.abandoned and broken.forbidden() is None  # free from here on, not stopped
    for fresh in (factory(), c.factory(BUDGET_BREAKER, param="tools")()):  # the next choice, the next request
        mask = fresh.forbidden()
        assert mask is not None and not fresh.abandoned
        # a live matcher's mask: the call's first token, not "only the end of text"
        assert mask[smollm2_tokenizer.eos_token] and not mask[smollm2_tokenizer.tokenize_str("<parameter")[0]]


@pytest.mark.parametrize("fmt_id", ["qwen3_coder", "glm45", "minimax_m2", "seed_oss"])
def test_a_bounded_markup_text_keeps_its_lexer_in_budget(smollm2_tokenizer, fmt_id: str) -> None:  # type: ignore[no-untyped-def]
    """The same bounded string under each markup family, masks computed at every token of a
    call: no lexer error on the way (it came back as an answer cut at `</parameter`)."""
    import numpy as np

    from tests.unit.test_constraints import rendered
    from toolserve.formats import constraint
    from toolserve.formats.registry import FORMATS
    from toolserve.types import ToolCall

    tool = ToolSpec("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                                          "unit": {"type": "string", "enum": ["C", "F"]}},
                                         "required": ["city", "unit"]})
    other = ToolSpec("get_time", "t", {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, "required": ["zone"]})
    grammar = constraint.required(FORMATS[fmt_id], [tool, other], False, thinking_open=False).grammar
    m = llguidance.LLMatcher(smollm2_tokenizer, grammar, log_level=0)
    bits = np.zeros((49152 + 31) // 32, dtype=np.int32)
    for token in smollm2_tokenizer.tokenize_str(rendered(fmt_id, [ToolCall("c", "get_weather", '{"city": "Paris", "unit": "C"}')])):
        m.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        assert not m.is_error(), m.get_error()
        assert m.consume_token(token), m.get_error()
    assert m.is_accepting()
