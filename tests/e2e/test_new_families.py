"""Issue 16's new families on a real server: one `toolserve serve --config` process serving the
bundled SmolLM2 under each new `tool_format`. Its plain ChatML template knows no tools, so tools
and tool history are injected in each family's own syntax; the rendered prompt (read back through
/tokenize and /detokenize) must hold them, chat completions answer whole and streamed through the
official client, and `tool_choice: required` gives a valid call in the family's syntax."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest

from tests.conftest import CTX_SIZE, Server

# family -> (text of the injected tool prompt, the prior call as the family writes it)
FAMILIES = {
    "internlm2": ("<|action_start|><|plugin|>", '<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": '
                  '{"city": "Paris"}}<|action_end|>'),
    "jamba": ("<tool_definitions>", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>'),
    "hunyuan": ("<tool_calls>", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>'),
    "xlam": ("make calls in a single JSON array", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    "apertus": ("<|tools_prefix|>", '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>'),
    "gigachat3": ("function call<|role_sep|>", 'function call<|role_sep|>\n{"name": "get_weather", "arguments": '
                  '{"city": "Paris"}}'),
}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"},
    {"role": "user", "content": "Thanks. And tomorrow?"},
]


@pytest.fixture(scope="module")
def families_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config: Path = tmp_path_factory.mktemp("families") / "models.yaml"
    lines = ["models:"]
    for fam in FAMILIES:
        lines += [f"  - id: {fam}", "    model: bundled", f"    tool_format: {fam}", f"    ctx_size: {CTX_SIZE}",
                  "    parallel: 1", "    cache_ram: 0"]
    config.write_text("\n".join(lines) + "\n")
    srv = Server(["--config", str(config)])
    yield srv
    srv.stop()


@pytest.fixture()
def http(families_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=families_server.url, timeout=120) as c:
        yield c


@pytest.mark.parametrize("fam", sorted(FAMILIES))
def test_history_and_tools_are_injected_in_the_family_syntax(http: httpx.Client, fam: str) -> None:
    tokens = http.post("/tokenize", json={"model": fam, "messages": HISTORY, "tools": [TOOL]}).json()["tokens"]
    card = next(m for m in http.get("/v1/models").json()["data"] if m["id"] == fam)  # loaded now
    assert card["toolserve"]["tool_format"] == fam
    prompt = http.post("/detokenize", json={"model": fam, "tokens": tokens}).json()["prompt"]
    tool_prompt, call = FAMILIES[fam]
    assert tool_prompt in prompt and call in prompt
    assert "22 C and sunny" in prompt and "Weather for a city." in prompt


@pytest.mark.parametrize("fam", sorted(FAMILIES))
def test_chat_whole_and_streamed(families_server: Server, fam: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{families_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    whole = client.chat.completions.create(model=fam, messages=HISTORY, tools=[TOOL], max_tokens=12, temperature=0,
                                           seed=1)
    choice = whole.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert whole.usage.prompt_tokens > 50
    chunks = list(client.chat.completions.create(model=fam, messages=HISTORY, tools=[TOOL], max_tokens=12,
                                                 temperature=0, seed=1, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (choice.message.content or "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [choice.finish_reason]


@pytest.mark.parametrize("fam", sorted(FAMILIES))
def test_required_gives_a_valid_call_in_the_family_syntax(http: httpx.Client, fam: str) -> None:
    """Issue 32: these families are constrained too (they were a 400)."""
    r = http.post("/v1/chat/completions", json={"model": fam, "messages": HISTORY[:1], "tools": [TOOL],
                                                "tool_choice": "required", "max_tokens": 48, "temperature": 0})
    assert r.status_code == 200, r.text[:300]
    choice = r.json()["choices"][0]
    calls = choice["message"]["tool_calls"] or []
    assert choice["finish_reason"] == "length" or (calls and choice["finish_reason"] == "tool_calls"), choice
    whole = calls if choice["finish_reason"] != "length" else calls[:-1]  # a call cut by max_tokens is no whole call
    for c in whole:
        assert c["function"]["name"] == "get_weather"
        jsonschema.validate(json.loads(c["function"]["arguments"]), TOOL["function"]["parameters"])
