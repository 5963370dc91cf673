"""Tool calls end to end on the bundled models: round trips, and the grammar's guarantees."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import jsonschema
import pytest
from openai import OpenAI

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            # bounded strings keep every call well inside max_tokens, even at high temperature
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
BOOK = {
    "type": "function",
    "function": {
        "name": "book_table",
        "description": "Book a restaurant table",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurant": {"type": "string", "maxLength": 40},
                "guests": {"type": "integer", "minimum": 1, "maximum": 20},
                "when": {
                    "type": "object",
                    "properties": {"day": {"type": "string", "enum": ["mon", "tue", "wed"]}, "hour": {"type": "integer", "minimum": 0, "maximum": 23}},
                    "required": ["day", "hour"],
                    "additionalProperties": False,
                },
                "diets": {"type": "array", "items": {"type": "string", "enum": ["vegan", "halal", "none"]}, "maxItems": 3},
            },
            "required": ["restaurant", "guests", "when"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
REFS = {
    "type": "function",
    "function": {
        "name": "send_parcel",
        "description": "Send a parcel",
        "parameters": {
            "type": "object",
            "$defs": {"addr": {"type": "object", "properties": {"street": {"type": "string", "maxLength": 30}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["street", "zip"], "additionalProperties": False}},
            "properties": {
                "to": {"$ref": "#/$defs/addr"},
                "weight": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 30}, {"type": "null"}]},
                "express": {"type": "boolean"},
            },
            "required": ["to", "express"],
            "additionalProperties": False,
        },
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, BOOK, REFS)}
ASK = [{"role": "user", "content": "What's the weather like in Paris today?"}]


def rebuild(chunks: list[Any]) -> dict[str, Any]:
    """The message a client gets by concatenating a stream's deltas."""
    content, reasoning, calls, finish = "", "", {}, None
    for c in chunks:
        if not c.choices:
            continue
        ch = c.choices[0]
        d = ch.delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            assert tc.index is not None
            if tc.index not in calls:
                assert tc.id and tc.function.name  # the first delta of a call carries id and name
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or ""}
            else:
                assert tc.id in (None, calls[tc.index]["id"])
                assert not tc.function.name  # the name is sent once
                calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    return {"content": content, "reasoning": reasoning, "calls": [calls[i] for i in sorted(calls)], "finish": finish}


def message(r: Any) -> dict[str, Any]:
    m = r.choices[0].message
    calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments} for t in m.tool_calls or []]
    return {"content": m.content or "", "reasoning": getattr(m, "reasoning_content", None) or "", "calls": calls, "finish": r.choices[0].finish_reason}


def both(client: OpenAI, **kw: Any) -> dict[str, Any]:
    """Non-streaming and streaming answers to the same seeded request must be the same message."""
    whole = message(client.chat.completions.create(**kw))
    streamed = rebuild(list(client.chat.completions.create(stream=True, **kw)))
    ids = lambda m: [{**c, "id": None} for c in m["calls"]]  # noqa: E731 - ids are random per response
    assert {**streamed, "calls": ids(streamed)} == {**whole, "calls": ids(whole)}
    return whole


def assert_valid_calls(m: dict[str, Any], allowed: set[str]) -> None:
    assert m["calls"], m
    assert m["finish"] == "tool_calls"
    for call in m["calls"]:
        assert call["name"] in allowed
        assert call["id"].startswith("call_")
        args = json.loads(call["arguments"])
        assert isinstance(args, dict)
        jsonschema.validate(args, SCHEMAS[call["name"]])


