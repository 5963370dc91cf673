"""Any text, not just the fixtures: every family must never raise, must keep the streaming
contract, and must give the same message for the whole text and for any split of it."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolserve.formats.deltas import rebuild
from toolserve.formats.registry import FORMATS
from toolserve.types import Delta

from .formats_fixtures import ALL_CASES, TOOLS, Case
from .test_formats_conformance import check_contract

SEEDS: dict[str, list[str]] = {}
for _fmt, _name, _case in ALL_CASES:
    if isinstance(_case, Case):
        SEEDS.setdefault(_fmt, []).append(_case.text)


def parse(fmt_id: str, pieces: list[str], tools: bool, thinking_open: bool) -> list[Delta]:
    p = FORMATS[fmt_id].new_parser(TOOLS if tools else [], thinking_open=thinking_open)
    out: list[Delta] = []
    for piece in pieces:
        out += p.feed(piece)
    return out + p.finish()


def normalised(deltas: list[Delta]) -> tuple:
    msg = rebuild(deltas)
    for call in msg.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)
    ids = [c.id if not c.id.startswith("call_") else "" for c in msg.tool_calls]
    return msg.content, msg.reasoning, [(c.name, c.arguments) for c in msg.tool_calls], ids


@st.composite
def mutated(draw: st.DrawFn, fmt_id: str) -> str:
    text = draw(st.sampled_from(SEEDS[fmt_id]))
    for _ in range(draw(st.integers(0, 3))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i, min(len(text), i + 6)))
        op = draw(st.sampled_from(["delete", "insert", "cut"]))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(['"', "{", "}", "<", ">", "\n", ",", "]", "(", "\\", "x"])) + text[i:]
        else:
            text = text[:i]
    return text


@pytest.mark.parametrize("fmt_id", sorted(FORMATS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), tools=st.booleans(), thinking_open=st.booleans())
def test_any_text_any_split(fmt_id: str, data: st.DataObject, tools: bool, thinking_open: bool) -> None:
    text = data.draw(mutated(fmt_id))
    n = len(text)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=min(n, 30))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=False)]
    whole = parse(fmt_id, [text], tools, thinking_open)
    split = parse(fmt_id, pieces, tools, thinking_open)
    check_contract(whole)
    check_contract(split)
    assert normalised(split) == normalised(whole)
