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
