"""The `toolserve` request extension: `{"toolserve": {"raw": true}}` returns each choice's exact
generated text (special tokens, stop strings and the end-of-generation token included) in a
`toolserve` block of the whole response and of a stream's last chunk; off by default; bad values
are 400s in OpenAI's error shape. Each test checks the raw text against what the same response
parsed out of it, so no test depends on another request's answer."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

EOG = "<|im_end|>"  # SmolLM2's end of turn, which the engine stops on
HELLO = [{"role": "user", "content": "Say hello to Ann in one short sentence."}]
GREEDY = {"temperature": 0, "seed": 7, "max_tokens": 64}
RAW = {"toolserve": {"raw": True}}
WEATHER = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


def sse_chunks(http: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_off_by_default(client, model_id: str, http: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    r = client.chat.completions.create(model=model_id, messages=HELLO, **GREEDY)
    assert "toolserve" not in (r.model_extra or {})
    chunks = sse_chunks(http, {"messages": HELLO, **GREEDY, "stream_options": {"include_usage": True}})
    assert not [c for c in chunks if "toolserve" in c]
    off = http.post("/v1/chat/completions", json={"messages": HELLO, **GREEDY, "toolserve": {"raw": False}}).json()
    assert "toolserve" not in off


def test_whole_response_with_openai_client(client, model_id: str) -> None:  # type: ignore[no-untyped-def]
    r = client.chat.completions.create(messages=HELLO, model=model_id, extra_body=RAW, **GREEDY)
    block = r.model_extra["toolserve"]
    assert block["tool_format"] == "hermes"
    assert [c["index"] for c in block["choices"]] == [0]
    content = r.choices[0].message.content
    assert content and r.choices[0].finish_reason == "stop"
    assert block["choices"][0]["raw_text"] == content + EOG


def test_stream_last_chunk_with_openai_client(client, model_id: str) -> None:  # type: ignore[no-untyped-def]
    stream = client.chat.completions.create(messages=HELLO, model=model_id, stream=True, extra_body=RAW, **GREEDY)
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    with_block = [c for c in chunks if "toolserve" in (c.model_extra or {})]
    assert with_block == [chunks[-1]]  # only the last chunk, with no choices of its own
    assert chunks[-1].choices == []
    assert chunks[-1].model_extra["toolserve"]["choices"][0]["raw_text"] == content + EOG


def test_stream_over_http_shares_the_usage_chunk(http: httpx.Client) -> None:
    chunks = sse_chunks(http, {"messages": HELLO, **GREEDY, **RAW, "stream_options": {"include_usage": True}})
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] > 0
    assert [c for c in chunks if "toolserve" in c] == [last]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert last["toolserve"]["choices"][0]["raw_text"] == content + EOG


def test_required_call_raw_text_holds_the_markup_the_parser_read(http: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": WEATHER,
            "tool_choice": "required", "parallel_tool_calls": False, **GREEDY, "max_tokens": 200, **RAW}
    whole = http.post("/v1/chat/completions", json=body).json()
    raw = whole["toolserve"]["choices"][0]["raw_text"]
    call = whole["choices"][0]["message"]["tool_calls"][0]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert raw.lstrip().startswith("<tool_call>") and "</tool_call>" in raw
    assert '"get_weather"' in raw and call["function"]["name"] == "get_weather"
    chunks = sse_chunks(http, body)
    streamed = chunks[-1]["toolserve"]["choices"][0]["raw_text"]
    assert streamed.lstrip().startswith("<tool_call>") and "</tool_call>" in streamed


def test_stop_string_is_cut_from_content_but_kept_in_raw(http: httpx.Client) -> None:
    body = {"messages": HELLO, **GREEDY, **RAW, "stop": [" "]}  # the first space of any sentence
    whole = http.post("/v1/chat/completions", json=body).json()
    content, raw = whole["choices"][0]["message"]["content"], whole["toolserve"]["choices"][0]["raw_text"]
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert content and " " not in content
    assert raw.startswith(content + " ") and not raw.endswith(EOG)


def test_n_choices_each_get_their_text(http: httpx.Client) -> None:
    body = {"messages": HELLO, "temperature": 1.0, "seed": 3, "max_tokens": 8, "n": 2, **RAW}
    whole = http.post("/v1/chat/completions", json=body).json()
    block = whole["toolserve"]["choices"]
    assert [c["index"] for c in block] == [0, 1]
    for choice, raw in zip(whole["choices"], block, strict=True):
        text = choice["message"]["content"]
        assert raw["raw_text"] == (text + EOG if choice["finish_reason"] == "stop" else text)


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ({"raw": "yes"}, "toolserve.raw"),
        ({"raw": 1}, "toolserve.raw"),
        ({"rwa": True}, "toolserve.rwa"),
        ("raw", "toolserve"),
        ([{"raw": True}], "toolserve"),
    ],
)
def test_bad_values_are_400s_in_openai_shape(http: httpx.Client, value: Any, param: str) -> None:
    r = http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 1, "toolserve": value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["code"] == "invalid_value"
    assert set(err) == {"message", "type", "param", "code"}
