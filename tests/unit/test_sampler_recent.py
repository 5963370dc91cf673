"""The penalties and DRY applied to their windows' tokens only (engine/sampler.Recent), with
DRY cloned from one made per multiplier (DrySamplers), pick what llama.cpp's whole chain of
freshly made samplers picks over the whole row, token after token, whatever the history, bias,
penalties and sampling settings; and the logprobs stay the model's."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import llama_cpp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolserve.engine.sampler import TOKEN_DATA, DrySamplers, Sampler, chain
from toolserve.models.files import bundled_model
from toolserve.types import SamplingParams

VOCAB = 300  # the rows drawn here: the first tokens of the bundled model's vocabulary


@pytest.fixture(scope="module")
def vocab() -> Iterator[Any]:
    llm = llama_cpp.Llama(str(bundled_model()), vocab_only=True, verbose=False)
    yield llm._model.vocab  # DRY reads the model's pieces for its breakers
    llm.close()


@pytest.fixture(scope="module")
def drys(vocab: Any) -> Iterator[DrySamplers]:
    made = DrySamplers(vocab)  # shared by every example, as the engine shares its own
    yield made
    made.close()


def whole_chain_picks(params: SamplingParams, prompt: list[int], rows: list[np.ndarray], vocab: Any) -> list[int]:
    """llama.cpp's chain with every sampler in it, over each whole row, as before `Recent`."""
    s = chain(params, prompt, VOCAB, vocab)
    out = []
    try:
        for row in rows:
            data = np.empty(VOCAB, dtype=TOKEN_DATA)
            data["id"] = np.arange(VOCAB, dtype=np.int32)
            data["logit"] = row
            data["p"] = 0.0
            cur = llama_cpp.llama_token_data_array(
                data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), size=VOCAB, selected=-1, sorted=False
            )
            llama_cpp.llama_sampler_apply(s.sampler, ctypes.byref(cur))
            token = int(data["id"][cur.selected])
            llama_cpp.llama_sampler_accept(s.sampler, token)
            out.append(token)
    finally:
        s.close()
    return out


def rows_of(seed: int, n: int) -> list[np.ndarray]:
    """Rows where a few tokens lead (so penalties and DRY change the pick), values on a coarse grid
    (ties included)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        row = rng.integers(-40, 10, VOCAB).astype(np.float32) / 4
        row[rng.integers(0, 12, rng.integers(0, 5))] += 6.0
        rows.append(row)
    return rows


@st.composite
def cases(draw: st.DrawFn) -> tuple[SamplingParams, list[int], list[np.ndarray]]:
    greedy = draw(st.booleans())
    params = SamplingParams(
        max_tokens=64,
        temperature=0.0 if greedy else draw(st.sampled_from([0.5, 1.0])),
        top_k=draw(st.sampled_from([0, 5, 40])),
        top_p=draw(st.sampled_from([1.0, 0.9])),
        min_p=draw(st.sampled_from([0.0, 0.05])),
        seed=draw(st.integers(0, 1000)),
        repetition_penalty=draw(st.sampled_from([1.0, 1.1, 1.5])),
        frequency_penalty=draw(st.sampled_from([0.0, 0.5, -0.5])),
        presence_penalty=draw(st.sampled_from([0.0, 0.7])),
        dry_multiplier=draw(st.sampled_from([0.0, 0.8, 2.0])),
        penalize_prompt=draw(st.booleans()),
        logit_bias=draw(st.dictionaries(st.integers(0, 20), st.sampled_from([-100.0, -2.5, 3.0]), max_size=3)),
    )
    prompt = draw(st.lists(st.integers(0, 15), max_size=80))
    return params, prompt, rows_of(draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 40)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_the_recent_samplers_on_their_windows_pick_as_the_whole_chain(
    vocab: Any, drys: DrySamplers, case: tuple[SamplingParams, list[int], list[np.ndarray]]
) -> None:
    params, prompt, rows = case
    want = whole_chain_picks(params, prompt, rows, vocab)
    sampler = Sampler(params, prompt, VOCAB, drys)
    try:
        got = [sampler.pick(None, 0, kept=row)[0] for row in rows]
    finally:
        sampler.close()
    assert got == want


def test_a_long_answer_leaves_the_windows() -> None:
    """Past DRY's 1024 tokens the oldest token is out of every window: a repeat of it is no
    longer penalised, as in llama.cpp's ring buffers."""
    params = SamplingParams(max_tokens=2000, temperature=0.0, repetition_penalty=2.0, penalize_prompt=False)
    lead = np.zeros(VOCAB, dtype=np.float32)
    lead[7] = 1.0  # 7 leads by 1.0: with it penalised (1.0 / 2), 8 (0.9) wins
    lead[8] = 0.9
    other = np.zeros(VOCAB, dtype=np.float32)
    other[9] = 5.0
    rows = [lead, *[other] * 1100, lead]
    sampler = Sampler(params, [], VOCAB)
    try:
        got = [sampler.pick(None, 0, kept=row)[0] for row in rows]
    finally:
        sampler.close()
    assert got[0] == 7 and got[-1] == 7  # 7 was 1101 tokens ago: outside the 64-token window
    assert got == whole_chain_picks(params, [], rows, None)


