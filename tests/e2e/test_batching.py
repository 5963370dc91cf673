"""Several requests decoded together in one context (`--parallel N` sequences, continuous batching).

What is asserted is what holds whatever the batch: each request gets its own continuation, its
own constraint and its own counts; a shared prefix is read once and reported as cached; a
client that leaves frees its sequence for the next request. Exact equality with a lone run is
not asserted here: llama.cpp is not batch-invariant (see docs/architecture.md); the prompt-cache
tests assert it with one sequence, where it holds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server
from toolserve.engine.prompt_cache import common_prefix
from toolserve.engine.slots import SeqState, chunk_cuts
from toolserve.engine.vocab import Vocab
from toolserve.models.files import bundled_model

NO_EOS = {"0": -100, "2": -100}
# prompts whose greedy continuation this model gets right: a mixed-up logits row would not
SERIES = [
    ("1, 2, 3, 4, 5, 6, 7,", "8"),
    ("Monday, Tuesday, Wednesday, Thursday,", "Friday"),
    ("January, February, March, April,", "May"),
    ("a, b, c, d, e, f, g,", "h"),
]
SYSTEM = "You are a careful assistant for a shipping company. Answer in one short sentence. " * 20
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def quad() -> Iterator[Server]:
    srv = Server(["--ctx-size", "1024", "--parallel", "4"])
    yield srv
    srv.stop()


def health(srv: Server) -> dict[str, Any]:
    return dict(httpx.get(f"{srv.url}/health").json()["toolserve"])


async def gather(srv: Server, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=srv.url, timeout=300) as c:
        rs = await asyncio.gather(*(c.post(path, json=b) for b in bodies))
    for r in rs:
        assert r.status_code == 200, r.text
    return [r.json() for r in rs]


def test_each_request_continues_its_own_prompt(quad: Server) -> None:
    bodies = [{"prompt": p, "max_tokens": 4, "temperature": 0} for p, _ in SERIES] * 2
    out = asyncio.run(gather(quad, "/v1/completions", bodies))
    for (_, want), r in zip(SERIES * 2, out, strict=True):
        assert r["choices"][0]["text"].split(",")[0].strip() == want, r["choices"][0]["text"]


def test_streams_run_at_once_with_their_own_counts(quad: Server) -> None:
    seen: list[int] = []

    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=quad.url, timeout=300) as c:
            done = asyncio.Event()

            async def watch() -> None:
                while not done.is_set():
                    seen.append((await c.get("/health")).json()["toolserve"]["active"])
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch())
            sizes = [40, 25, 60, 33]
            rs = await asyncio.gather(*(
                c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": f"Story {n}."}], "max_tokens": n,
                                                      "logit_bias": NO_EOS, "logprobs": True, "top_logprobs": 2})
                for n in sizes
            ))
            done.set()
            await watcher
            return [{"n": n, **r.json()} for n, r in zip(sizes, rs, strict=True)]

    for r in asyncio.run(run()):
        assert r["usage"]["completion_tokens"] == r["n"] == len(r["choices"][0]["logprobs"]["content"])
        assert r["choices"][0]["finish_reason"] == "length"
    assert max(seen) == 4  # all four were decoded together


def test_constraints_stay_per_request(quad: Server) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 999}, "word": {"type": "string", "maxLength": 12}}, "required": ["n", "word"],
              "additionalProperties": False}
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    bodies: list[dict[str, Any]] = [
        {"messages": ask, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 60, "temperature": 0.7, "seed": 1},
        {"messages": ask, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}, "max_tokens": 60},
        {"messages": ask, "max_tokens": 30, "logit_bias": NO_EOS},
        {"messages": ask, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 60},
    ]
    call, js, free, named = asyncio.run(gather(quad, "/v1/chat/completions", bodies))
    for r in (call, named):
        calls = r["choices"][0]["message"]["tool_calls"]
        assert calls and all(c["function"]["name"] == "get_weather" and isinstance(json.loads(c["function"]["arguments"])["city"], str) for c in calls)
    doc = json.loads(js["choices"][0]["message"]["content"])
    assert set(doc) == {"n", "word"} and isinstance(doc["n"], int)
    assert free["choices"][0]["message"].get("tool_calls") is None and free["usage"]["completion_tokens"] == 30


def test_a_shared_prefix_is_read_once(quad: Server) -> None:
    bodies = [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Question {i}?"}], "max_tokens": 2}
              for i in range(4)]
    one, two = (httpx.post(f"{quad.url}/tokenize", json={"messages": b["messages"]}).json()["tokens"] for b in bodies[:2])
    (turn_end,) = httpx.post(f"{quad.url}/tokenize", json={"prompt": "<|im_end|>", "add_special_tokens": False}).json()["tokens"]
    vocab = Vocab(str(bundled_model()))
    turns = vocab.turns()
    shared = SeqState(0, one, len(one), cuts=chunk_cuts(one, turns)).exact(two, chunk_cuts(two, turns))
    vocab.close()
    assert 300 < one.index(turn_end) < shared < common_prefix(one, two)  # the system turn and the user turn's opening
    before = health(quad)
    out = asyncio.run(gather(quad, "/v1/chat/completions", bodies))
    after = health(quad)
    cached = sorted(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in out)
    assert cached[0] < shared <= cached[1] == cached[2] == cached[3]
    read = (after["prompt_tokens"] - before["prompt_tokens"]) - (after["cached_tokens"] - before["cached_tokens"])
    assert read == sum(r["usage"]["prompt_tokens"] - r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in out)


def test_a_client_that_leaves_frees_its_sequence() -> None:
    srv = Server(["--ctx-size", "1024", "--parallel", "2", "--max-queue", "4"])
    try:
        async def run() -> tuple[str, str]:
            order: list[str] = []
            async with httpx.AsyncClient(base_url=srv.url, timeout=300) as c:
                long_body = {"messages": [{"role": "user", "content": "A long story."}], "max_tokens": 900, "logit_bias": NO_EOS}

                async def long_one() -> None:
                    await c.post("/v1/chat/completions", json=long_body)
                    order.append("long")

                async def leaver() -> None:
                    async with c.stream("POST", "/v1/chat/completions", json={**long_body, "stream": True}) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data: {"):
                                break  # gone after the first chunk

                async def third() -> None:
                    await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})
                    order.append("third")

                runner = asyncio.create_task(long_one())
                await leaver()
                await third()
                await runner
            return order[0], order[1]

        assert asyncio.run(run()) == ("third", "long")  # it got the freed sequence while the long one ran
        assert health(srv)["active"] == 0
    finally:
        srv.stop()
