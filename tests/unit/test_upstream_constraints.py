"""The grammars raw mode sends a vLLM upstream (issue 42): one llguidance grammar per request,
with no arming outside it. For every family: `required` holds from the first token (after the
template's reasoning, when it opened one); `auto` lets any prose through and ends it at the
first call marker, from where only valid calls follow, and a lead marker (a bare `[` / `{`)
counts only where the answer starts. Checked with llguidance on the bundled model's vocabulary,
as the local engine's own grammars are in test_constraints.py."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import llguidance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_constraints import accepts, calls_for, check_calls, rendered, tool_specs, vocab
from toolserve.errors import Unsupported
from toolserve.formats import constraint
from toolserve.formats.registry import FORMATS
from toolserve.types import ToolCall, ToolSpec

LAZY = [f for f in sorted(FORMATS) if f not in ("generic_json", "gpt_oss")]  # their auto is not a marker grammar
# prose a model writes before a call, in no family's syntax (no markers, brackets or quotes)
PROSE = st.text(st.sampled_from([*string.ascii_letters, *" .,:;!?-\n", "é", "日"]), max_size=40)


@pytest.fixture(scope="module")
def tok() -> Iterator[Any]:
    yield from vocab()


WEATHER = ToolSpec("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def starts_with_lead(fmt_id: str, text: str) -> bool:
    """Whether the family's rendered call opens with a lead marker (pythonic `[`, bare `{`)."""
    return any(t.lead and text.lstrip().startswith(t.marker) for t in FORMATS[fmt_id].GRAMMAR.triggers)


@pytest.mark.parametrize("fmt_id", sorted(FORMATS))
def test_every_upstream_grammar_compiles_and_says_it_is_llguidance(fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    grammars = [constraint.required(fmt, [WEATHER], True, thinking_open=False, upstream=True).grammar]
    if fmt.REASONING is not None:
        opened = constraint.required(fmt, [WEATHER], True, thinking_open=True, upstream=True)
        assert opened.triggers == ()  # nothing to arm upstream: the grammar reads the reasoning itself
        grammars.append(opened.grammar)
    if fmt_id in LAZY:
        grammars += [constraint.upstream_lazy(fmt, [WEATHER], p, thinking_open=o) for p in (True, False) for o in (True, False)]
    else:
        with pytest.raises(Unsupported):
            constraint.upstream_lazy(fmt, [WEATHER], True)
    for g in grammars:
        # the header: vLLM's auto backend hands it to guidance (xgrammar refuses it)
        assert g.startswith("%llguidance {}\n"), g
        assert not llguidance.LLMatcher.validate_grammar(g), g


@pytest.mark.parametrize("fmt_id", LAZY)
def test_auto_upstream_prose_is_free_and_calls_after_it_are_held(tok: Any, fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]

    @given(data=st.data(), tools=tool_specs(), parallel=st.booleans(), prose=PROSE)
    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(data: st.DataObject, tools: list[ToolSpec], parallel: bool, prose: str) -> None:
        g = constraint.upstream_lazy(fmt, tools, parallel)
        assert accepts(tok, g, prose), (prose, g)
        calls = data.draw(calls_for(tools, parallel))
        call = rendered(fmt_id, calls)
        text = call if starts_with_lead(fmt_id, call) else f"{prose}\n{call}"
        assert accepts(tok, g, text), (text, g)
        got = check_calls(fmt_id, tools, text)
        # the prose changes nothing the parser reads (whether the renderer and the parser agree
        # on every value is test_constraints.py's question: GLM-4.5 reads `\\` in a raw value as `\`)
        alone = fmt.parse(call, tools).tool_calls
        assert [(c.name, json.loads(c.arguments)) for c in got] == [(c.name, json.loads(c.arguments)) for c in alone] != []
        # from the marker on the grammar holds: a tool that is not offered is refused
        wrong = rendered(fmt_id, [ToolCall("call_0", "not_offered", "{}")])
        assert not accepts(tok, g, wrong if starts_with_lead(fmt_id, wrong) else f"{prose}\n{wrong}"), g

    check()


@pytest.mark.parametrize("fmt_id", LAZY)
def test_auto_upstream_text_after_the_calls_holds_no_call(tok: Any, fmt_id: str) -> None:
    """After its calls a model may close what it opened (Qwen2.5-Coder wraps its <tool_call>
    blocks in a ```json fence): text that holds no call marker; a marker there is refused, so
    every call the parser reads was held by the grammar."""
    fmt = FORMATS[fmt_id]
    one = rendered(fmt_id, [ToolCall("call_1", "get_weather", '{"city": "Oslo"}')])
    two = rendered(fmt_id, [ToolCall("call_1", "get_weather", '{"city": "Oslo"}'), ToolCall("call_2", "get_weather", '{"city": "Rome"}')])
    g = constraint.upstream_lazy(fmt, [WEATHER], True)
    if starts_with_lead(fmt_id, one):  # calls from the answer's first character: nothing was opened before them
        assert not accepts(tok, g, f"{one}\nDone."), g
        return
    opener = "Here:\n"
    assert accepts(tok, g, f"{opener}{one}\nDone."), g
    assert accepts(tok, g, f"{opener}{two}\nDone."), g  # a next call is still a call
    got = check_calls(fmt_id, [WEATHER], f"{opener}{two}\nDone.")
    assert [(c.name, json.loads(c.arguments)) for c in got] == [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})]
    for marker in [t.marker for t in fmt.GRAMMAR.triggers if t.lazy and not t.lead]:  # a lead one mid-text is text
        assert not accepts(tok, g, f"{opener}{one}\nNow x{marker}"), (marker, g)
    single = constraint.upstream_lazy(fmt, [WEATHER], False)
    assert accepts(tok, single, f"{opener}{one}\nDone."), single


