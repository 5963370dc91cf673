"""Anthropic's Messages API against a real server, through the official `anthropic` client:
`claude-*` names served by the bundled model, text, streams, tools, stop reasons, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest

from tests.conftest import Server
from tests.e2e.test_tools import BOOK, SCHEMAS, WEATHER

CLAUDE = "claude-haiku-4-5"  # any claude-* name: --model-map serves it
ASK = [{"role": "user", "content": "What's the weather like in Paris today?"}]
Q = [{"role": "user", "content": "Name three colours of the rainbow."}]
GREEDY = {"extra_body": {"temperature": 0}}  # the client has no `temperature` argument; the API does


def tool(t: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool of test_tools as an Anthropic tool."""
    fn = t["function"]
    return {"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server(["--ctx-size", "4096", "--model-map", "claude-*=SmolLM2-135M-Instruct.Q4_1"])
    yield s
    s.stop()


@pytest.fixture()
def client(srv: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture()
def http(srv: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        yield c


def comparable(m: anthropic.types.Message) -> dict[str, Any]:
    """A message without what differs between two answers to the same request: the ids."""
    out = m.model_dump(mode="json", exclude_none=True)
    out.pop("id")
    for block in out["content"]:
        if block["type"] == "tool_use":
            assert block.pop("id").startswith("toolu_")
    return out


def prompt_tokens(m: anthropic.types.Message) -> int:
    """Anthropic counts cache reads apart from input_tokens."""
    u = m.usage
    return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)


def assert_valid_calls(m: anthropic.types.Message, allowed: set[str]) -> list[Any]:
    calls = [b for b in m.content if b.type == "tool_use"]
    assert calls, m
    assert m.stop_reason == "tool_use"
    for call in calls:
        assert call.name in allowed
        assert call.id.startswith("toolu_")
        jsonschema.validate(call.input, SCHEMAS[call.name])
    return calls


def test_text_answer(client: anthropic.Anthropic) -> None:
    m = client.messages.create(model=CLAUDE, max_tokens=24, messages=Q, **GREEDY)
    assert m.type == "message" and m.role == "assistant"
    assert m.id.startswith("msg_")
    assert m.model == CLAUDE  # the name the client asked for
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text.strip()
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0
    assert 0 < m.usage.output_tokens <= 24


@pytest.mark.parametrize(
    "kw",
    [
        {"messages": Q, "max_tokens": 40},
        {"messages": ASK, "max_tokens": 120, "tools": [tool(WEATHER)], "tool_choice": {"type": "any"}},
        {"messages": ASK, "max_tokens": 60, "tools": [tool(WEATHER), tool(BOOK)]},
        {"messages": Q, "max_tokens": 40, "stop_sequences": ["Red", "red"]},
    ],
)
def test_stream_accumulates_to_the_message(client: anthropic.Anthropic, kw: dict[str, Any]) -> None:
    client.messages.create(model=CLAUDE, **kw, **GREEDY)  # the prompt cache: the next two reuse the same prefix
    whole = client.messages.create(model=CLAUDE, **kw, **GREEDY)
    with client.messages.stream(model=CLAUDE, **kw, **GREEDY) as stream:
        streamed = stream.get_final_message()
    assert comparable(streamed) == comparable(whole)
    assert streamed.id != whole.id


def test_stream_events(http: httpx.Client) -> None:
    body = {"model": CLAUDE, "max_tokens": 20, "stream": True, "messages": Q, "temperature": 0}  # greedy: 20 tokens of text
    r = http.post("/v1/messages?beta=true", json=body, headers={"anthropic-version": "2023-06-01", "anthropic-beta": "x"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    events = []
    for frame in frames:
        name, data = frame.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[2:5] == ["content_block_start", "content_block_delta", "content_block_delta"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0
    assert start["usage"]["input_tokens"] > 0
    assert events[-2]["delta"]["stop_reason"] == "max_tokens" and events[-2]["usage"]["output_tokens"] == 20
    assert "[DONE]" not in r.text


def test_required_call_is_valid(client: anthropic.Anthropic) -> None:
    for temperature in (0.0, 0.8, 1.0):
        m = client.messages.create(
            model=CLAUDE, max_tokens=150, messages=ASK, tools=[tool(WEATHER)],
            tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body={"temperature": temperature},
        )
        assert len(assert_valid_calls(m, {"get_weather"})) == 1


def test_named_tool_is_called(client: anthropic.Anthropic) -> None:
    for temperature in (0.0, 1.0):
        m = client.messages.create(
            model=CLAUDE, max_tokens=200, messages=ASK, tools=[tool(WEATHER), tool(BOOK)],
            tool_choice={"type": "tool", "name": "book_table"}, extra_body={"temperature": temperature},
        )
        assert len(assert_valid_calls(m, {"book_table"})) == 1


def test_disable_parallel_tool_use_gives_at_most_one_call(client: anthropic.Anthropic) -> None:
    for choice in ("any", "auto"):
        for _ in range(3):
            m = client.messages.create(
                model=CLAUDE, max_tokens=150, messages=ASK, tools=[tool(WEATHER)],
                tool_choice={"type": choice, "disable_parallel_tool_use": True}, extra_body={"temperature": 0.9},
            )
            assert len([b for b in m.content if b.type == "tool_use"]) <= 1


def test_server_tools_are_dropped(client: anthropic.Anthropic) -> None:
    tools: Any = [{"type": "web_search_20250305", "name": "web_search"}, {"type": "bash_20250124", "name": "bash"}, tool(WEATHER)]
    choice: Any = {"type": "any", "disable_parallel_tool_use": True}
    m = client.messages.create(model=CLAUDE, max_tokens=150, messages=ASK, tools=tools, tool_choice=choice, **GREEDY)
    assert_valid_calls(m, {"get_weather"})


@pytest.mark.parametrize("result", ["string", "blocks", "error"])
def test_tool_round_trip(client: anthropic.Anthropic, result: str) -> None:
    tools: Any = [tool(WEATHER)]
    first = client.messages.create(
        model=CLAUDE, max_tokens=150, messages=ASK, tools=tools, tool_choice={"type": "tool", "name": "get_weather"}, **GREEDY
    )
    call = assert_valid_calls(first, {"get_weather"})[0]
    answer = json.dumps({"temperature_c": 21, "sky": "sunny"})
    content: Any = {"string": answer, "blocks": [{"type": "text", "text": answer}], "error": "the weather service is down"}[result]
    history: Any = [
        *ASK,
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "I should ask the tool.", "signature": "x"}, *[b.model_dump() for b in first.content]]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": content, "is_error": result == "error"}]},
    ]
    final = client.messages.create(model=CLAUDE, max_tokens=60, messages=history, tools=tools, **GREEDY)
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert any(b.type == "tool_use" or (b.type == "text" and b.text.strip()) for b in final.content)
    if final.stop_reason == "tool_use":
        assert_valid_calls(final, {"get_weather"})


def test_max_tokens_cut(client: anthropic.Anthropic) -> None:
    m = client.messages.create(model=CLAUDE, max_tokens=3, messages=Q, **GREEDY)
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    assert m.usage.output_tokens == 3


def test_stop_sequence(client: anthropic.Anthropic) -> None:
    full = client.messages.create(model=CLAUDE, max_tokens=40, messages=Q, **GREEDY).content[0].text
    words = full.split()
    stop = words[len(words) // 2]  # a word from the middle of what the model says greedily
    expected = full[: full.index(stop)]
    m = client.messages.create(model=CLAUDE, max_tokens=40, messages=Q, stop_sequences=[stop, "never said"], **GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert [b.text for b in m.content if b.type == "text"] == ([expected] if expected else [])


def test_system_prompt_as_text_blocks(client: anthropic.Anthropic) -> None:
    blocks: Any = [{"type": "text", "text": "You are a terse assistant."}, {"type": "text", "text": "Answer in one line.", "cache_control": {"type": "ephemeral"}}]
    m = client.messages.create(model=CLAUDE, max_tokens=20, system=blocks, messages=Q, **GREEDY)
    assert m.content and m.stop_reason in ("end_turn", "max_tokens")
    as_blocks = client.messages.count_tokens(model=CLAUDE, system=blocks, messages=Q).input_tokens
    joined = client.messages.count_tokens(model=CLAUDE, system="You are a terse assistant.\nAnswer in one line.", messages=Q).input_tokens
    first = client.messages.count_tokens(model=CLAUDE, system=blocks[:1], messages=Q).input_tokens
    assert as_blocks == joined > first


def test_count_tokens_matches_usage(client: anthropic.Anthropic) -> None:
    kw: Any = {"system": "Be helpful.", "messages": ASK, "tools": [tool(WEATHER), tool(BOOK)], "tool_choice": {"type": "auto"}}
    counted = client.messages.count_tokens(model=CLAUDE, **kw).input_tokens
    m = client.messages.create(model=CLAUDE, max_tokens=5, **kw, **GREEDY)
    assert counted == prompt_tokens(m) > 0


def test_api_key_as_x_api_key() -> None:
    s = Server(["--ctx-size", "1024", "--api-key", "K", "--model-map", "claude-*=SmolLM2-135M-Instruct.Q4_1"])
    try:
        ok = anthropic.Anthropic(base_url=s.url, api_key="K", max_retries=0)  # sends x-api-key
        assert ok.messages.create(model=CLAUDE, max_tokens=2, messages=Q, **GREEDY).content
        body = {"model": CLAUDE, "max_tokens": 2, "messages": Q}
        assert httpx.post(f"{s.url}/v1/messages", json=body, headers={"x-api-key": "K"}, timeout=60).status_code == 200
        r = httpx.post(f"{s.url}/v1/messages", json=body, headers={"x-api-key": "wrong"}, timeout=60)
        assert r.status_code == 401
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0).messages.create(model=CLAUDE, max_tokens=2, messages=Q)
    finally:
        s.stop()


M = [{"role": "user", "content": "hi"}]
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
CALL = {"role": "assistant", "content": [TOOL_USE]}
PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"messages": M}, 400, "max_tokens"),
        ({"max_tokens": 0, "messages": M}, 400, "max_tokens"),
        ({"max_tokens": 5, "messages": []}, 400, "messages"),
        ({"max_tokens": 5, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "role"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "frobnicate"}]}]}, 400, "frobnicate"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, 400, "messages[0].content[0].text"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [TOOL_USE]}]}, 400, "tool_use"),
        ({"max_tokens": 5, "messages": [CALL, {"role": "assistant", "content": [PNG]}]}, 400, "image"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]}, 400, "toolu_9"),
        ({"max_tokens": 5, "messages": [*M, CALL, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]}]}, 400, "toolu_2"),
        ({"max_tokens": 5, "messages": M, "tools": [tool(WEATHER)], "tool_choice": {"type": "tool", "name": "nope"}}, 400, "nope"),
        ({"max_tokens": 5, "messages": M, "tool_choice": {"type": "any"}}, 400, "tool_choice"),
        ({"max_tokens": 5, "messages": M, "tools": [{"name": "x"}]}, 400, "input_schema"),
        ({"max_tokens": 5, "messages": M, "temperature": 1.5}, 400, "temperature"),
        ({"max_tokens": 5, "messages": M, "stop_sequences": ["a"] * 40}, 400, "stop_sequences"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [PNG]}]}, 400, "text only"),
        ({"max_tokens": 5, "messages": M, "model": "gpt-4o"}, 404, "--model-map"),
    ],
)
def test_bad_requests(http: httpx.Client, body: dict[str, Any], status: int, says: str) -> None:
    r = http.post("/v1/messages", json={"model": CLAUDE, **body})
    assert r.status_code == status, r.text
    err = r.json()
    assert set(err) == {"type", "error"} and err["type"] == "error"
    assert set(err["error"]) == {"type", "message"}
    assert err["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert says in err["error"]["message"]
    assert http.post("/v1/messages", json={"model": CLAUDE, "max_tokens": 2, "messages": M}).status_code == 200  # still serving


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"messages": [{"role": "wizard", "content": "hi"}]}, 400),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}]}, 400),
        ({"messages": M, "model": "gpt-4o"}, 404),
    ],
)
def test_count_tokens_bad_requests(http: httpx.Client, body: dict[str, Any], status: int) -> None:
    r = http.post("/v1/messages/count_tokens", json={"model": CLAUDE, **body})
    assert r.status_code == status and r.json()["type"] == "error"


def test_invalid_json_and_unicode(http: httpx.Client) -> None:
    r = http.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    raw = '{"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "\\ud800"}]}'
    r = http.post("/v1/messages", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400 and "surrogate" in r.json()["error"]["message"]


def test_unmapped_model_error_through_the_client(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="gpt-4o", max_tokens=2, messages=Q)
    assert "--model-map" in str(info.value)