def test_logprobs_are_the_models_not_the_penalised_ones() -> None:
    params = SamplingParams(max_tokens=4, temperature=0.0, repetition_penalty=1.5, logprobs=2, logit_bias={3: -100.0})
    row = np.zeros(VOCAB, dtype=np.float32)
    row[3], row[4] = 2.0, 1.0
    sampler = Sampler(params, [4], VOCAB)
    try:
        token, lp = sampler.pick(None, 0, kept=row)
    finally:
        sampler.close()
    assert token == 4 and lp is not None
    assert [t for t, _ in lp.top] == [3, 4]  # the model's own ranking, before bias and penalty
    peak = 2.0
    lse = peak + float(np.log(np.exp(row - peak).sum()))
    assert lp.logprob == pytest.approx(1.0 - lse)


def test_dry_is_made_once_per_multiplier(vocab: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[float] = []
    init = llama_cpp.llama_sampler_init_dry

    def counted(v: Any, multiplier: float, *rest: Any) -> Any:
        made.append(multiplier)
        return init(v, multiplier, *rest)

    monkeypatch.setattr(llama_cpp, "llama_sampler_init_dry", counted)
    drys = DrySamplers(vocab)
    try:
        for m in [0.8, 0.8, 2.0, 0.8, *[10.0 + k for k in range(DrySamplers.KEEP)], 0.8]:
            llama_cpp.llama_sampler_free(drys.new(m))
    finally:
        drys.close()
    # 0.8 once, 2.0 once, the KEEP others once each; 0.8 made again after KEEP others pushed it out
    assert made == [0.8, 2.0, *[10.0 + k for k in range(DrySamplers.KEEP)], 0.8]


@pytest.mark.parametrize(
    ("row", "bias", "want"),
    [
        ({5: 2.0, 9: 2.0}, {}, 5),  # a tie: the first of the largest, as llama.cpp's greedy loop keeps it
        ({5: 2.0, 9: 2.0}, {5: -0.5}, 9),
        ({5: 2.0, 9: 1.0}, {9: 1.0}, 5),  # the bias makes a tie: still the first
        ({0: -1.0}, {}, 1),  # every other logit is 0: the largest is token 1
        ({5: 3.0}, {5: -100.0, 299: 0.5}, 299),
        ({5: 3.0}, {5: -100.0, 400: 9.0}, 0),  # a bias past the vocabulary is skipped, as llama.cpp skips it
    ],
)
def test_greedy_picks_the_first_largest_logit_as_the_chain_does(row: dict[int, float], bias: dict[int, float], want: int) -> None:
    """Greedy skips llama.cpp's chain (engine/sampler.Sampler): the pick is the chain's, ties included."""
    logits = np.zeros(VOCAB, dtype=np.float32)
    for token, value in row.items():
        logits[token] = value
    params = SamplingParams(max_tokens=4, temperature=0.0, logit_bias=bias)
    sampler = Sampler(params, [], VOCAB)
    try:
        got = sampler.pick(None, 0, kept=logits)[0]
    finally:
        sampler.close()
    assert got == want == whole_chain_picks(params, [], [logits], None)[0]