def test_auto_upstream_a_fence_around_hermes_calls_is_closed_not_called_again(tok: Any) -> None:
    g = constraint.upstream_lazy(FORMATS["hermes"], [WEATHER], True)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert accepts(tok, g, f"```json\n{call}\n```")
    assert accepts(tok, g, f"```json\n{call}\n{call}\n```")
    assert not accepts(tok, g, f"```json\n{call}\n``` <tool_call>")


@pytest.mark.parametrize("fmt_id", [f for f in LAZY if any(t.lead for t in FORMATS[f].GRAMMAR.triggers if t.lazy)])
def test_auto_upstream_lead_marker_counts_only_at_the_start(tok: Any, fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    lead = next(t.marker for t in fmt.GRAMMAR.triggers if t.lead and t.lazy)
    g = constraint.upstream_lazy(fmt, [WEATHER], True)
    assert accepts(tok, g, f"The list {lead}1, 2{lead[::-1]} is prose here.")  # not at the start: text
    assert not accepts(tok, g, f"  {lead}not a call at all")  # at the start: a call, and this is none


@pytest.mark.parametrize("fmt_id", [f for f in LAZY if FORMATS[f].REASONING is not None and not FORMATS[f].GRAMMAR.calls_in_reasoning])
def test_auto_upstream_reasoning_comes_first_and_arms_nothing(tok: Any, fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    assert fmt.REASONING is not None
    open_, close = fmt.REASONING
    call = rendered(fmt_id, [ToolCall("call_1", "get_weather", '{"city": "Oslo"}')])
    wrong = rendered(fmt_id, [ToolCall("call_1", "not_offered", "{}")])
    thought = f"I could write {wrong} but I will not."  # a marker inside the reasoning is reasoning
    model_opens = constraint.upstream_lazy(fmt, [WEATHER], False)
    assert accepts(tok, model_opens, f"{open_}{thought}{close}\n\nIt is sunny.")
    assert accepts(tok, model_opens, f"{open_}{thought}{close}\n\n{call}")
    assert not accepts(tok, model_opens, f"{open_}{thought}{close}\n\n{wrong}")
    template_opened = constraint.upstream_lazy(fmt, [WEATHER], False, thinking_open=True)
    assert accepts(tok, template_opened, f"{thought}{close}\n\n{call}")
    required = constraint.required(fmt, [WEATHER], False, thinking_open=True, upstream=True).grammar
    assert accepts(tok, required, f"{thought}{close}\n\n{call}")
    assert not accepts(tok, required, f"{thought}{close}\n\nIt is sunny.")


def test_a_marker_that_is_one_upstream_token_arms_as_that_token_or_its_text() -> None:
    g = constraint.upstream_lazy(FORMATS["hermes"], [WEATHER], False, specials={"<tool_call>": 151657, "</tool_call>": 151658})
    assert "<[151657]>" in g and '"<tool_call>"' in g  # the token, or the text spelled out (a lazy lexeme)
    assert "[lazy]" in g
    assert not llguidance.LLMatcher.validate_grammar(g), g


def test_required_upstream_holds_from_the_first_token(tok: Any) -> None:
    g = constraint.required(FORMATS["qwen3_coder"], [WEATHER], False, thinking_open=False, upstream=True).grammar
    call = rendered("qwen3_coder", [ToolCall("call_1", "get_weather", '{"city": "Oslo"}')])
    assert accepts(tok, g, call)
    assert not accepts(tok, g, f"Sure.\n{call}")


def test_an_answer_may_end_on_the_model_end_of_turn_token(tok: Any) -> None:
    """vLLM's guidance allows only the tokenizer's EOS where a grammar may end; a model whose
    turn ends on another token (`<|im_end|>`) gets it offered there, and only there."""
    end = 2  # <|im_end|> in the bundled model's vocabulary
    assert tok.decode_str([end]) == "<|im_end|>"
    call = rendered("hermes", [ToolCall("call_1", "get_weather", '{"city": "Oslo"}')])
    for g in (constraint.upstream_lazy(FORMATS["hermes"], [WEATHER], True),
              constraint.required(FORMATS["hermes"], [WEATHER], True, thinking_open=False, upstream=True).grammar):
        ended = constraint.upstream_ends(g, [end])
        assert not llguidance.LLMatcher.validate_grammar(ended), ended
        for text in ([call, f"{call}\n", f"{call}\n{call}\n"] if "lazy" not in ended else [call, f"It is sunny.\n{call}\n", "It is sunny."]):
            m = llguidance.LLMatcher(tok, ended, log_level=0)
            assert m.consume_tokens([*tok.tokenize_str(text), end]) and m.is_accepting(), text
        m = llguidance.LLMatcher(tok, ended, log_level=0)  # one newline before it, not a padding of them
        assert not (m.consume_tokens(tok.tokenize_str(f"{call}\n\n\n")) and m.is_accepting())
        m = llguidance.LLMatcher(tok, ended, log_level=0)
        half = tok.tokenize_str(call[: len(call) // 2])
        assert m.consume_tokens(half) and not m.consume_token(end)  # not inside a call
    assert constraint.upstream_ends("start: x\n", []) == "start: x\n"
