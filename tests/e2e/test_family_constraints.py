"""Every family's guarantee on a real server (issue 32): the bundled SmolLM2 made to write each of
the 34 formats (`tool_format`, one id per format in one `--config` server), with tool schemas
drawn by hypothesis, under `required`, a named function and `auto`, seeded and sampled: every
call the family's parser reads back validates against its tool's schema, and `finish_reason` is
`tool_calls` whenever calls came, unless max_tokens cut the answer. The same through the
Responses and Messages APIs, streamed and not."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Server
from toolserve.formats.registry import FORMATS

CTX = 2048
WORDS = st.text(string.ascii_lowercase, min_size=1, max_size=6)
# what a small model can fill in within a few dozen tokens: bounded strings, ranges, flags, small nests
PARAM = st.one_of(
    st.just({"type": "string", "maxLength": 24}),
    st.builds(lambda words: {"type": "string", "enum": words}, st.lists(WORDS, min_size=1, max_size=3, unique=True)),
    st.just({"type": "string", "pattern": "^[a-z]{2,8}$"}),
    st.builds(lambda lo: {"type": "integer", "minimum": lo, "maximum": lo + 50}, st.integers(-20, 20)),
    st.just({"type": "number", "minimum": 0, "maximum": 100}),
    st.just({"type": "boolean"}),
    st.just({"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "maxItems": 3}),
    st.just({"type": "object", "properties": {"day": {"type": "string", "enum": ["mon", "tue"]}, "hour": {"type": "integer", "minimum": 0, "maximum": 23}},
             "required": ["day"]}),
    st.just({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]}),
    st.just({"$ref": "#/$defs/city"}),
)
DEFS = {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}}


@st.composite
def tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for name in draw(st.lists(st.sampled_from(["get_weather", "book_table", "send_note"]), min_size=1, max_size=2, unique=True)):
        props = draw(st.dictionaries(st.sampled_from(["city", "count", "note", "when", "flag", "colors", "level"]), PARAM, max_size=3))
        params: dict[str, Any] = {"type": "object", "properties": props, "required": [k for k in props if draw(st.booleans())]}
        if any("$ref" in p for p in props.values()):
            params["$defs"] = DEFS
        out.append({"type": "function", "function": {"name": name, "description": f"{name.replace('_', ' ')}.", "parameters": params}})
    return out


ASK = [{"role": "user", "content": "Use a tool for this: the weather in Paris, a table for two, or a note. Call it now."}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config: Path = tmp_path_factory.mktemp("formats") / "models.yaml"
    lines = ["models:"]
    for fmt in sorted(FORMATS):
        lines += [f"  - id: {fmt}", "    model: bundled", f"    tool_format: {fmt}", f"    ctx_size: {CTX}", "    parallel: 1"]
    config.write_text("\n".join(lines) + "\n")
    s = Server(["--config", str(config)])
    yield s
    s.stop()


def check(schemas: dict[str, Any], body: dict[str, Any], named: str | None = None) -> None:
    """A chat answer's calls validate; its finish says so."""
    choice = body["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    cut = choice["finish_reason"] == "length"
    for c in calls[:-1] if cut else calls:  # a call that max_tokens cut is no whole call
        assert c["function"]["name"] in schemas and (named is None or c["function"]["name"] == named), c
        jsonschema.validate(json.loads(c["function"]["arguments"]), schemas[c["function"]["name"]])
    if choice["finish_reason"] != "length":
        assert (choice["finish_reason"] == "tool_calls") == bool(calls), choice
        if named is not None or body.get("_required"):
            assert calls, choice


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_call_validates_under_every_tool_choice(srv: Server, fmt: str) -> None:
    @given(offered=tools(), seed=st.integers(0, 2**16))
    @settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(offered: list[dict[str, Any]], seed: int) -> None:
        schemas = {t["function"]["name"]: {**t["function"]["parameters"]} for t in offered}
        base = {"model": fmt, "messages": ASK, "tools": offered, "max_tokens": 96, "temperature": 0.7, "seed": seed}
        named = offered[-1]["function"]["name"]
        for choice, expect in (("required", None), ({"type": "function", "function": {"name": named}}, named), ("auto", None)):
            r = httpx.post(f"{srv.url}/v1/chat/completions", json={**base, "tool_choice": choice}, timeout=300)
            assert r.status_code == 200, r.text[:500]
            body = r.json()
            body["_required"] = choice == "required"
            check(schemas, body, expect)

    run()


PROTOCOL_FORMATS = ["hermes", "qwen3_coder", "pythonic", "gemma4", "deepseek_v3", "gpt_oss", "mistral_v11", "kimi_k2"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"]}}}


def sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip() != "[DONE]"]


@pytest.mark.parametrize("fmt", PROTOCOL_FORMATS)
@pytest.mark.parametrize("stream", [False, True])
def test_responses_and_messages_keep_the_guarantee(srv: Server, fmt: str, stream: bool) -> None:
    schema = WEATHER["function"]["parameters"]
    fn = {"type": "function", "name": "get_weather", "description": "Weather for a city.", "parameters": schema}
    r = httpx.post(f"{srv.url}/v1/responses", json={"model": fmt, "input": ASK[0]["content"], "tools": [fn], "tool_choice": "required",
                                                     "max_output_tokens": 96, "temperature": 0, "stream": stream}, timeout=300)
    assert r.status_code == 200, r.text[:500]
    final = next(e["response"] for e in sse(r.text) if e["type"] in ("response.completed", "response.incomplete")) if stream else r.json()
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert all(i["type"] != "message" for i in final["output"]), final["output"]  # calls only: not even a cut marker as text
    if final["status"] == "completed":
        assert calls
    for c in calls if final["status"] == "completed" else calls[:-1]:
        jsonschema.validate(json.loads(c["arguments"]), schema)

    tool = {"name": "get_weather", "description": "Weather for a city.", "input_schema": schema}
    m = httpx.post(f"{srv.url}/v1/messages", json={"model": fmt, "max_tokens": 96, "messages": ASK, "tools": [tool],
                                                   "tool_choice": {"type": "any"}, "temperature": 0, "stream": stream}, timeout=300)
    assert m.status_code == 200, m.text[:500]
    if stream:
        events = sse(m.text)
        stop = next(e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta")
        uses = [json.loads("".join(d["delta"]["partial_json"] for d in events
                                   if d["type"] == "content_block_delta" and d["index"] == e["index"] and d["delta"]["type"] == "input_json_delta") or "{}")
                for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"]
    else:
        stop = m.json()["stop_reason"]
        uses = [b["input"] for b in m.json()["content"] if b["type"] == "tool_use"]
    if stop != "max_tokens":
        assert stop == "tool_use" and uses
    for args in uses if stop != "max_tokens" else uses[:-1]:
        jsonschema.validate(args, schema)
