"""toolserve in front of a real vLLM (issue 42): vLLM's own OpenAI server on this CPU (vllm-cpu,
tests/vllm_cpu.py) serving a tiny random Qwen2 model with Qwen2.5's tokenizer and chat template,
started with the guidance structured-output backend, and toolserve fronts in raw and passthrough
mode. A random model writes nonsense: what is checked is what the servers make of it: calls held
by each family's grammar upstream, the model's own template found from vLLM's `root`, vLLM's
errors in each protocol's shape, a client that hangs up cancelling vLLM's request.

This tier is opt-in (TOOLSERVE_VLLM_TIER=1, see README.md): the environment and the first start
take minutes and 3.4 GB. Where vLLM cannot start here, its fixture fails, it does not skip."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests import vllm_cpu
from tests.conftest import Server, ServerProcess, free_port
from tests.e2e.test_tools import both
from tests.e2e.test_upstream import client_of, error_of

ASK = [{"role": "user", "content": "What's the weather like in Paris today?"}]
LONG = "word " * 3000  # more than the 2048 tokens vLLM is started with
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 24}, "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 16}}, "required": ["zone"]}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return vllm_cpu.model()


def start_vllm(model_dir: Path, *extra: str) -> ServerProcess:
    port = free_port()
    cmd, env = vllm_cpu.command(model_dir, port, "--served-model-name", "tiny", *vllm_cpu.TOOL_FLAGS, *extra)
    return ServerProcess(cmd, port, env=env, ready_timeout=600)


@pytest.fixture(scope="module")
def vllm(model_dir: Path) -> Iterator[ServerProcess]:
    srv = start_vllm(model_dir)
    r = httpx.post(f"{srv.url}/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 2}, timeout=300)
    assert r.status_code == 200, f"vLLM cannot generate here: {r.text}\n{srv.stderr_text()[-3000:]}"
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def second_vllm(model_dir: Path) -> Iterator[ServerProcess]:
    """A second vLLM serving the same model: two upstreams behind one toolserve model."""
    srv = start_vllm(model_dir)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def pool(vllm: ServerProcess, second_vllm: ServerProcess) -> Iterator[Server]:
    srv = Server(["--upstream", f"{vllm.url},{second_vllm.url}", "--model-alias", "pool"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def raw(vllm: ServerProcess) -> Iterator[Server]:
    srv = Server(["--upstream", vllm.url, "--upstream-mode", "raw", "--upstream-guided", "vllm", "--model-alias", "raw"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def raw_xml(vllm: ServerProcess) -> Iterator[Server]:
    srv = Server(["--upstream", vllm.url, "--upstream-mode", "raw", "--upstream-guided", "vllm", "--tool-format", "qwen3_coder",
                  "--model-alias", "raw-xml"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def passthrough(vllm: ServerProcess) -> Iterator[Server]:
    srv = Server(["--upstream", vllm.url, "--model-alias", "pass"])
    yield srv
    srv.stop()


def test_raw_mode_renders_with_the_model_template_vllm_loaded(raw: Server, model_dir: Path) -> None:
    card = httpx.get(f"{raw.url}/v1/models", timeout=30).json()["data"][0]["toolserve"]
    assert card["chat_template"] == f"dir:{model_dir}/chat_template.jinja", card
    assert card["tool_format"] == "hermes"  # detected from Qwen2.5's own template


@pytest.mark.parametrize("front", ["raw", "raw_xml"])
@pytest.mark.parametrize("choice", ["required", "named"])
def test_calls_held_by_the_family_grammar_on_vllm(request: pytest.FixtureRequest, front: str, choice: str) -> None:
    """A random model's calls, in Hermes JSON or Qwen3-Coder XML: well-formed and schema-valid,
    streamed as not, because vLLM sampled under the family's grammar."""
    srv: Server = request.getfixturevalue(front)
    alias = "raw" if front == "raw" else "raw-xml"
    tool_choice: Any = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    m = both(client_of(srv), model=alias, messages=ASK, tools=[WEATHER, TIME], tool_choice=tool_choice, parallel_tool_calls=False,
             temperature=0, max_tokens=120)
    assert len(m["calls"]) == 1 and m["finish"] == "tool_calls", m
    call = m["calls"][0]
    assert choice == "required" or call["name"] == "get_time"
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


