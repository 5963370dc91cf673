"""One conformance suite over every family: non-streaming, 1-character streaming and random
splits (hypothesis) must all rebuild the expected message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolserve.formats.deltas import rebuild
from toolserve.formats.registry import FORMATS
from toolserve.types import ContentDelta, Delta, ReasoningDelta, ToolCallArgs, ToolCallStart

from .formats_fixtures import ALL_CASES, NA, SYNTAX, TOOLS, Case

APPLICABLE = [(f, n, c) for f, n, c in ALL_CASES if isinstance(c, Case)]
IDS = [f"{f}-{n}" for f, n, _ in APPLICABLE]


def run(fmt_id: str, case: Case, pieces: list[str]) -> list[Delta]:
    parser = FORMATS[fmt_id].new_parser(TOOLS, thinking_open=case.thinking_open)
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += parser.feed(piece)
    return deltas + parser.finish()


def check_contract(deltas: list[Delta]) -> None:
    """Starts come first and in index order, once each; arguments only follow a start."""
    started: list[int] = []
    ids: set[str] = set()
    for d in deltas:
        if isinstance(d, ToolCallStart):
            assert d.index == len(started), "indices must be 0, 1, 2... in order"
            assert d.name and d.id and d.id not in ids
            started.append(d.index)
            ids.add(d.id)
        elif isinstance(d, ToolCallArgs):
            assert d.index == started[-1], "arguments only for the open (latest) call"
            assert d.fragment
        elif isinstance(d, (ContentDelta, ReasoningDelta)):
            assert d.text


def summary(fmt_id: str, deltas: list[Delta]) -> tuple[str, str, tuple[tuple[str, Any, str | None], ...]]:
    msg = rebuild(deltas)
    keeps_ids = SYNTAX[fmt_id].ids is not None or fmt_id == "mistral_v11"
    calls = []
    for call in msg.tool_calls:
        args = json.loads(call.arguments)
        assert isinstance(args, dict)
        assert call.arguments == json.dumps(args, ensure_ascii=False), "arguments must be canonical"
        if not keeps_ids:
            assert call.id.startswith("call_")
        calls.append((call.name, args, call.id if keeps_ids and not call.id.startswith("call_") else None))
    return msg.content, msg.reasoning, tuple(calls)


def expected(case: Case) -> tuple[str, str, tuple[tuple[str, Any, str | None], ...]]:
    return case.content, case.reasoning, tuple(case.calls)


@pytest.mark.parametrize(("fmt_id", "name", "case"), APPLICABLE, ids=IDS)
def test_non_streaming(fmt_id: str, name: str, case: Case) -> None:
    deltas = run(fmt_id, case, [case.text])
    check_contract(deltas)
    assert summary(fmt_id, deltas) == expected(case)


@pytest.mark.parametrize(("fmt_id", "name", "case"), APPLICABLE, ids=IDS)
def test_one_char_pieces(fmt_id: str, name: str, case: Case) -> None:
    deltas = run(fmt_id, case, list(case.text))
    check_contract(deltas)
    assert summary(fmt_id, deltas) == expected(case)


@pytest.mark.parametrize(("fmt_id", "name", "case"), APPLICABLE, ids=IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_splits(fmt_id: str, name: str, case: Case, data: st.DataObject) -> None:
    n = len(case.text)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=min(n, 40))))
    pieces = [case.text[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=False)]
    deltas = run(fmt_id, case, pieces)
    check_contract(deltas)
    assert summary(fmt_id, deltas) == expected(case)


def test_every_family_has_fixtures() -> None:
    assert set(SYNTAX) == set(FORMATS)


@pytest.mark.parametrize(("fmt_id", "name", "na"), [(f, n, c) for f, n, c in ALL_CASES if isinstance(c, NA)],
                         ids=[f"{f}-{n}" for f, n, c in ALL_CASES if isinstance(c, NA)])
def test_not_applicable_cases_give_a_reason(fmt_id: str, name: str, na: NA) -> None:
    assert len(na.reason) > 10
