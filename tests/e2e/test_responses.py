"""OpenAI's Responses API on a real server, through the official client (responses.create /
responses.stream) and plain HTTP: text, guaranteed tool calls, round trips (input items and
previous_response_id), JSON output, the max_output_tokens cut, tools toolserve cannot run,
custom and namespaced tools, the store, and errors in OpenAI's shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from openai import NotFoundError, OpenAI

from tests.conftest import Server
from tests.e2e.test_tools import BOOK, WEATHER

FN_WEATHER = {"type": "function", **WEATHER["function"]}  # Responses tools are flat
FN_BOOK = {"type": "function", **BOOK["function"]}
ASK = "What's the weather like in Paris today?"
GREEDY: dict[str, Any] = {"temperature": 0}


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server(["--ctx-size", "4096"])
    yield s
    s.stop()


@pytest.fixture()
def oa(srv: Server) -> OpenAI:
    return OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)


def calls_of(response: Any) -> list[Any]:
    return [o for o in response.output if o.type == "function_call"]


def test_text_and_stream_give_the_same_response(oa: OpenAI) -> None:
    # an answer that ends before max_output_tokens (the client's stream helper wants response.completed)
    kw: dict[str, Any] = {"input": "What is the capital of France? Answer in one word.", "max_output_tokens": 60, **GREEDY}
    r = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", **kw)
    assert r.object == "response" and r.output_text and r.usage and r.usage.input_tokens > 0
    with oa.responses.stream(model="SmolLM2-135M-Instruct.Q4_1", **kw) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    assert final.output_text == r.output_text and final.status == r.status
    assert final.usage is not None and final.usage.output_tokens == r.usage.output_tokens


def test_max_output_tokens_cut_is_incomplete(oa: OpenAI) -> None:
    r = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input="Tell me a long story about a dragon.", max_output_tokens=5, **GREEDY)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens" and r.usage and r.usage.output_tokens == 5
    body = {"input": "Tell me a long story about a dragon.", "max_output_tokens": 5, "stream": True, **GREEDY}
    with httpx.stream("POST", f"{oa.base_url}responses", json=body, timeout=120) as s:
        names = [line[7:] for line in s.iter_lines() if line.startswith("event: ")]
    assert names[-1] == "response.incomplete" and "response.completed" not in names


@pytest.mark.parametrize("stream", [False, True])
def test_required_call_is_schema_valid(oa: OpenAI, stream: bool) -> None:
    kw: dict[str, Any] = {"model": "SmolLM2-135M-Instruct.Q4_1", "input": "Book a table for two at Luigi's on Tuesday at 8pm.",
                          "tools": [FN_WEATHER, FN_BOOK], "tool_choice": "required", "parallel_tool_calls": False, **GREEDY}
    if stream:
        with oa.responses.stream(**kw) as s:
            done_items = [e.item for e in s if e.type == "response.output_item.done"]
            r = s.get_final_response()
        assert [i.type for i in done_items] == [o.type for o in r.output]  # Codex reads calls from here
    else:
        r = oa.responses.create(**kw)
    (call,) = calls_of(r)
    schema = (FN_WEATHER if call.name == "get_weather" else FN_BOOK)["parameters"]
    jsonschema.validate(json.loads(call.arguments), schema)
    assert call.call_id and call.status == "completed" and r.status == "completed"


def test_named_function_is_called(oa: OpenAI) -> None:
    r = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input=ASK, tools=[FN_WEATHER, FN_BOOK],
                            tool_choice={"type": "function", "name": "book_table"}, **GREEDY)
    (call,) = calls_of(r)
    assert call.name == "book_table"
    jsonschema.validate(json.loads(call.arguments), FN_BOOK["parameters"])


def test_tool_round_trip_with_input_items(oa: OpenAI) -> None:
    first = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input=ASK, tools=[FN_WEATHER], tool_choice="required",
                                parallel_tool_calls=False, store=False, **GREEDY)
    (call,) = calls_of(first)
    items: list[Any] = [{"role": "user", "content": ASK}, {"type": "function_call", "call_id": call.call_id, "name": call.name,
                        "arguments": call.arguments}, {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}]
    second = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input=items, tools=[FN_WEATHER], max_output_tokens=40, **GREEDY)
    assert second.status in ("completed", "incomplete") and (second.output_text or calls_of(second))
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens  # type: ignore[union-attr]


def test_previous_response_id_continues_and_the_store_answers(oa: OpenAI) -> None:
    first = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input=ASK, tools=[FN_WEATHER], tool_choice="required",
                                parallel_tool_calls=False, **GREEDY)
    (call,) = calls_of(first)
    second = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", previous_response_id=first.id, tools=[FN_WEATHER],
                                 input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}],
                                 max_output_tokens=30, **GREEDY)
    assert second.previous_response_id == first.id
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens  # type: ignore[union-attr]
    assert second.usage.input_tokens_details.cached_tokens > 0  # the first turn's prefix was kept
    got = oa.responses.retrieve(first.id)
    assert got.id == first.id and got.output[0].type == "function_call"
    oa.responses.delete(first.id)
    with pytest.raises(NotFoundError):
        oa.responses.retrieve(first.id)
    unstored = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(NotFoundError):
        oa.responses.retrieve(unstored.id)


def test_json_schema_output(oa: OpenAI) -> None:
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 20}}, "required": ["colour"], "additionalProperties": False}
    r = oa.responses.create(model="SmolLM2-135M-Instruct.Q4_1", input="Pick a colour; answer in JSON.", **GREEDY,
                            text={"format": {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)


def test_tools_it_cannot_run_are_dropped_and_custom_tools_answer(oa: OpenAI, srv: Server) -> None:
    tools: list[Any] = [
        {"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation"},  # an mcp tool is refused without --allow-mcp: tests/e2e/test_mcp.py
        {"type": "custom", "name": "apply_patch", "description": "Apply a patch given as free text"},
        {"type": "namespace", "name": "files", "description": "File tools", "tools": [FN_WEATHER]},
    ]
    body = {"model": "SmolLM2-135M-Instruct.Q4_1", "input": "Patch the file.", "tools": tools, "temperature": 0,
            "tool_choice": {"type": "custom", "name": "apply_patch"}, "parallel_tool_calls": False}
    r = httpx.post(f"{srv.url}/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    (item,) = [o for o in r.json()["output"] if o["type"] != "message"]
    assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch" and isinstance(item["input"], str)
    body["tool_choice"] = {"type": "function", "name": "get_weather", "namespace": "files"}
    (call,) = [o for o in httpx.post(f"{srv.url}/v1/responses", json=body, timeout=120).json()["output"] if o["type"] == "function_call"]
    assert (call["namespace"], call["name"]) == ("files", "get_weather")
    jsonschema.validate(json.loads(call["arguments"]), FN_WEATHER["parameters"])


def test_instructions_developer_role_and_unknown_fields(srv: Server) -> None:
    body = {"model": "SmolLM2-135M-Instruct.Q4_1", "instructions": "Answer in one word.", "max_output_tokens": 4,
            "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be kind."}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc", "client_metadata": {"x": 1},
            "reasoning": {"effort": "low", "summary": "auto"}, "metadata": {"k": "v"}, "user": "u1"}
    r = httpx.post(f"{srv.url}/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"k": "v"} and r.json()["instructions"] == "Answer in one word."


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": 5}, 400, "input"),
        ({"input": [{"type": "frobnicate"}]}, 400, "input[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role"),
        ({"input": "x", "tool_choice": {"type": "function", "name": "nope"}, "tools": [FN_WEATHER]}, 400, "tool_choice"),
        ({"input": "x", "tool_choice": "required"}, 400, "tool_choice"),
        ({"input": "x", "background": True}, 400, "background"),
        ({"input": "x", "previous_response_id": "resp_nope"}, 404, "response_id"),
        ({"input": "x", "model": "no-such-model"}, 404, "model"),
        ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, 400, "text.format.schema"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, 400, "input[0].call_id"),
        ({"input": "word " * 5000}, 400, "input"),
    ],
)
def test_bad_requests_get_openai_errors(srv: Server, body: dict[str, Any], status: int, param: str) -> None:
    r = httpx.post(f"{srv.url}/v1/responses", json=body, timeout=120)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param, err
    for stream in (False, True):  # and the server goes on serving
        ok = httpx.post(f"{srv.url}/v1/responses", json={"input": "Hi", "max_output_tokens": 2, "stream": stream}, timeout=120)
        assert ok.status_code == 200