@pytest.mark.parametrize("front", ["raw", "raw_xml"])
def test_auto_under_the_lazy_grammar_is_consistent(request: pytest.FixtureRequest, front: str) -> None:
    srv: Server = request.getfixturevalue(front)
    m = both(client_of(srv), model="raw" if front == "raw" else "raw-xml", messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=40)
    assert m["finish"] in ("stop", "length", "tool_calls")
    for call in m["calls"]:  # whatever the model chose: a call it started is a valid one
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_passthrough_text_and_usage(passthrough: Server) -> None:
    m = both(client_of(passthrough), model="pass", messages=ASK, temperature=0, max_tokens=20)
    assert m["finish"] in ("stop", "length")
    r = client_of(passthrough).chat.completions.create(model="pass", messages=ASK, temperature=0, max_tokens=20)
    assert r.model == "pass" and r.usage is not None and r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0


def test_line_separators_vllm_writes_reach_the_client(vllm: ServerProcess, passthrough: Server) -> None:
    """U+2028 and U+0085 in an answer (vLLM's structured output makes the random model write
    them): vLLM's events carry them unescaped, and through toolserve they arrive as written,
    streamed as not. Before, toolserve's reader cut vLLM's event at them, and the stream failed."""
    text = "one\u2028two\u0085three\u2029"
    body = {"messages": ASK, "max_tokens": 30, "temperature": 0, "structured_outputs": {"choice": [text]}}
    raw = httpx.post(f"{vllm.url}/v1/chat/completions", json={**body, "model": "tiny", "stream": True}, timeout=300).content
    assert "\u2028".encode() in raw  # what toolserve reads: the character itself, unescaped
    for url, model in ((vllm.url, "tiny"), (passthrough.url, "pass")):
        for stream in (True, False):
            assert chat_parts(url, {**body, "model": model}, stream) == {"content": text}, (model, stream)


@pytest.mark.parametrize("front", ["raw", "passthrough"])
def test_a_too_long_prompt_is_a_400_in_each_protocol(request: pytest.FixtureRequest, front: str) -> None:
    """vLLM's 400 for a prompt past its context reaches each protocol's client as a 400 in that
    protocol's own error shape, streamed or not."""
    srv: Server = request.getfixturevalue(front)
    model = "raw" if front == "raw" else "pass"
    for stream in (False, True):
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": LONG}], "stream": stream}, timeout=120)
        assert r.status_code == 400, r.text
        assert re.search(r"context|length|too long|tokens", error_of(r)["message"], re.I), r.text
        r = httpx.post(f"{srv.url}/v1/messages", json={"model": model, "max_tokens": 20, "stream": stream,
                                                        "messages": [{"role": "user", "content": LONG}]}, timeout=120)
        assert r.status_code == 400 and r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error", r.text
        r = httpx.post(f"{srv.url}/v1/responses", json={"model": model, "input": LONG, "stream": stream}, timeout=120)
        assert r.status_code == 400 and r.json()["error"]["message"], r.text
        r = httpx.post(f"{srv.url}/api/chat", json={"model": model, "stream": stream, "messages": [{"role": "user", "content": LONG}]}, timeout=120)
        assert r.status_code == 400 and isinstance(r.json()["error"], str), r.text
    r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": model, "messages": ASK, "max_tokens": 5}, timeout=120)
    assert r.status_code == 200, r.text  # and it goes on serving