def round_trip(client: OpenAI, model: str) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    first = both(client, model=model, messages=ASK, tools=[WEATHER], tool_choice=named, temperature=0.7, seed=3, max_tokens=80)
    assert_valid_calls(first, {"get_weather"})
    assert len(first["calls"]) == 1
    call = first["calls"][0]
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [{"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"temperature_c": 21, "sky": "sunny"})},
    ]
    final = both(client, model=model, messages=history, tools=[WEATHER], tool_choice="none", temperature=0.7, seed=3, max_tokens=40)
    assert final["calls"] == []
    assert final["content"].strip()
    assert final["finish"] in ("stop", "length")


def test_smollm2_round_trip(client: OpenAI, model_id: str) -> None:
    round_trip(client, model_id)


def test_gemma3_round_trip(gemma_server: Any) -> None:
    client = OpenAI(base_url=f"{gemma_server.url}/v1", api_key="x", max_retries=0, timeout=120)
    round_trip(client, client.models.list().data[0].id)


CASES = list(itertools.product([0, 1, 2, 3, 4], [0.0, 0.8, 1.3], [[WEATHER], [BOOK], [WEATHER, BOOK, REFS]]))


@pytest.mark.parametrize(("seed", "temperature", "tools"), [*CASES[::2], CASES[1]])
def test_required_always_gives_valid_calls(client: OpenAI, model_id: str, seed: int, temperature: float, tools: list) -> None:
    prompt = [{"role": "user", "content": "Please help me with my plans for tomorrow evening."}]
    m = both(client, model=model_id, messages=prompt, tools=tools, tool_choice="required", parallel_tool_calls=False,
             temperature=temperature, seed=seed, max_tokens=300)
    assert_valid_calls(m, {t["function"]["name"] for t in tools})
    assert len(m["calls"]) == 1


@pytest.mark.parametrize(("seed", "name"), [(s, n) for s in range(3) for n in ("book_table", "send_parcel")])
def test_named_function_is_called(client: OpenAI, model_id: str, seed: int, name: str) -> None:
    m = both(client, model=model_id, messages=ASK, tools=[WEATHER, BOOK, REFS], temperature=1.0, seed=seed, max_tokens=200,
             tool_choice={"type": "function", "function": {"name": name}})
    assert_valid_calls(m, {name})
    assert len(m["calls"]) == 1


def test_parallel_calls_are_all_valid(client: OpenAI, model_id: str) -> None:
    for seed in range(3):
        m = both(client, model=model_id, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0.9, seed=seed, max_tokens=150)
        if m["finish"] == "length":  # the model kept calling until max_tokens: the last call may be cut
            m = {**m, "calls": m["calls"][:-1], "finish": "tool_calls"}
        assert_valid_calls(m, {"get_weather"})


def test_auto_calls_are_valid_when_made(client: OpenAI, model_id: str) -> None:
    for seed in range(4):
        m = both(client, model=model_id, messages=ASK, tools=[WEATHER, BOOK], temperature=0.9, seed=seed, max_tokens=120)
        if m["calls"]:
            assert_valid_calls(m, {"get_weather", "book_table"})
        else:
            assert m["finish"] in ("stop", "length")
            assert "<tool_call>" not in m["content"] or m["finish"] == "length"


def test_none_never_returns_a_call(client: OpenAI, model_id: str) -> None:
    for seed in range(3):
        m = both(client, model=model_id, messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0.9, seed=seed, max_tokens=60)
        assert m["calls"] == [] and m["finish"] != "tool_calls"


def test_parallel_false_never_returns_two(client: OpenAI, model_id: str) -> None:
    for choice in ("required", "auto"):
        for seed in range(3):
            m = both(client, model=model_id, messages=ASK, tools=[WEATHER], tool_choice=choice, parallel_tool_calls=False,
                     temperature=0.9, seed=seed, max_tokens=120)
            assert len(m["calls"]) <= 1


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 4},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"], "additionalProperties": False},
    },
    "required": ["name", "age", "address"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(("seed", "temperature"), [(s, t) for s in range(4) for t in (0.0, 1.0)])
def test_json_schema_output_validates(client: OpenAI, model_id: str, seed: int, temperature: float) -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    m = both(client, model=model_id, messages=[{"role": "user", "content": "Describe a person."}], response_format=rf,
             temperature=temperature, seed=seed, max_tokens=200)
    assert m["finish"] == "stop"
    jsonschema.validate(json.loads(m["content"]), PERSON)


def test_json_object_output_parses(client: OpenAI, model_id: str) -> None:
    for seed in range(3):
        m = both(client, model=model_id, messages=[{"role": "user", "content": "Give me JSON."}], response_format={"type": "json_object"},
                 temperature=0.7, seed=seed, max_tokens=150)
        if m["finish"] == "stop":
            assert isinstance(json.loads(m["content"]), dict)
        else:  # cut by max_tokens: still a prefix of one object
            assert m["content"].lstrip().startswith("{")


def test_gemma3_guarantees(gemma_server: Any) -> None:
    client = OpenAI(base_url=f"{gemma_server.url}/v1", api_key="x", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    for seed, tools in [(0, [WEATHER]), (1, [BOOK]), (2, [WEATHER, BOOK, REFS]), (3, [REFS])]:
        m = both(client, model=model, messages=ASK, tools=tools, tool_choice="required", parallel_tool_calls=False,
                 temperature=0.8, seed=seed, max_tokens=200)
        assert_valid_calls(m, {t["function"]["name"] for t in tools})
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    m = both(client, model=model, messages=[{"role": "user", "content": "A person"}], response_format=rf, temperature=0.8, seed=1, max_tokens=200)
    jsonschema.validate(json.loads(m["content"]), PERSON)


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
        ({"tool_choice": "required"}, "tool_choice", "required"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}}}], "tool_choice": "required"}, "tools", "uniqueItems"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(?<=a)b"}}}}, "response_format", "look"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema", "schema"),
        ({"tools": [WEATHER, WEATHER]}, "tools", "same name"),
    ],
)
def test_constraint_errors_are_400(http: httpx.Client, body: dict, param: str, needle: str) -> None:
    r = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 5, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert needle in err["message"]
