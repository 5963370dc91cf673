"""Pure parts of /v1/embeddings: packing inputs into batches, normalisation, input checks."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve.engine.embed import l2_normalise, pack
from toolserve.errors import InvalidRequest
from toolserve.serving.embeddings import MAX_INPUTS, check_dimensions, token_lists


@pytest.mark.parametrize(
    ("lengths", "max_tokens", "max_seqs", "expected"),
    [
        ([], 10, 4, []),
        ([3], 10, 4, [[0]]),
        ([3, 3, 3], 10, 4, [[0, 1, 2]]),
        ([3, 3, 3, 3], 10, 4, [[0, 1, 2], [3]]),  # 12 tokens > 10
        ([1, 1, 1, 1, 1], 10, 2, [[0, 1], [2, 3], [4]]),  # sequences per batch
        ([10, 1, 10], 10, 4, [[0], [1], [2]]),  # an input of exactly max_tokens fills a batch
        ([4, 6, 1], 10, 4, [[0, 1], [2]]),
    ],
)
def test_pack(lengths: list[int], max_tokens: int, max_seqs: int, expected: list[list[int]]) -> None:
    assert pack(lengths, max_tokens, max_seqs) == expected


@given(
    st.lists(st.integers(1, 50), max_size=60),
    st.integers(50, 200),
    st.integers(1, 16),
)
def test_pack_covers_every_input_in_order_within_limits(lengths: list[int], max_tokens: int, max_seqs: int) -> None:
    batches = pack(lengths, max_tokens, max_seqs)
    assert [i for b in batches for i in b] == list(range(len(lengths)))
    for b in batches:
        assert b and len(b) <= max_seqs
        assert sum(lengths[i] for i in b) <= max_tokens
    # greedy: the next batch's first input would not have fitted in the one before
    for prev, nxt in itertools.pairwise(batches):
        assert len(prev) == max_seqs or sum(lengths[i] for i in prev) + lengths[nxt[0]] > max_tokens


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
