"""The hermes conformance corpus: every row non-streaming, split at every single point, and
in random pieces (hypothesis), through the conformance suite's parser run and rebuild."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .corpus_hermes import ROWS, Row
from .formats_fixtures import Case
from .test_formats_conformance import check_contract, expected, run, summary

IDS = [r.name for r in ROWS]


def case_of(row: Row) -> Case:
    return Case(row.text, row.content, row.reasoning, tuple((n, a, None) for n, a in row.calls), row.thinking_open)


def check(row: Row, pieces: list[str]) -> None:
    case = case_of(row)
    deltas = run("hermes", case, pieces)
    check_contract(deltas)
    assert summary("hermes", deltas) == expected(case), (row.source, pieces)


def test_rows_are_unique_and_name_their_source() -> None:
    assert len(set(IDS)) == len(IDS)
    assert all(r.source for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_non_streaming(row: Row) -> None:
    check(row, [row.text])


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_every_split_point(row: Row) -> None:
    for k in range(1, len(row.text)):
        check(row, [row.text[:k], row.text[k:]])
    check(row, list(row.text))


@pytest.mark.parametrize("row", ROWS, ids=IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_splits(row: Row, data: st.DataObject) -> None:
    n = len(row.text)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=min(n, 40))))
    check(row, [row.text[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=False)])
