"""Each route fuzzed on its own, with what a schema-driven fuzzer does not draw: `NaN`,
`Infinity` and `1e400` literals, wrong types deep inside items and parts, unknown item types,
references to ids that no earlier item made, keys taken away. Whatever the request: never a
5xx, every error in the protocol's own shape, every byte sent back standard JSON (each stream
event too), and the server answers a plain request afterwards (issue 31)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Server

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER_SCHEMA}}],
    "tool_choice": "auto", "max_tokens": 2, "temperature": 0, "stop": ["\n\n"], "logit_bias": {"1": 0.5},
    "response_format": {"type": "text"}, "stream_options": {"include_usage": True}, "seed": 7,
}
COMPLETION = {"prompt": ["Hello", "Bye"], "max_tokens": 2, "n": 1, "stop": ["x"], "temperature": 0, "logprobs": 1, "seed": 7}
RESPONSES = {
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "A call."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ],
    "instructions": "Be brief.",
    "tools": [
        {"type": "function", "name": "get_weather", "description": "Weather.", "parameters": WEATHER_SCHEMA, "strict": False},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]},
        {"type": "custom", "name": "patch", "description": "A patch."},
    ],
    "tool_choice": "auto", "max_output_tokens": 16, "temperature": 0, "reasoning": {"effort": "low"},
    "text": {"format": {"type": "text"}}, "metadata": {"k": "v"}, "seed": 7,
}
MESSAGES = {
    "max_tokens": 2,
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "A call.", "signature": "s"},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]}]},
    ],
    "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": WEATHER_SCHEMA}],
    "tool_choice": {"type": "auto"}, "temperature": 0, "stop_sequences": ["\n\n"],
}
COUNT = {k: v for k, v in MESSAGES.items() if k not in ("max_tokens", "temperature", "stop_sequences")}
EMBEDDINGS = {"input": ["a cat", "a dog"], "encoding_format": "float"}
OLLAMA_CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "thinking": "A call.", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER_SCHEMA}}],
    "options": {"temperature": 0, "num_predict": 2, "top_k": 5, "top_p": 0.9, "seed": 7, "stop": ["\n\n"], "num_ctx": 400},
    "keep_alive": "5m", "stream": False, "format": "",
}
OLLAMA_GENERATE = {"prompt": "Hello", "system": "Be brief.", "options": {"temperature": 0, "num_predict": 2}, "stream": False,
                   "keep_alive": 300, "format": {"type": "object"}}
OLLAMA_EMBED = {"input": ["a cat", "a dog"], "truncate": True}
INFILL = {"input_prefix": "def f(x):\n", "input_suffix": "\n    return y\n", "input_extra": [{"filename": "a.py", "text": "import os\n"}],
          "prompt": "    y =", "n_predict": 2, "temperature": 0, "stop": ["\n\n"], "seed": 7}
RERANK = {"query": "capital of France", "documents": ["Paris", {"text": "a cat"}], "top_n": 1, "return_documents": True}

# route -> (a valid body, whether it streams, the server that serves it: SmolLM2; SmolLM2 on a short
# context, where a mutation that takes the token limit away still ends soon on a busy machine; the
# tiny coder beside the tiny reranker)
ROUTES: dict[str, tuple[dict[str, Any], bool, str]] = {
    "/v1/chat/completions": (CHAT, True, "srv"),
    "/v1/completions": (COMPLETION, True, "short"),
    "/v1/responses": (RESPONSES, True, "srv"),
    "/v1/messages": (MESSAGES, True, "srv"),
    "/v1/messages/count_tokens": (COUNT, False, "srv"),
    "/v1/embeddings": (EMBEDDINGS, False, "srv"),
    "/api/chat": (OLLAMA_CHAT, True, "short"),
    "/api/generate": (OLLAMA_GENERATE, True, "short"),
    "/api/embed": (OLLAMA_EMBED, False, "srv"),
    "/infill": (INFILL, True, "coder"),
    "/v1/rerank": (RERANK, False, "coder"),
}

# numbers that Python's JSON reader takes but JSON does not have: written in as raw text
RAW_NUMBERS = {"__NaN__": "NaN", "__Inf__": "Infinity", "__NegInf__": "-Infinity", "__1e400__": "1e400", "__neg1e400__": "-1e400"}
HOSTILE = st.one_of(
    st.sampled_from(list(RAW_NUMBERS)),
    st.sampled_from([None, True, False, 0, -1, 1.5, 10**30, -(10**30), "", "x", "nope", [], {}, [1, [2]], {"type": "x"},
                     {"type": None}, {"type": {}}, {"type": []}, [{}], [None], "\x00", "\u2028"]),
    st.text(max_size=8),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
)


def places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value, the root first."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from places(v, (*path, i))


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


def fresh(value: Any) -> Any:
    """A copy of a drawn value: `sampled_from` hands out the same list or dict each time, and a
    later mutation must neither change it for the next examples (Hypothesis then sees its data
    change) nor put it inside itself (a cycle)."""
    return copy.deepcopy(value)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """The valid body with one to three places changed: a hostile value put there, the key
    taken away, an unknown key added, or a list item given an unknown `type`."""
    body = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(places(body))))
        target = at(body, path)
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "extra", "type"]))
        if action == "replace" and path:
            at(body, path[:-1])[path[-1]] = fresh(draw(HOSTILE))
        elif action == "delete" and path and isinstance(at(body, path[:-1]), dict):
            del at(body, path[:-1])[path[-1]]
        elif action == "extra" and isinstance(target, dict):
            target[draw(st.sampled_from(["type", "zzz", "id", "call_id", "content", "name"]))] = fresh(draw(HOSTILE))
        elif action == "type" and isinstance(target, dict):
            target["type"] = draw(st.sampled_from(["unknown_kind", "mcp_call", "input_image", "image", "document", "text"]))
    return body


def strict_json(text: str) -> Any:
    """`json.loads` that refuses what JSON does not have (NaN, Infinity)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_error(route: str, status: int, body: Any, sent: str) -> None:
    if route.startswith("/v1/messages"):  # Anthropic's shape
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, (status, body, sent[:300])
    elif route.startswith("/api/"):  # Ollama's
        assert set(body) == {"error"} and isinstance(body["error"], str), (status, body, sent[:300])
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}, (status, body, sent[:300])