def metric(vllm: ServerProcess, name: str) -> float:
    text = httpx.get(f"{vllm.url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name) and not line.startswith("#"))


@pytest.mark.parametrize("front", ["raw", "passthrough"])
def test_a_client_that_hangs_up_cancels_the_vllm_request(request: pytest.FixtureRequest, vllm: ServerProcess, front: str) -> None:
    srv: Server = request.getfixturevalue(front)
    before = metric(vllm, "vllm:generation_tokens_total")
    # a random model at temperature 1 next to never samples its end of text
    body = {"model": "raw" if front == "raw" else "pass", "messages": ASK, "max_tokens": 2000, "temperature": 1.0, "stream": True}
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for n, _ in enumerate(r.iter_lines()):
            if n > 5:
                break  # hang up
    deadline = time.monotonic() + 120
    while metric(vllm, "vllm:num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert metric(vllm, "vllm:num_requests_running") == 0
    assert metric(vllm, "vllm:generation_tokens_total") - before < 1000  # it stopped long before max_tokens


# ---- the other protocols, through both modes -------------------------------------------------------

FN_WEATHER = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
TOOL_WEATHER = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}


@pytest.mark.parametrize("front", ["raw", "passthrough"])
@pytest.mark.parametrize("stream", [False, True])
def test_responses_messages_and_ollama_through_vllm(request: pytest.FixtureRequest, front: str, stream: bool) -> None:
    """Text with usage and each protocol's finish, streamed and not; in raw mode a call too, held
    by the Hermes grammar toolserve sends (passthrough's calls are vLLM's own `required`, whose
    JSON a random model pads with blank space to max_tokens under guidance's flexible whitespace)."""
    import anthropic

    srv: Server = request.getfixturevalue(front)
    model = "raw" if front == "raw" else "pass"
    oa = client_of(srv)
    kw: dict[str, Any] = {"model": model, "input": "Hello", "max_output_tokens": 16, "temperature": 0}
    if stream:  # the client's stream helper wants response.completed; a random model's text is cut: incomplete
        with oa.responses.create(**kw, stream=True) as events:
            final = [e for e in events if e.type in ("response.completed", "response.incomplete")]
        r = final[-1].response  # type: ignore[union-attr]
    else:
        r = oa.responses.create(**kw)
    assert r.status in ("completed", "incomplete") and r.usage is not None and r.usage.input_tokens > 0, r
    assert r.output_text and r.model == model

    an = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)
    hello: dict[str, Any] = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}
    msg = an.messages.stream(**hello).__enter__().get_final_message() if stream else an.messages.create(**hello)
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.content[0].type == "text" and msg.content[0].text
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0

    body = {"model": model, "messages": ASK, "stream": stream, "options": {"num_predict": 16, "temperature": 0}}
    with httpx.stream("POST", f"{srv.url}/api/chat", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        lines = [json.loads(x) for x in resp.iter_lines() if x]
    assert lines[-1]["done"] and lines[-1]["prompt_eval_count"] > 0 and lines[-1]["eval_count"] > 0, lines[-1]
    assert all("error" not in x for x in lines)
    if front == "passthrough":
        return

    kw = {**kw, "input": ASK[0]["content"], "tools": [FN_WEATHER], "tool_choice": "required", "max_output_tokens": 120,
          "parallel_tool_calls": False}  # a random model under `required` calls on to max_tokens where it may
    r = oa.responses.stream(**kw).__enter__().get_final_response() if stream else oa.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and r.status == "completed", r
    jsonschema.validate(json.loads(calls[0].arguments), SCHEMAS["get_weather"])
    ask: dict[str, Any] = {"model": model, "max_tokens": 120, "messages": ASK, "tools": [TOOL_WEATHER],
                           "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}
    msg = an.messages.stream(**ask).__enter__().get_final_message() if stream else an.messages.create(**ask)
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == "tool_use" and uses and uses[0].name == "get_weather", msg
    jsonschema.validate(uses[0].input, SCHEMAS["get_weather"])


# ---- reasoning from vLLM's own parser, through passthrough ---------------------------------------


@pytest.fixture(scope="module")
def thinking_vllm() -> Iterator[ServerProcess]:
    """vLLM with its DeepSeek-R1 reasoning parser, over the tiny model whose tokenizer has
    `<think>` and `</think>`: what the model writes before `</think>` is reasoning (all of it
    when it writes none), in vLLM 0.32's `reasoning` field only, streamed as not."""
    srv = start_vllm(vllm_cpu.model(think=True), "--reasoning-parser", "deepseek_r1")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def thinking(thinking_vllm: ServerProcess) -> Iterator[Server]:
    srv = Server(["--upstream", thinking_vllm.url, "--model-alias", "think"])
    yield srv
    srv.stop()


def chat_parts(url: str, body: dict[str, Any], stream: bool) -> dict[str, str]:
    """A chat completion's text by field ('content', 'reasoning', 'reasoning_content'), a
    stream's deltas joined."""
    out: dict[str, str] = {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": stream}, timeout=300) as r:
        assert r.status_code == 200, r.read()
        if stream:  # lines cut at LF as bytes: httpx's `iter_lines` also cuts at a U+2028 that vLLM leaves unescaped
            pieces = [json.loads(x[6:])["choices"] for x in r.read().split(b"\n") if x.startswith(b"data: {")]
            parts = [c[0]["delta"] for c in pieces if c]
        else:
            parts = [json.loads(r.read())["choices"][0]["message"]]
    for part in parts:
        for key in ("content", "reasoning", "reasoning_content"):
            if part.get(key):
                out[key] = out.get(key, "") + part[key]
    return out


def test_vllm_reasoning_reaches_chat_clients_under_both_names(thinking_vllm: ServerProcess, thinking: Server) -> None:
    """vLLM 0.32 writes reasoning as `reasoning` alone; through toolserve a client gets it as
    `reasoning_content` and `reasoning`, the same text streamed as not, and the content as vLLM
    sent it. A logit bias on `</think>` makes the random model end its reasoning part-way."""
    end = httpx.post(f"{thinking_vllm.url}/tokenize", json={"model": "tiny", "prompt": "</think>", "add_special_tokens": False},
                     timeout=60).json()["tokens"]
    assert len(end) == 1, end
    seen_both = False
    for bias, seed in ((0.0, 3), (10.0, 3), (10.0, 8)):
        body = {"messages": ASK, "max_tokens": 40, "temperature": 1.0, "seed": seed, "logit_bias": {str(end[0]): bias}}
        direct = chat_parts(thinking_vllm.url, {**body, "model": "tiny"}, stream=False)
        assert direct.get("reasoning") and "reasoning_content" not in direct, direct  # vLLM 0.32's one name
        want = {"reasoning": direct["reasoning"], "reasoning_content": direct["reasoning"]}
        if direct.get("content"):
            want["content"] = direct["content"]
        seen_both = seen_both or "content" in want
        for stream in (False, True):
            assert chat_parts(thinking.url, {**body, "model": "think"}, stream) == want, (bias, seed, stream)
            assert chat_parts(thinking_vllm.url, {**body, "model": "tiny"}, stream) == direct, "vLLM itself differs"
    assert seen_both, "no answer ended its reasoning: the content half of the check never ran"


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_reasoning_in_responses_messages_and_ollama(thinking_vllm: ServerProcess, thinking: Server, stream: bool) -> None:
    """The same reasoning as vLLM's own answer (greedy: the random model writes no `</think>`, so
    its whole answer is reasoning): a Responses reasoning item, a Messages thinking block (with a
    signature), Ollama's `thinking`."""
    import anthropic

    direct = chat_parts(thinking_vllm.url, {"model": "tiny", "messages": ASK, "max_tokens": 24, "temperature": 0}, stream=False)
    assert direct.get("reasoning") and not direct.get("content"), direct

    oa = client_of(thinking)
    kw: dict[str, Any] = {"model": "think", "input": ASK[0]["content"], "max_output_tokens": 24, "temperature": 0}
    if stream:
        with oa.responses.create(**kw, stream=True) as events:
            final = [e for e in events if e.type in ("response.completed", "response.incomplete")]
        r = final[-1].response  # type: ignore[union-attr]
    else:
        r = oa.responses.create(**kw)
    items = [o for o in r.output if o.type == "reasoning"]
    assert len(items) == 1 and "".join(p.text for p in items[0].summary) == direct["reasoning"], r.output
    assert not r.output_text

    an = anthropic.Anthropic(base_url=thinking.url, api_key="unused", max_retries=0, timeout=120)
    ask: dict[str, Any] = {"model": "think", "max_tokens": 24, "messages": ASK, "extra_body": {"temperature": 0}}
    msg = an.messages.stream(**ask).__enter__().get_final_message() if stream else an.messages.create(**ask)
    blocks = [b for b in msg.content if b.type == "thinking"]
    assert len(blocks) == 1 and blocks[0].thinking == direct["reasoning"] and blocks[0].signature, msg.content
    assert not [b for b in msg.content if b.type == "text" and b.text]

    body = {"model": "think", "messages": ASK, "stream": stream, "options": {"num_predict": 24, "temperature": 0}}
    with httpx.stream("POST", f"{thinking.url}/api/chat", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        lines = [json.loads(x) for x in resp.iter_lines() if x]
    assert "".join(x["message"].get("thinking", "") for x in lines) == direct["reasoning"], lines
    assert not "".join(x["message"].get("content", "") for x in lines) and lines[-1]["done"]


# ---- two vLLMs behind one model ------------------------------------------------------------------


def test_two_vllms_share_the_requests_and_a_next_turn_finds_its_prefix(pool: Server, vllm: ServerProcess, second_vllm: ServerProcess) -> None:
    done = "vllm:request_success_total"
    before = metric(vllm, done), metric(second_vllm, done)
    for k in range(4):
        r = httpx.post(f"{pool.url}/v1/chat/completions", json={"model": "pool", "messages": [{"role": "user", "content": f"Hi {k}"}],
                                                                 "max_tokens": 4}, timeout=120)
        assert r.status_code == 200, r.text
    assert (metric(vllm, done) - before[0], metric(second_vllm, done) - before[1]) == (2, 2)
    # three conversations whose first turns alternate: taking turns alone would move one of them
    system = "You are a careful assistant who answers about the weather in one sentence. " * 30  # ~450 tokens
    convs = [[{"role": "system", "content": f"({k}) {system}"}, {"role": "user", "content": "Paris?"}] for k in range(3)]
    homes = []
    for messages in convs:
        first = metric(vllm, done)
        r = httpx.post(f"{pool.url}/v1/chat/completions", json={"model": "pool", "messages": messages, "max_tokens": 4}, timeout=120)
        homes.append(metric(vllm, done) - first)
        messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"] or "."},
                     {"role": "user", "content": "And Rome?"}]
    hits = metric(vllm, "vllm:prefix_cache_hits_total") + metric(second_vllm, "vllm:prefix_cache_hits_total")
    for messages, home in zip(convs, homes, strict=True):
        first = metric(vllm, done)
        r = httpx.post(f"{pool.url}/v1/chat/completions", json={"model": "pool", "messages": messages, "max_tokens": 4}, timeout=120)
        assert r.status_code == 200 and metric(vllm, done) - first == home  # where its first turn went
    gained = metric(vllm, "vllm:prefix_cache_hits_total") + metric(second_vllm, "vllm:prefix_cache_hits_total") - hits
    assert gained >= 3 * 256, gained  # each next turn read its first turn's prompt (~470 tokens) from the cache


def test_a_vllm_killed_mid_stream_then_its_traffic_goes_to_the_other(pool: Server, vllm: ServerProcess, second_vllm: ServerProcess) -> None:
    """Last in the module: it kills the second vLLM. A front of that vLLM alone ends the stream
    it was reading with an error event and answers 503 after; the pool's front serves on."""
    solo = Server(["--upstream", second_vllm.url, "--model-alias", "solo"])
    try:
        body = {"model": "solo", "messages": ASK, "max_tokens": 2000, "temperature": 1.0, "stream": True}
        with httpx.stream("POST", f"{solo.url}/v1/chat/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            lines = []
            for line in r.iter_lines():
                lines.append(line)
                if len(lines) == 10:
                    vllm_cpu.kill_tree(second_vllm.proc.pid)
        data = [x[6:] for x in lines if x.startswith("data: ")]
        assert data[-1] == "[DONE]" and json.loads(data[-2])["error"]["code"] == "upstream_error", data[-3:]
        r = httpx.post(f"{solo.url}/v1/chat/completions", json={"model": "solo", "messages": ASK, "max_tokens": 4}, timeout=60)
        assert r.status_code == 503 and error_of(r)["code"] == "upstream_unavailable"
    finally:
        solo.stop()
    before = metric(vllm, "vllm:request_success_total")
    for k in range(3):
        r = httpx.post(f"{pool.url}/v1/chat/completions", json={"model": "pool", "messages": [{"role": "user", "content": f"Yo {k}"}],
                                                                 "max_tokens": 4}, timeout=120)
        assert r.status_code == 200, r.text
    assert metric(vllm, "vllm:request_success_total") - before == 3
    ups = httpx.get(f"{pool.url}/v1/models").json()["data"][0]["toolserve"]["upstreams"]
    assert [u["available"] for u in ups] == [True, False]
