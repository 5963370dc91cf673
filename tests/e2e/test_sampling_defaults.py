"""Sampling defaults from the model: a GGUF with `general.sampling.*` keys (written with the `gguf`
package) gives them to every request that sends none of a field, on each protocol; a request's
own values win, and so do the server's flags. The bundled SmolLM2 gets its model card's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server
from tests.gguf_copies import with_keys
from toolserve.models.files import bundled_model

KEYS = {
    "general.sampling.temp": 0.0,  # greedy: what a request without temperature must show
    "general.sampling.top_k": 40,
    "general.sampling.top_p": 0.95,
    "general.sampling.min_p": 0.05,
    "general.sampling.mirostat": 2,  # read by llama.cpp, a sampler toolserve does not have
}
ASK = [{"role": "user", "content": "Write one sentence about the sea."}]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return with_keys(bundled_model(), tmp_path_factory.mktemp("sampled") / "smol-sampled.gguf", KEYS)


@pytest.fixture(scope="module")
def srv(sampled: Path) -> Iterator[Server]:
    s = Server(["--model", str(sampled), "--ctx-size", "1024", "--parallel", "1", "--log-level", "info"])
    yield s
    s.stop()


def chat(srv: Server, **extra: Any) -> str:
    r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 24, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def test_the_defaults_in_force_and_where_they_came_from(srv: Server) -> None:
    shown = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["toolserve"]["sampling_defaults"]
    assert shown == {
        "temperature": {"value": 0.0, "source": "gguf general.sampling.temp"},
        "top_p": {"value": 0.95, "source": "gguf general.sampling.top_p"},
        "top_k": {"value": 40, "source": "gguf general.sampling.top_k"},
        "min_p": {"value": 0.05, "source": "gguf general.sampling.min_p"},
        "repetition_penalty": {"value": 1.1, "source": "toolserve (ends loops)"},
        "dry_multiplier": {"value": 0.8, "source": "toolserve (ends loops)"},
    }
    log = srv.stderr_text()
    assert "sampling keys not applied: general.sampling.mirostat (no such sampler here)" in log


def test_a_request_that_sends_none_gets_them(srv: Server) -> None:
    greedy = chat(srv, temperature=0)
    assert {chat(srv, seed=s) for s in (1, 2, 3)} == {greedy}  # the GGUF's temperature 0, whatever the seed
    # the same on the other protocols and on completions
    model = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"]
    r = httpx.post(f"{srv.url}/v1/messages", json={"model": model, "max_tokens": 24, "messages": ASK}, timeout=120)
    assert r.json()["content"][0]["text"] == greedy
    r = httpx.post(f"{srv.url}/v1/responses", json={"input": ASK, "max_output_tokens": 24}, timeout=120)
    assert r.json()["output"][-1]["content"][0]["text"] == greedy
    prompt = {"prompt": "The sea is", "max_tokens": 16}
    plain = [httpx.post(f"{srv.url}/v1/completions", json={**prompt, "seed": s}, timeout=120).json()["choices"][0]["text"] for s in (1, 2)]
    explicit = httpx.post(f"{srv.url}/v1/completions", json={**prompt, "temperature": 0}, timeout=120).json()["choices"][0]["text"]
    assert plain == [explicit, explicit]


def test_a_request_s_own_values_win(srv: Server) -> None:
    answers = {chat(srv, temperature=1.0, top_k=0, seed=s) for s in (1, 2, 3, 4)}
    assert len(answers) > 1  # sampled: the request's temperature, not the GGUF's 0


def test_the_server_s_flags_win_over_the_model(sampled: Path) -> None:
    s = Server(["--model", str(sampled), "--ctx-size", "512", "--temperature", "0.7", "--repeat-penalty", "1.1"])
    try:
        shown = httpx.get(f"{s.url}/v1/models").json()["data"][0]["toolserve"]["sampling_defaults"]
        assert shown["temperature"] == {"value": 0.7, "source": "--temperature"}
        assert shown["repetition_penalty"] == {"value": 1.1, "source": "--repetition-penalty"}
        assert shown["top_k"] == {"value": 40, "source": "gguf general.sampling.top_k"}
    finally:
        s.stop()


def test_the_bundled_model_gets_its_model_card_s_settings(server: Server) -> None:
    shown = httpx.get(f"{server.url}/v1/models").json()["data"][0]["toolserve"]["sampling_defaults"]
    card = "model card (HuggingFaceTB/SmolLM2-135M-Instruct)"
    assert shown["temperature"] == {"value": 0.2, "source": card}
    assert shown["top_p"] == {"value": 0.9, "source": card}
