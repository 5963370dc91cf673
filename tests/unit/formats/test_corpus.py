"""The conformance corpora (corpus_<family>.py): every row non-streaming, split at every single
point, and in random pieces (hypothesis), through the conformance suite's parser run and rebuild."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .corpus_rows import CORPORA, Row
from .formats_fixtures import Case
from .test_formats_conformance import check_contract, expected, run, summary


def _load() -> list[tuple[str, Row]]:
    rows = []
    for corpus in CORPORA:
        module = importlib.import_module(f"{__package__}.corpus_{corpus}")
        rows += [(row.fmt or module.FORMAT_ID, row) for row in module.ROWS]
    return rows


ROWS = _load()
IDS = [f"{fmt}-{row.name}" for fmt, row in ROWS]


def case_of(row: Row) -> Case:
    calls = tuple((c[0], c[1], c[2] if len(c) > 2 else None) for c in row.calls)
    return Case(row.text, row.content, row.reasoning, calls, row.thinking_open)


def check(fmt: str, row: Row, pieces: list[str]) -> None:
    case = case_of(row)
    deltas = run(fmt, case, pieces)
    check_contract(deltas)
    assert summary(fmt, deltas) == expected(case), (row.source, pieces)


def test_rows_are_unique_and_name_their_source() -> None:
    assert len(set(IDS)) == len(IDS)
    assert all(row.source for _, row in ROWS)


@pytest.mark.parametrize(("fmt", "row"), ROWS, ids=IDS)
def test_non_streaming(fmt: str, row: Row) -> None:
    check(fmt, row, [row.text])


@pytest.mark.parametrize(("fmt", "row"), ROWS, ids=IDS)
def test_every_split_point(fmt: str, row: Row) -> None:
    for k in range(1, len(row.text)):
        check(fmt, row, [row.text[:k], row.text[k:]])
    check(fmt, row, list(row.text))


@pytest.mark.parametrize(("fmt", "row"), ROWS, ids=IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_splits(fmt: str, row: Row, data: st.DataObject) -> None:
    n = len(row.text)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=min(n, 40))))
    check(fmt, row, [row.text[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=False)])
