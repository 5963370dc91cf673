"""Sampling defaults a model brings (models/sampling.py): GGUF keys as llama.cpp reads them, and
which source wins."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from toolserve.engine.sampler import Sampler
from toolserve.models.files import bundled_model
from toolserve.models.sampling import (
    BUNDLED_SOURCE,
    LOOP,
    LOOP_SOURCE,
    PROTOCOL,
    Default,
    fill,
    from_gguf,
    model_defaults,
)
from toolserve.serving.conversation import fill_sampling
from toolserve.serving.loader import is_bundled
from toolserve.types import SamplingParams


@pytest.mark.parametrize(
    ("meta", "applied", "skipped"),
    [
        ({}, {}, []),
        ({"general.sampling.temp": 0.6, "general.sampling.top_k": 20, "general.sampling.top_p": 0.95}, {"temperature": 0.6, "top_k": 20.0, "top_p": 0.95}, []),
        ({"general.sampling.min_p": 0.05, "general.sampling.penalty_repeat": 1.05}, {"min_p": 0.05, "repetition_penalty": 1.05}, []),
        # llama.cpp reads the value's text as a number (strtof / strtol): a string counts, top_k is cut to an integer
        ({"general.sampling.temp": "0.7", "general.sampling.top_k": 40.9}, {"temperature": 0.7, "top_k": 40.0}, []),
        ({"general.sampling.temp": True, "general.sampling.top_p": [0.9]}, {}, ["general.sampling.temp=True (not a number)", "general.sampling.top_p=[0.9] (not a number)"]),
        ({"general.sampling.temp": "warm"}, {}, ["general.sampling.temp='warm' (not a number)"]),
        ({"general.sampling.temp": -1.0, "general.sampling.top_p": 0.0, "general.sampling.min_p": 1.5}, {}, ["general.sampling.temp=-1.0 (out of range)", "general.sampling.top_p=0.0 (out of range)", "general.sampling.min_p=1.5 (out of range)"]),
        ({"general.sampling.mirostat": 2, "general.sampling.sequence": "top_k;temperature"}, {}, ["general.sampling.sequence (no such sampler here)", "general.sampling.mirostat (no such sampler here)"]),
        ({"general.sampling.temp": float("nan")}, {}, ["general.sampling.temp=nan (not a number)"]),
    ],
)
def test_gguf_keys(meta: dict[str, object], applied: dict[str, float], skipped: list[str]) -> None:
    got, not_applied = from_gguf(meta)
    assert got == applied
    assert sorted(not_applied) == sorted(skipped)


def test_later_sources_win_field_by_field() -> None:
    meta = {"general.sampling.temp": 0.6, "general.sampling.top_k": 20}
    got = model_defaults(meta, bundled=True, source_sampling={"top_k": 30.0, "min_p": 0.1}, source_name="ollama (ollama:m)", flags={"min_p": 0.2})
    assert {k: (d.value, d.source) for k, d in got.items()} == {
        "temperature": (0.6, "gguf general.sampling.temp"),
        "top_p": (0.9, BUNDLED_SOURCE),
        "top_k": (30.0, "ollama (ollama:m)"),
        "min_p": (0.2, "--min-p"),
        "repetition_penalty": (1.0, "protocol default"),
        "dry_multiplier": (0.0, "protocol default"),
    }


def test_nothing_set_is_the_protocol() -> None:
    assert {k: d.value for k, d in model_defaults({}).items()} == PROTOCOL


def test_a_local_model_ends_loops_unless_it_or_a_flag_says_otherwise() -> None:
    local = model_defaults({}, local=True)
    assert {k: local[k] for k in LOOP} == {k: Default(v, LOOP_SOURCE) for k, v in LOOP.items()}
    assert LOOP["dry_multiplier"] > 0 and LOOP["repetition_penalty"] > 1
    assert model_defaults({}, local=True, flags={"dry_multiplier": 0.0})["dry_multiplier"] == Default(0.0, "--dry-multiplier")
    own = model_defaults({"general.sampling.penalty_repeat": 1.0}, local=True)["repetition_penalty"]
    assert own == Default(1.0, "gguf general.sampling.penalty_repeat")  # the model's own wins
    assert model_defaults({})["dry_multiplier"].value == 0.0  # an upstream: its own server's sampling


def test_tools_and_json_get_dry_without_the_penalty() -> None:
    local = model_defaults({}, local=True, bundled=True)
    assert fill(local) == {"temperature": 0.2, "top_p": 0.9, **LOOP}
    calls = fill(local, prose=False)
    assert calls == {"temperature": 0.2, "top_p": 0.9, "dry_multiplier": LOOP["dry_multiplier"]}
    # a penalty the model or the server asks for is theirs, tools or not
    flagged = model_defaults({}, local=True, flags={"repetition_penalty": 1.2})
    assert fill(flagged, prose=False)["repetition_penalty"] == 1.2


@pytest.mark.parametrize(
    ("sent", "penalize_prompt"),
    [
        (frozenset(), False),  # every penalty the server's: the answer only
        (frozenset({"repetition_penalty"}), True),  # the client's: llama.cpp's window, prompt included
        (frozenset({"presence_penalty"}), True),  # one sampler holds all three penalties
        (frozenset({"temperature"}), False),
    ],
)
def test_a_penalty_the_server_fills_in_counts_the_answer_only(sent: frozenset[str], penalize_prompt: bool) -> None:
    params = fill_sampling(SamplingParams(max_tokens=8), {"repetition_penalty": 1.1, "dry_multiplier": 0.8}, sent)
    assert params.penalize_prompt is penalize_prompt
    assert fill_sampling(SamplingParams(max_tokens=8), {"temperature": 0.2}, frozenset()).penalize_prompt  # no penalty filled


@pytest.mark.parametrize("penalize_prompt", [True, False])
def test_the_prompt_is_in_the_penalty_window_only_when_asked(penalize_prompt: bool) -> None:
    params = SamplingParams(max_tokens=8, temperature=0.0, repetition_penalty=1.1, penalize_prompt=penalize_prompt)
    logits = np.zeros(8, dtype=np.float32)
    logits[3], logits[4] = 1.0, 0.95  # 3 ahead, but not by the penalty's tenth
    sampler = Sampler(params, prompt=[3], n_vocab=8)
    try:
        first, _ = sampler.pick(None, 0, kept=logits)
        second, _ = sampler.pick(None, 0, kept=logits)
    finally:
        sampler.close()
    assert first == (4 if penalize_prompt else 3)
    assert second == (3 if penalize_prompt else 4)  # the answer's own token counts either way: 3, or both


def test_the_bundled_model_is_known_by_its_file_not_its_path(tmp_path: Path) -> None:
    bundled = bundled_model()
    copy = tmp_path / "blobs" / "sha256-0123"  # as an Ollama store names it
    copy.parent.mkdir()
    os.link(bundled, copy) if bundled.stat().st_dev == tmp_path.stat().st_dev else shutil.copyfile(bundled, copy)
    assert is_bundled(copy) and is_bundled(bundled)
    other = tmp_path / "other.gguf"
    with bundled.open("rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 1  # the same size, another hash
    other.write_bytes(bytes(data))
    assert not is_bundled(other)
    assert not is_bundled(tmp_path / "missing.gguf")


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        (frozenset(), SamplingParams(max_tokens=5, temperature=0.2, top_p=0.9, top_k=7)),
        (frozenset({"temperature"}), SamplingParams(max_tokens=5, temperature=1.5, top_p=0.9, top_k=7)),
        (frozenset({"temperature", "top_p", "top_k"}), SamplingParams(max_tokens=5, temperature=1.5, top_p=1.0, top_k=0)),
    ],
)
def test_a_request_keeps_what_it_sent(sent: frozenset[str], expected: SamplingParams) -> None:
    request = SamplingParams(max_tokens=5, temperature=1.5)
    got = fill_sampling(request, {"temperature": 0.2, "top_p": 0.9, "top_k": 7.0}, sent)
    assert got == expected
    assert isinstance(got.top_k, int)