def check_stream(route: str, text: str, sent: str) -> None:
    """Every event's data (an NDJSON line of Ollama's) is standard JSON; an error event is in
    the protocol's shape."""
    if route.startswith("/api/"):
        lines = [strict_json(line) for line in text.splitlines()]
        assert lines and all(set(x) == {"error"} or "done" in x for x in lines), (text[:300], sent[:300])
        return
    events = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    assert events, (text[:300], sent[:300])
    for data in events:
        if data == "[DONE]":
            continue
        event = strict_json(data)
        if route in ("/v1/chat/completions", "/v1/completions", "/infill"):
            if "error" in event:
                check_error(route, 200, event, sent)
        elif event.get("type") == "error" and route == "/v1/messages":
            check_error(route, 200, event, sent)


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server(["--ctx-size", "1024", "--embeddings"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def short() -> Iterator[Server]:
    s = Server(["--ctx-size", "448"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def coder() -> Iterator[Server]:
    from tests.textmodels.make_tiny_text import build

    s = Server(["--model", str(build("coder")), "--ctx-size", "1024", "--rerank-model", str(build("reranker"))])
    yield s
    s.stop()


@pytest.mark.parametrize("route", list(ROUTES))
def test_route_holds_under_hostile_bodies(request: pytest.FixtureRequest, route: str) -> None:
    base, streams, which = ROUTES[route]
    srv: Server = request.getfixturevalue(which)
    ok = httpx.post(f"{srv.url}{route}", json=base, timeout=60)
    assert ok.status_code == 200, ok.text[:500]  # the body the fuzz starts from is valid

    @given(body=mutated(base), stream=st.booleans() if streams else st.just(False))
    @settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(body: dict[str, Any], stream: bool) -> None:
        if stream:
            body["stream"] = True
        sent = json.dumps(body)
        for marker, raw in RAW_NUMBERS.items():
            sent = sent.replace(json.dumps(marker), raw)
        r = httpx.post(f"{srv.url}{route}", content=sent, headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code < 500, (r.status_code, r.text[:300], sent[:300])
        if r.headers.get("content-type", "").startswith(("text/event-stream", "application/x-ndjson")):
            check_stream(route, r.text, sent)
            return
        answer = strict_json(r.text)
        if r.status_code >= 400:
            check_error(route, r.status_code, answer, sent)

    check()
    again = httpx.post(f"{srv.url}{route}", json=base, timeout=60)
    assert again.status_code == 200, again.text[:500]
    assert httpx.get(f"{srv.url}/health", timeout=10).status_code == 200
