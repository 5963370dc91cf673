"""Speculative decoding from the prompt (engine/speculative.py) against a real server.

Exact equality with a run without speculation is not asserted: llama.cpp on the CPU is not
batch-invariant (a token verified beside draft rows can round differently from the same token
decoded alone: measured up to 0.98 in a logit, flash attention on or off), so a near-tie may go
the other way. What is asserted holds whatever the rounding: under greedy sampling every token
that comes out with speculation is the top token of its own row; the two answers agree up to
the first near-tie; drafts hit when the answer copies its prompt; a constrained answer is valid.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server

CODE = '''def chunk_cuts(prompt, turns, media=(), longest=512, least=64, near=512):
    """Where the chunks of a prompt end, ascending."""
    n = len(prompt)
    images = {m.start: m.end for m in media}
    cuts = []
    start = i = 0
    turn_end = -1
    while i < n:
        if i in images:
            if i > start:
                cuts.append(i)
            start = i = images[i]
            cuts.append(i)
            turn_end = -1
            continue
        i += 1
        size = i - start
        if size >= longest or (i == turn_end and (size >= least or start < near)):
            cuts.append(i)
            start = i
    return cuts
'''
REPEAT = [{"role": "user", "content": f"Repeat this code exactly, with no comment:\n```python\n{CODE}```"}]
# greedy as the model ranks its tokens (the logprobs' order): without a local model's loop-ending
# defaults, which move the penalised tokens down
GREEDY: dict[str, Any] = {"temperature": 0, "repetition_penalty": 1.0, "dry_multiplier": 0.0}


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    server = Server(["--ctx-size", "2048", "--parallel", "1", "--speculative", "off"])
    yield server
    server.stop()


def chat(srv: Server, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{srv.url}/v1/chat/completions", json={"max_tokens": 160, **body}, timeout=600)
    assert r.status_code == 200, r.text
    return dict(r.json())


def counters(srv: Server) -> tuple[int, int]:
    spec = httpx.get(f"{srv.url}/health").json()["toolserve"]["speculative"]
    return spec["drafted_tokens"], spec["accepted_tokens"]


def tokens(out: dict[str, Any]) -> list[dict[str, Any]]:
    return list(out["choices"][0]["logprobs"]["content"])


def test_greedy_output_with_speculation_is_greedy(srv: Server) -> None:
    before = counters(srv)
    plain = tokens(chat(srv, messages=REPEAT, **GREEDY, speculative=False, logprobs=True, top_logprobs=2))
    assert counters(srv) == before  # the server's --speculative off, and the request asked none
    fast = tokens(chat(srv, messages=REPEAT, **GREEDY, speculative=True, logprobs=True, top_logprobs=2))
    drafted, accepted = (now - was for now, was in zip(counters(srv), before, strict=True))
    assert drafted > 0 and 0 < accepted <= drafted  # the code block is copied: drafts hit
    for t in fast:  # each token the top one of its row: no draft token was kept against the model
        assert t["logprob"] >= max(alt["logprob"] for alt in t["top_logprobs"]) - 1e-6, t
    for a, b in zip(plain, fast, strict=False):
        if a["token"] != b["token"]:  # they part only where the model hesitated between two
            top = sorted((alt["logprob"] for alt in a["top_logprobs"]), reverse=True)
            assert top[0] - top[1] < 2.0, (a, b)
            break
    metrics = httpx.get(f"{srv.url}/metrics").text
    assert "toolserve_speculative_drafted_tokens_total" in metrics
    assert "toolserve_speculative_accepted_tokens_total" in metrics


def test_a_seeded_sample_with_speculation_repeats(srv: Server) -> None:
    body: dict[str, Any] = {"messages": REPEAT, "temperature": 0.8, "top_p": 0.95, "seed": 7, "speculative": True}
    first, second = chat(srv, **body), chat(srv, **body)
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]


def test_a_constrained_answer_stays_valid(srv: Server) -> None:
    """Drafts under a grammar hold only tokens it allows; what comes out still fits the schema."""
    record = {"name": "chunk_cuts", "args": ["prompt", "turns", "media", "longest", "least", "near"], "returns": "cuts"}
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}}, "returns": {"type": "string"}},
        "required": ["name", "args", "returns"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": f"Copy this JSON object exactly: {json.dumps(record)}"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "record", "schema": schema}}
    before = counters(srv)
    out = chat(srv, messages=messages, temperature=0, response_format=fmt, speculative=True)
    plain = chat(srv, messages=messages, temperature=0, response_format=fmt, speculative=False)
    for answer in (out, plain):
        value = json.loads(answer["choices"][0]["message"]["content"])
        assert set(value) == {"name", "args", "returns"} and all(isinstance(a, str) for a in value["args"])
    assert counters(srv)[0] > before[0]


STORY = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a lost umbrella."}]


def test_without_history_an_answer_given_before_is_not_drafted_from(srv: Server) -> None:
    """Under `on` a request drafts from its own context only, so asking the same again drafts
    the same: the batches, hence the answer, repeat."""
    body: dict[str, Any] = {"messages": STORY, "temperature": 0, "max_tokens": 64, "speculative": True}
    start = counters(srv)
    first = chat(srv, **body)
    middle = counters(srv)
    again = chat(srv, **body)
    end = counters(srv)
    assert [m - s for m, s in zip(middle, start, strict=True)] == [e - m for e, m in zip(end, middle, strict=True)]
    assert first["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]


def test_under_history_an_answer_given_before_is_drafted_from() -> None:
    """A story copies little from its prompt; asked for again under `--speculative history`, it
    drafts from the answer given the first time (a long draft at once: the prompt's end agrees
    with what led to that answer), and what comes out is still greedy. How much of the draft
    holds is not asserted: verified in other batches than the first answer, the second can part
    from it at a near-tie (llama.cpp's rounding), even early."""
    server = Server(["--ctx-size", "2048", "--parallel", "1", "--speculative", "history"])
    try:
        body: dict[str, Any] = {"messages": STORY, **GREEDY, "max_tokens": 96, "logprobs": True, "top_logprobs": 2}
        start = counters(server)
        chat(server, **body)
        middle = counters(server)
        again = tokens(chat(server, **body))
        end = counters(server)
        first_drafted, again_drafted = middle[0] - start[0], end[0] - middle[0]
        assert again_drafted >= first_drafted + 32, (start, middle, end)  # at least one long draft from the history
        for t in again:
            assert t["logprob"] >= max(alt["logprob"] for alt in t["top_logprobs"]) - 1e-6, t
        assert chat(server, **body, speculative=False)["choices"][0]["message"]["content"]  # a request may still say no
        assert counters(server) == end
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_an_auto_engine_on_the_cpu_cuts_drafts_by_the_cpus_costs(mode: str) -> None:
    """Under `auto` an engine on the CPU cuts each draft to what pays for its rows there
    (engine/speculative.py's `Worth` over CPU_COSTS); under `on` drafts go as far as the budget."""
    from toolserve.engine.llama_cpp import LlamaCppEngine
    from toolserve.engine.speculative import CPU_COSTS
    from toolserve.models.files import bundled_model

    engine = LlamaCppEngine(str(bundled_model()), n_ctx=512, parallel=2, speculative=mode)
    try:
        worth = engine._scheduler._worth
        if mode != "auto":
            assert worth is None
            return
        assert worth is not None
        assert [worth.ratio[n] for n in sorted(CPU_COSTS)] == pytest.approx([CPU_COSTS[n] for n in sorted(CPU_COSTS)])
        assert all(a <= b for a, b in itertools.pairwise(worth.ratio[1:]))
    finally:
        engine.close()


def test_the_engine_process_logs_at_the_servers_log_level() -> None:
    """The engine process logs at the server's level (engine/process.py's `worker_env`), so
    `--log-level info` shows what an `auto` engine takes a draft's rows to cost."""
    server = Server(["--ctx-size", "512", "--parallel", "1", "--log-level", "info"])
    try:
        assert "speculative auto: drafts cut to what pays on the CPU, a token with a draft of 1, 2, 4, 8, 16 taken to cost" in server.stderr_text()
    finally:
        server.stop()
