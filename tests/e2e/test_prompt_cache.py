"""Prefix reuse from the live context and from snapshots, reported as cached_tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import CTX_SIZE, Server
from toolserve.engine.slots import PREFILL_CHUNK, SeqState, boundary, chunk_cuts
from toolserve.engine.vocab import Vocab
from toolserve.models.files import bundled_model

SYSTEM = "You are a helpful assistant for a shipping company. " * 20


def conversation(topic: str, turns: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i} about {topic}: tell me something new about {topic}."})
        msgs.append({"role": "assistant", "content": f"Answer {i}: {topic} is interesting in way number {i}."})
    msgs.append({"role": "user", "content": f"One last thing about {topic}?"})
    return msgs


def chat(http: httpx.Client, messages: list[dict[str, str]], **kw: object) -> dict:
    r = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 8, "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def n_tokens(http: httpx.Client, messages: list[dict[str, str]]) -> list[int]:
    return http.post("/tokenize", json={"messages": messages}).json()["tokens"]


def cached(resp: dict) -> int:
    return int(resp["usage"]["prompt_tokens_details"]["cached_tokens"])


def reuse(http: httpx.Client, earlier: list[int], prompt: list[int]) -> int:
    """What a prompt may reuse of an earlier one read whole before it in the same sequence: all
    of it when it is the same prompt (its last logits were kept), else the last chunk end within
    their common prefix (not the last token) before which the two reads cut alike, as
    engine/slots.py cuts prompts (its unit tests show that this is exact)."""
    assert http.get("/health").json()["toolserve"]["prompt_cache"]["chunk_tokens"] == PREFILL_CHUNK
    if list(earlier) == list(prompt):
        return len(prompt)
    vocab = Vocab(str(bundled_model()))
    try:
        turns = vocab.turns()
        held = chunk_cuts(earlier, turns)
        return SeqState(0, list(earlier), boundary(len(earlier), held), cuts=held).exact(prompt, chunk_cuts(prompt, turns))
    finally:
        vocab.close()


@pytest.fixture(scope="module")
def cache_server() -> Iterator[Server]:
    srv = Server(["--ctx-size", str(CTX_SIZE), "--cache-ram", "256", "--parallel", "1"])  # one sequence: the snapshot path, exact
    yield srv
    srv.stop()


@pytest.fixture()
def chttp(cache_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cache_server.url, timeout=120) as c:
        yield c


def test_same_prompt_twice(chttp: httpx.Client) -> None:
    msgs = conversation("anchors", 1)
    chat(chttp, msgs)
    second = chat(chttp, msgs)
    n = second["usage"]["prompt_tokens"]
    tokens = n_tokens(chttp, msgs)
    assert cached(second) == reuse(chttp, tokens, tokens) == n  # nothing is read again


def test_answer_cut_early_still_reports_its_cached_tokens(chttp: httpx.Client) -> None:
    """A stop string found at the first token ends the answer in the server process while the
    engine is still generating: the usage must carry the reuse all the same."""
    msgs = conversation("buoys", 1)
    text = chat(chttp, msgs)["choices"][0]["message"]["content"]
    assert text
    for _ in range(5):
        cut = chat(chttp, msgs, stop=[text[:1]], max_tokens=64)
        assert cut["choices"][0]["message"]["content"] == ""
        tokens = n_tokens(chttp, msgs)
        assert cached(cut) == reuse(chttp, tokens, tokens) > 0


def test_growing_conversation(chttp: httpx.Client) -> None:
    first = conversation("ropes", 2)
    r1 = chat(chttp, first)
    grown = [*first, {"role": "assistant", "content": "Ropes hold things."}, {"role": "user", "content": "And knots?"}]
    r2 = chat(chttp, grown)
    expected = reuse(chttp, n_tokens(chttp, first), n_tokens(chttp, grown))
    # the first prompt to the end of its last turn: all but the template's opening of the answer
    assert cached(r2) == expected > r1["usage"]["prompt_tokens"] - 8


def test_interleaved_conversations_both_hit(chttp: httpx.Client) -> None:
    a, b = conversation("harbours", 3), conversation("lighthouses", 3)
    chat(chttp, a), chat(chttp, b)
    a2 = [*a, {"role": "assistant", "content": "Harbours shelter ships."}, {"role": "user", "content": "More?"}]
    b2 = [*b, {"role": "assistant", "content": "Lighthouses guide ships."}, {"role": "user", "content": "More?"}]
    assert cached(chat(chttp, a2)) == reuse(chttp, n_tokens(chttp, a), n_tokens(chttp, a2)) > 0
    assert cached(chat(chttp, b2)) == reuse(chttp, n_tokens(chttp, b), n_tokens(chttp, b2)) > 0
    stats = chttp.get("/health").json()["toolserve"]["prompt_cache"]
    assert stats["restores"] >= 2
    assert 0 < stats["bytes"] <= stats["budget_bytes"]


def test_prompt_diverging_in_the_middle(chttp: httpx.Client) -> None:
    base = conversation("cargo", 3)
    changed = [dict(m) for m in base]
    changed[3]["content"] = "Something else entirely, about tides."
    chat(chttp, base)
    r = chat(chttp, changed)
    t1, t2 = n_tokens(chttp, base), n_tokens(chttp, changed)
    assert cached(r) == reuse(chttp, t1, t2) > 0


def test_stream_reports_cached_tokens(chttp: httpx.Client) -> None:
    msgs = conversation("buoys", 1)
    chat(chttp, msgs)
    body = {"messages": msgs, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    with chttp.stream("POST", "/v1/chat/completions", json=body) as resp:
        lines = [line for line in resp.iter_lines() if line.startswith("data: {")]

    usage = json.loads(lines[-1][6:])["usage"]
    tokens = n_tokens(chttp, msgs)
    assert usage["prompt_tokens_details"]["cached_tokens"] == reuse(chttp, tokens, tokens) > 0


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 42, "presence_penalty": 0.5, "repetition_penalty": 1.2}])
def test_hit_gives_the_same_output_as_no_cache(chttp: httpx.Client, sampling: dict) -> None:
    off = Server(["--ctx-size", str(CTX_SIZE), "--cache-ram", "0", "--parallel", "1"])
    try:
        with httpx.Client(base_url=off.url, timeout=120) as ohttp:
            msgs = conversation("sails", 2)
            chat(chttp, conversation("decoy", 2))  # the live context holds something else
            chat(chttp, msgs, max_tokens=2)  # warm
            chat(chttp, conversation("decoy", 2))
            hit = chat(chttp, msgs, max_tokens=40, **sampling)
            assert cached(hit) > 0
            miss = chat(ohttp, msgs, max_tokens=40, **sampling)
            assert cached(miss) == 0
            assert hit["choices"][0]["message"]["content"] == miss["choices"][0]["message"]["content"]
    finally:
        off.stop()


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
AGAIN = [
    {"temperature": 0, "logprobs": True, "top_logprobs": 3},
    {"temperature": 0.9, "seed": 42, "presence_penalty": 0.5, "repetition_penalty": 1.2, "logprobs": True},
    {"temperature": 0.7, "seed": 3, "tools": [WEATHER], "tool_choice": "required"},
]


@pytest.mark.parametrize("sampling", AGAIN, ids=["greedy", "seeded", "constrained"])
def test_the_same_prompt_again_answers_as_a_fresh_read(chttp: httpx.Client, sampling: dict) -> None:
    """A prompt sent again right after itself reads nothing: its first token comes from the
    logits its first read kept, through the same sampler chain, grammar mask and logprobs; the
    answer, logprobs included, is the one a server without a cache gives."""
    off = Server(["--ctx-size", str(CTX_SIZE), "--cache-ram", "0", "--parallel", "1"])
    try:
        with httpx.Client(base_url=off.url, timeout=120) as ohttp:
            msgs = conversation("masts", 1)
            msgs[-1]["content"] += " And what is the weather in Oslo?"
            first = chat(chttp, msgs, max_tokens=24, **sampling)
            again = chat(chttp, msgs, max_tokens=24, **sampling)
            assert cached(again) == again["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]
            miss = chat(ohttp, msgs, max_tokens=24, **sampling)
            assert cached(miss) == 0
            for answer in (first, again):
                got, want = answer["choices"][0], miss["choices"][0]
                assert got["message"].get("content") == want["message"].get("content")
                calls = [c["function"] for c in got["message"].get("tool_calls") or []]
                assert calls == [c["function"] for c in want["message"].get("tool_calls") or []]
                assert got.get("logprobs") == want.get("logprobs")
            if "tools" in sampling:
                assert [c["function"]["name"] for c in again["choices"][0]["message"]["tool_calls"]] == ["get_weather"]
            else:
                assert again["choices"][0]["logprobs"]["content"]
    finally:
        off.stop()


def test_budget_is_never_exceeded() -> None:
    small = Server(["--ctx-size", str(CTX_SIZE), "--cache-ram", "20", "--parallel", "1"])
    try:
        with httpx.Client(base_url=small.url, timeout=120) as http:
            for topic in ["a", "b", "c", "d", "e", "f"]:
                chat(http, conversation(topic, 4))
                stats = http.get("/health").json()["toolserve"]["prompt_cache"]
                assert stats["bytes"] <= stats["budget_bytes"] == 20 * 1024 * 1024
            assert stats["saves"] >= 2
            assert stats["evictions"] >= 1
    finally:
        small.stop()
