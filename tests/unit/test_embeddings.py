"""Pure parts of /v1/embeddings: picking each decode's inputs, normalisation, input checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve.engine.embed import l2_normalise, pick
from toolserve.errors import InvalidRequest
from toolserve.serving.embeddings import MAX_INPUTS, check_dimensions, token_lists


def batches(pending: list[list[int]], max_tokens: int, max_seqs: int) -> list[list[tuple[int, int]]]:
    """The decodes that `pick` makes of requests that all wait from the start: (request, input) pairs."""
    left = [list(p) for p in pending]
    done = [0] * len(pending)
    out = []
    while any(left):
        taken = pick(left, max_tokens, max_seqs)
        assert taken, "a step that computes nothing"
        out.append([(j, done[j] + k) for j, k in taken])
        for j in sorted({j for j, _ in taken}):
            n = sum(1 for jj, _ in taken if jj == j)
            assert [k for jj, k in taken if jj == j] == list(range(n))  # each request's next inputs, in order
            del left[j][:n]
            done[j] += n
    return out


@pytest.mark.parametrize(
    ("pending", "max_tokens", "max_seqs", "expected"),
    [
        ([[3]], 10, 4, [[(0, 0)]]),
        ([[3, 3, 3]], 10, 4, [[(0, 0), (0, 1), (0, 2)]]),
        ([[3, 3, 3, 3]], 10, 4, [[(0, 0), (0, 1), (0, 2)], [(0, 3)]]),  # 12 tokens > 10
        ([[1, 1, 1, 1, 1]], 10, 2, [[(0, 0), (0, 1)], [(0, 2), (0, 3)], [(0, 4)]]),  # sequences per batch
        ([[10, 1, 10]], 10, 4, [[(0, 0)], [(0, 1)], [(0, 2)]]),  # an input of exactly max_tokens fills a batch
        # a request of one input is taken in the first decode beside a large one, not after it
        ([[2, 2, 2, 2, 2, 2], [2]], 6, 8, [[(0, 0), (1, 0), (0, 1)], [(0, 2), (0, 3), (0, 4)], [(0, 5)]]),
        ([[1, 1, 1], [1, 1, 1]], 100, 4, [[(0, 0), (1, 0), (0, 1), (1, 1)], [(0, 2), (1, 2)]]),  # a round at a time
        ([[9, 1], [1]], 10, 4, [[(0, 0), (1, 0)], [(0, 1)]]),  # a request's next input waits its turn (order kept)
    ],
)
def test_pick(pending: list[list[int]], max_tokens: int, max_seqs: int, expected: list[list[tuple[int, int]]]) -> None:
    assert batches(pending, max_tokens, max_seqs) == expected


@given(
    st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=30), min_size=1, max_size=5),
    st.integers(50, 200),
    st.integers(1, 16),
)
def test_pick_covers_every_input_in_order_within_limits(pending: list[list[int]], max_tokens: int, max_seqs: int) -> None:
    steps = batches(pending, max_tokens, max_seqs)
    for j, lengths in enumerate(pending):
        assert [k for step in steps for jj, k in step if jj == j] == list(range(len(lengths)))
    for step in steps:
        assert step and len(step) <= max_seqs
        assert sum(pending[j][k] for j, k in step) <= max_tokens
    # every request still waiting gets an input into each decode that has room for it: none starves
    first = steps[0]
    assert {j for j, _ in first} == set(range(len(pending))) or len(first) == max_seqs or any(
        sum(pending[jj][k] for jj, k in first) + pending[j][0] > max_tokens for j in range(len(pending)) if j not in {jj for jj, _ in first}
    )


def test_l2_normalise() -> None:
    rows = np.array([[3.0, 4.0], [0.0, 0.0], [-2.0, 0.0]], dtype=np.float32)
    out = l2_normalise(rows)
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]])
    assert np.allclose(np.linalg.norm(out[[0, 2]], axis=1), 1.0)


class FakeEmbedder:
    """What token_lists reads of an Embedder: a tokenizer, the vocabulary size, the longest input."""

    n_vocab = 100
    n_ctx = 8
    dimensions = 16

    def tokenize(self, text: str) -> list[int]:
        if not text.strip():
            return []  # as a tokenizer that drops whitespace and adds no special tokens would
        return [1, *(ord(c) % 90 + 5 for c in text), 2]  # like BERT: a start and an end token around it


E: Any = FakeEmbedder()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("ab", [[1, ord("a") % 90 + 5, ord("b") % 90 + 5, 2]]),
        (["a", "b"], [[1, ord("a") % 90 + 5, 2], [1, ord("b") % 90 + 5, 2]]),
        ([5, 6, 7], [[5, 6, 7]]),  # one list of token ids: one input, taken as it is
        ([[5], [6, 7]], [[5], [6, 7]]),
        ([[0] * 8], [[0] * 8]),  # exactly the limit
    ],
)
def test_token_lists(data: Any, expected: list[list[int]]) -> None:
    assert token_lists(E, data) == expected


@pytest.mark.parametrize(
    ("data", "param", "words"),
    [
        ("", "input", "empty string"),
        (["a", "  "], "input[1]", "gives no tokens"),
        ([], "input", "is empty"),
        (["a", ""], "input[1]", "empty string"),
        ([[1], []], "input[1]", "empty list"),
        ([1, 100], "input", "token 100, outside the vocabulary (0..99)"),
        ([[1], [-1]], "input[1]", "token -1"),
        ("abcdefg", None, "maximum context length is 8 tokens, however you requested 9 tokens (9 in your prompt; 0 for the completion)"),
        ([[0] * 9], None, "requested 9 tokens"),
        (["a"] * (MAX_INPUTS + 1), "input", f"at most {MAX_INPUTS}"),
    ],
)
def test_token_lists_refuses(data: Any, param: str | None, words: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        token_lists(E, data)
    assert err.value.param == param
    assert err.value.status == 400
    assert words in err.value.message


def test_dimensions() -> None:
    check_dimensions(E, None)
    check_dimensions(E, 16)
    for wrong in (8, 17):
        with pytest.raises(InvalidRequest) as err:
            check_dimensions(E, wrong)
        assert err.value.param == "dimensions" and "16 dimensions" in err.value.message
