"""Answers end on their own (issue 41). The everyday prompts of tests/everyday.py at default
settings on the bundled model, served from its package and from copies of its file in an Ollama
store and an LM Studio folder (the defaults come from what the file is, not where it lies): the
answers end by themselves within 400 tokens, all but at most one. And the loop guard: the bundled model made to loop
(the loop-ending sampling defaults off, greedy, a conversation in which it has repeated a word 120
times asked to go on) ends at the loop
with finish_reason "length" and says why, in chat completions (streamed and not), Responses,
Messages and Ollama; off for a request (`loop_guard: false`) or a server (`--no-loop-guard`), the
same request runs to max_tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server
from tests.e2e.test_model_stores import ollama_store, place
from tests.everyday import LIMIT, PROMPTS
from toolserve.models.files import bundled_model

MODEL = "SmolLM2-135M-Instruct.Q4_1"
ASK = "Repeat after me, and never stop: " + "la " * 200
# the model has said "la" 120 times already: it goes on at greedy on every host (asked once, with
# no history, an AVX-512 host's kernels had it introduce itself and stop after 32 tokens)
LOOP = [{"role": "user", "content": "Repeat after me, and never stop: la la la"},
        {"role": "assistant", "content": ("la " * 120).strip()}, {"role": "user", "content": ASK}]
MAX = 1500
NO_LOOP_SAMPLING = ["--dry-multiplier", "0", "--repetition-penalty", "1.0"]  # the guard alone
LMS_FILE = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q4_1.gguf"


@pytest.fixture(scope="module", params=["bundled", "ollama", "lmstudio"])
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on the bundled file, as the package ships it or as another program stores it."""
    tmp = tmp_path_factory.mktemp(request.param)
    env: dict[str, str] = {"HOME": str(tmp / "home")}
    args = ["--ctx-size", "2048"]
    if request.param == "ollama":  # a manifest without a params layer: no Ollama sampling of its own
        ollama_store(tmp / "ollama", "smol", "latest", {"model": bundled_model()})
        env["OLLAMA_MODELS"] = str(tmp / "ollama")
        args += ["--model", "ollama:smol"]
    elif request.param == "lmstudio":
        place(bundled_model(), tmp / "home" / ".lmstudio" / "models" / LMS_FILE)
        args += ["--model", f"lmstudio:{LMS_FILE}"]
    srv = Server(args, env=env)
    yield srv
    srv.stop()


def test_everyday_prompts_end_by_themselves(source: Server) -> None:
    with httpx.Client(base_url=source.url, timeout=1800) as http:  # a busy machine is slow, not wrong
        card = http.get("/v1/models").json()["data"][0]["toolserve"]["sampling_defaults"]
        assert card["temperature"]["source"].startswith("model card") and card["dry_multiplier"]["value"] > 0
        long = []
        for i, prompt in enumerate(PROMPTS):
            # no sampling fields: the defaults; an answer past LIMIT has failed already
            body = {"messages": [{"role": "user", "content": prompt}], "seed": i, "max_tokens": LIMIT + 1}
            r = http.post("/v1/chat/completions", json=body).json()
            n, finish = r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]
            if finish != "stop" or n > LIMIT:
                long.append((prompt, n, finish, r["choices"][0]["message"]["content"][-300:]))
    # one answer may run on: a list that never repeats itself exactly (the pancake recipe's
    # ingredients, at some seeds) is no loop, and no default ends it (bench/README.md, issue 41)
    assert len(long) <= 1, long


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server(["--ctx-size", "2048", "--log-level", "info", *NO_LOOP_SAMPLING])
    yield s
    s.stop()


def chat(srv: Server, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": LOOP, "temperature": 0, "max_tokens": MAX, **extra}
    r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_the_loop_guard_ends_a_loop_and_says_so(srv: Server) -> None:
    r = chat(srv)
    n = r["usage"]["completion_tokens"]
    assert r["choices"][0]["finish_reason"] == "length" and n < MAX
    (found,) = r["toolserve"]["loop_guard"]
    assert found["index"] == 0 and 1 <= found["period_tokens"] <= 32 and found["repeats"] >= 8
    assert "loop guard" in srv.stderr_text()
    # the answer is kept as it was written up to the loop's end
    assert len(r["choices"][0]["message"]["content"]) > 200


def test_streamed_the_same(srv: Server) -> None:
    whole = chat(srv)
    chunks = []
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", timeout=600, json={
        "model": MODEL, "messages": LOOP, "temperature": 0, "max_tokens": MAX, "stream": True,
    }) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ends = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert text == whole["choices"][0]["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in ends] == ["length"]
    assert ends[0]["toolserve"]["loop_guard"] == whole["toolserve"]["loop_guard"]


def test_off_for_a_request(srv: Server) -> None:
    r = chat(srv, loop_guard=False)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == MAX
    assert "toolserve" not in r


def test_the_other_protocols_end_there_too(srv: Server) -> None:
    """Responses: incomplete (max_output_tokens); Messages: max_tokens; Ollama: length; each
    long before the limit."""
    responses = httpx.post(f"{srv.url}/v1/responses", timeout=600, json={
        "model": MODEL, "input": LOOP, "temperature": 0, "max_output_tokens": MAX,
    }).json()
    assert responses["status"] == "incomplete" and responses["incomplete_details"] == {"reason": "max_output_tokens"}
    assert responses["usage"]["output_tokens"] < MAX
    messages = httpx.post(f"{srv.url}/v1/messages", timeout=600, json={
        "model": MODEL, "max_tokens": MAX, "temperature": 0, "messages": LOOP,
    }).json()
    assert messages["stop_reason"] == "max_tokens" and messages["usage"]["output_tokens"] < MAX
    ollama = httpx.post(f"{srv.url}/api/chat", timeout=600, json={
        "model": MODEL, "stream": False, "messages": LOOP,
        "options": {"temperature": 0, "num_predict": MAX},
    }).json()
    assert ollama["done_reason"] == "length" and ollama["eval_count"] < MAX


def test_off_for_a_server() -> None:
    s = Server(["--ctx-size", "2048", "--no-loop-guard", *NO_LOOP_SAMPLING])
    try:
        r = chat(s)
        assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == MAX
    finally:
        s.stop()
