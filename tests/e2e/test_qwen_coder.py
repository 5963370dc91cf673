"""Tool calls on a real tool-trained model: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, tests/qwen_coder.py).

Under tool_choice auto the model writes its calls as a fenced ```json object, not in the
`<tool_call>` block its template asks for; toolserve reads them as calls (formats/lenient.py),
in every protocol, streaming as not. A JSON document or a fenced example in prose stays text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import ollama
import pytest
from openai import OpenAI

from tests.conftest import Server
from tests.e2e.test_tools import both

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
RESULT = json.dumps({"temperature_c": 21, "sky": "sunny"})
GREEDY: dict[str, Any] = {"temperature": 0}


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    from tests.qwen_coder import path

    s = Server(["--model", str(path()), "--ctx-size", "4096"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model(srv: Server) -> str:
    return str(httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"])


@pytest.fixture()
def oa(srv: Server) -> OpenAI:
    return OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=300)


def uses_result(text: str) -> bool:
    return "21" in text or "sunny" in text.lower()


def completion_text(srv: Server, model: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    """What the model writes for these messages, as text (no tools: the parser is not asked)."""
    prompt = httpx.post(f"{srv.url}/tokenize", json={"messages": messages, "tools": kw.pop("tools", [])}).json()["tokens"]
    r = httpx.post(f"{srv.url}/v1/completions", json={"model": model, "prompt": prompt, **GREEDY, **kw}, timeout=300)
    return str(r.json()["choices"][0]["text"])


# ---- calls as the model writes them -------------------------------------------------------


def test_the_model_writes_a_fenced_call_and_it_is_read(srv: Server, oa: OpenAI, model: str) -> None:
    raw = completion_text(srv, model, ASK, tools=TOOLS, max_tokens=60)
    assert raw.lstrip().startswith("```") and "<tool_call>" not in raw  # what the model writes, left alone
    m = both(oa, model=model, messages=ASK, tools=TOOLS, max_tokens=100, **GREEDY)
    assert m["content"] == "" and m["finish"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in m["calls"]] == [("get_weather", {"city": "Paris"})]


def test_a_bare_call_is_read(oa: OpenAI, model: str) -> None:
    system = {"role": "system", "content": "To call a function, reply with only its JSON object on one line: no code fence, no other text."}
    m = both(oa, model=model, messages=[system, {"role": "user", "content": "What time is it in Tokyo?"}], tools=TOOLS,
             max_tokens=100, **GREEDY)
    assert [(c["name"], json.loads(c["arguments"])) for c in m["calls"]] == [("get_time", {"city": "Tokyo"})]


def test_a_package_json_stays_text(oa: OpenAI, model: str) -> None:
    ask = [{"role": "user", "content": "Reply with only a package.json for a Node app called my-app, nothing else."}]
    m = both(oa, model=model, messages=ask, tools=TOOLS, max_tokens=200, **GREEDY)
    assert m["calls"] == [] and m["finish"] in ("stop", "length")
    assert '"name": "my-app"' in m["content"]


def test_a_fenced_example_in_prose_stays_text(oa: OpenAI, model: str) -> None:
    ask = [{"role": "user", "content": "Show me an example JSON call to the get_weather function and explain each field."}]
    m = both(oa, model=model, messages=ask, tools=TOOLS, max_tokens=120, **GREEDY)
    assert m["calls"] == [] and "```json" in m["content"] and '"get_weather"' in m["content"]


def test_parallel_calls_come_back_as_several(oa: OpenAI, model: str) -> None:
    """Under auto this model writes one fenced call and ends its answer (its choice: the raw text
    holds nothing more); under required the family's grammar lets it go on to the second call."""
    ask = [{"role": "user", "content": "What's the weather in Paris, and what time is it in Tokyo?"}]
    m = both(oa, model=model, messages=ask, tools=TOOLS, tool_choice="required", max_tokens=160, **GREEDY)
    assert sorted((c["name"], json.loads(c["arguments"])["city"]) for c in m["calls"]) == [
        ("get_time", "Tokyo"), ("get_weather", "Paris")]
    assert m["finish"] == "tool_calls" and m["content"] == ""
    assert len({c["id"] for c in m["calls"]}) == 2


# ---- tool_choice ------------------------------------------------------------------------------


def test_required_and_named_give_schema_valid_calls(oa: OpenAI, model: str) -> None:
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        m = both(oa, model=model, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=100, **GREEDY)
        assert m["calls"] and m["finish"] == "tool_calls" and m["content"] == ""
        names = {c["name"] for c in m["calls"]}
        assert names == ({"get_time"} if isinstance(choice, dict) else names & {"get_weather", "get_time"})
        for c in m["calls"]:
            jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])
        # the repeated-call rule: the same call twice is never returned
        assert len({(c["name"], c["arguments"]) for c in m["calls"]}) == len(m["calls"])


def test_none_never_calls(oa: OpenAI, model: str) -> None:
    m = both(oa, model=model, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=60, **GREEDY)
    assert m["calls"] == [] and m["finish"] in ("stop", "length")


def test_a_call_cut_by_max_tokens_never_becomes_text(oa: OpenAI, model: str) -> None:
    for choice in ("required", "auto"):
        m = both(oa, model=model, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=8, **GREEDY)
        assert m["finish"] == "length"
        if choice == "required":
            assert m["content"] == ""


# ---- the weather round trip in every protocol, streamed and not -------------------------------


def test_round_trip_chat_completions(oa: OpenAI, model: str) -> None:
    first = both(oa, model=model, messages=ASK, tools=TOOLS, max_tokens=100, **GREEDY)
    (call,) = first["calls"]
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": RESULT}]
    final = both(oa, model=model, messages=history, tools=TOOLS, max_tokens=80, **GREEDY)
    assert final["calls"] == [] and final["finish"] == "stop" and uses_result(final["content"])


def _responses_answer(oa: OpenAI, stream: bool, **kw: Any) -> Any:
    if not stream:
        return oa.responses.create(**kw)
    done = [e.response for e in oa.responses.create(stream=True, **kw) if e.type == "response.completed"]
    assert len(done) == 1
    return done[0]


@pytest.mark.parametrize("stream", [False, True])
def test_round_trip_responses(oa: OpenAI, model: str, stream: bool) -> None:
    tools: Any = [{"type": "function", **t["function"]} for t in TOOLS]
    first = _responses_answer(oa, stream, model=model, input=ASK, tools=tools, max_output_tokens=100, store=False, **GREEDY)
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert not [o for o in first.output if o.type == "message"]
    items: Any = [*ASK, {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                  {"type": "function_call_output", "call_id": call.call_id, "output": RESULT}]
    final = _responses_answer(oa, stream, model=model, input=items, tools=tools, max_output_tokens=80, store=False, **GREEDY)
    assert final.status == "completed" and uses_result(final.output_text)
    assert not [o for o in final.output if o.type == "function_call"]


@pytest.mark.parametrize("stream", [False, True])
def test_round_trip_messages(srv: Server, model: str, stream: bool) -> None:
    client = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0, timeout=300)
    tools: Any = [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in TOOLS]

    def create(**kw: Any) -> Any:
        if not stream:
            return client.messages.create(**kw, extra_body=GREEDY)
        with client.messages.stream(**kw, extra_body=GREEDY) as s:
            return s.get_final_message()

    first = create(model=model, max_tokens=100, messages=ASK, tools=tools)
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    assert not [b for b in first.content if b.type == "text"]
    history: Any = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": RESULT}]}]
    final = create(model=model, max_tokens=80, messages=history, tools=tools)
    assert final.stop_reason == "end_turn"
    assert uses_result("".join(b.text for b in final.content if b.type == "text"))


@pytest.mark.parametrize("stream", [False, True])
def test_round_trip_ollama(srv: Server, model: str, stream: bool) -> None:
    client = ollama.Client(host=srv.url, timeout=300)
    options = {"temperature": 0, "num_predict": 100}

    def chat(messages: list[dict[str, Any]]) -> tuple[str, list[Any]]:
        if not stream:
            r = client.chat(model=model, messages=messages, tools=TOOLS, options=options)
            return r.message.content or "", list(r.message.tool_calls or [])
        text, calls = "", []
        for part in client.chat(model=model, messages=messages, tools=TOOLS, options=options, stream=True):
            text += part.message.content or ""
            calls += part.message.tool_calls or []
        return text, calls

    text, calls = chat(ASK)
    assert text == "" and [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    history = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": RESULT, "tool_name": "get_weather"}]
    text, calls = chat(history)
    assert calls == [] and uses_result(text)
