"""Families end to end: a real `toolserve serve` in raw mode, its family detected from a chat
template that carries the family's markers, in front of a small real HTTP server that streams a
model's text back from /v1/completions in small pieces. The official `openai` client checks that
reasoning, content and calls come out split, and identically streaming or not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import Server
from tests.stub_http import StubHttp

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]

# Chat templates written for these tests, with the markers their families' GGUF templates carry.
GRANITE_TEMPLATE = (
    "<|start_of_role|>system<|end_of_role|>Write your thoughts between <think></think> and write your response "
    "between <response></response> for each user query. To call a tool, respond only with <|tool_call|> followed "
    "by a JSON list.<|end_of_text|>\n"
    "{% for m in messages %}<|start_of_role|>{{ m.role }}<|end_of_role|>{{ m.content }}<|end_of_text|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"
)
DSML_TEMPLATE = (
    "{% set dsml_token = '｜DSML｜' %}<｜begin▁of▁sentence｜>Call tools with a <{{ dsml_token }}function_calls> block "
    "of <{{ dsml_token }}invoke name=\"...\"> elements.{% for m in messages %}"
    "{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% else %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<｜Assistant｜><think>{% endif %}"
)
M3_TEMPLATE = (
    "{% set ns_token = ']<]minimax[>[' %}]~!b[]~b]system\nCall tools in a {{ ns_token }}<tool_call> block.[e~[\n"
    "{% for m in messages %}]~b]{{ 'ai' if m.role == 'assistant' else m.role }}\n{{ m.content }}[e~[\n{% endfor %}"
    "{% if add_generation_prompt %}]~b]ai\n<mm:think>\n{% endif %}"
)


class CannedUpstream(StubHttp):
    """A real HTTP server whose /v1/completions streams `text` back in pieces of `piece`
    characters, as an OpenAI-compatible server continues a prompt."""

    def __init__(self) -> None:
        self.text = ""
        self.piece = 3
        self.prompts: list[str] = []
        super().__init__()

    @classmethod
    def _json(cls, body: Any) -> bytes:
        return cls.reply("200 OK", json.dumps(body).encode())

    def _stream(self) -> bytes:
        out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        pieces = [self.text[i:i + self.piece] for i in range(0, len(self.text), self.piece)]
        for i, p in enumerate(pieces):
            finish = "stop" if i == len(pieces) - 1 else None
            chunk = {"id": "c", "object": "text_completion", "created": 0, "model": "canned",
                     "choices": [{"index": 0, "text": p, "finish_reason": finish}]}
            out += b"data: " + json.dumps(chunk).encode() + b"\n\n"
        return out + b"data: [DONE]\n\n"

    async def respond(self, method: str, path: str, body: Any, writer: asyncio.StreamWriter) -> None:
        if method == "GET" and path == "/health":
            writer.write(self._json({}))
        elif method == "GET" and path == "/v1/models":
            writer.write(self._json({"object": "list", "data": [{"id": "canned", "object": "model"}]}))
        else:
            self.prompts.append(str(body.get("prompt")))
            writer.write(self._stream())


@pytest.fixture(scope="module")
def upstream() -> Iterator[CannedUpstream]:
    srv = CannedUpstream()
    yield srv
    srv.stop()


def front(upstream: CannedUpstream, template: str, tmp: Path, alias: str) -> Server:
    path = tmp / f"{alias}.jinja"
    path.write_text(template, encoding="utf-8")
    return Server(["--upstream", upstream.url, "--upstream-mode", "raw", "--chat-template", str(path),
                   "--model-alias", alias])


@pytest.fixture(scope="module")
def granite(upstream: CannedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = front(upstream, GRANITE_TEMPLATE, tmp_path_factory.mktemp("granite"), "granite-raw")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def dsml(upstream: CannedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = front(upstream, DSML_TEMPLATE, tmp_path_factory.mktemp("dsml"), "dsml-raw")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def m3(upstream: CannedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = front(upstream, M3_TEMPLATE, tmp_path_factory.mktemp("m3"), "m3-raw")
    yield srv
    srv.stop()


def client_of(srv: Server) -> OpenAI:
    return OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=60)


def both(srv: Server, model: str, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The message non-streaming and the message rebuilt from the stream, as plain dicts."""
    client = client_of(srv)
    whole = client.chat.completions.create(model=model, messages=ASK, **kwargs)  # type: ignore[call-overload]
    msg = whole.choices[0].message
    extra = msg.model_extra or {}
    one = {"content": msg.content or "", "reasoning": extra.get("reasoning_content") or "",
           "calls": [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []],
           "finish": whole.choices[0].finish_reason}
    content, reasoning, finish = [], [], None
    calls: dict[int, list[Any]] = {}
    for chunk in client.chat.completions.create(model=model, messages=ASK, stream=True, **kwargs):  # type: ignore[call-overload]
        for ch in chunk.choices:
            d = ch.delta
            content.append(d.content or "")
            reasoning.append((d.model_extra or {}).get("reasoning_content") or "")
            for tc in d.tool_calls or []:
                entry = calls.setdefault(tc.index, ["", ""])
                entry[0] += (tc.function.name or "") if tc.function else ""
                entry[1] += (tc.function.arguments or "") if tc.function else ""
            finish = ch.finish_reason or finish
    streamed = {"content": "".join(content), "reasoning": "".join(reasoning),
                "calls": [(n, json.loads(a)) for n, a in (calls[i] for i in sorted(calls))], "finish": finish}
    return one, streamed


def test_granite_detected_from_template(granite: Server) -> None:
    ts = httpx.get(f"{granite.url}/v1/models").json()["data"][0]["toolserve"]
    assert (ts["mode"], ts["tool_format"]) == ("raw", "granite")


@pytest.mark.parametrize("piece", [1, 3, 7])
def test_granite_think_and_response_wrapper(granite: Server, upstream: CannedUpstream, piece: int) -> None:
    upstream.text, upstream.piece = "<think>The user asks\nabout Paris.</think><response>It is sunny.\nEnjoy!</response>", piece
    for msg in both(granite, "granite-raw"):
        assert msg == {"content": "It is sunny.\nEnjoy!", "reasoning": "The user asks\nabout Paris.", "calls": [],
                       "finish": "stop"}


def test_granite_reasoning_dropped_on_request(granite: Server, upstream: CannedUpstream) -> None:
    upstream.text, upstream.piece = "<think>Hidden.</think><response>Shown.</response>", 2
    for msg in both(granite, "granite-raw", extra_body={"include_reasoning": False}):
        assert (msg["content"], msg["reasoning"]) == ("Shown.", "")


def test_granite_response_tag_in_prose_is_kept(granite: Server, upstream: CannedUpstream) -> None:
    upstream.text, upstream.piece = "Close it with </response> and move on.", 4
    for msg in both(granite, "granite-raw"):
        assert (msg["content"], msg["reasoning"]) == ("Close it with </response> and move on.", "")


def test_granite_call_after_reasoning(granite: Server, upstream: CannedUpstream) -> None:
    upstream.text = '<think>Need the weather.</think><|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    upstream.piece = 5
    for msg in both(granite, "granite-raw", tools=TOOLS):
        assert msg == {"content": "", "reasoning": "Need the weather.", "calls": [("get_weather", {"city": "Paris"})],
                       "finish": "tool_calls"}


def test_dsml_detected_from_template(dsml: Server) -> None:
    ts = httpx.get(f"{dsml.url}/v1/models").json()["data"][0]["toolserve"]
    assert (ts["mode"], ts["tool_format"]) == ("raw", "deepseek_v32")


@pytest.mark.parametrize("piece", [1, 4, 9])
def test_dsml_thinking_then_calls(dsml: Server, upstream: CannedUpstream, piece: int) -> None:
    d = "｜DSML｜"
    upstream.text = (f"The user wants Paris.</think>\n\n<{d}function_calls>\n<{d}invoke name=\"get_weather\">\n"
                     f"<{d}parameter name=\"city\" string=\"true\">Paris</{d}parameter>\n"
                     f"<{d}parameter name=\"days\" string=\"false\">2</{d}parameter>\n</{d}invoke>\n"
                     f"<{d}invoke name=\"get_weather\">\n<{d}parameter name=\"city\" string=\"true\">Lyon</{d}parameter>\n"
                     f"</{d}invoke>\n</{d}function_calls><｜end▁of▁sentence｜>")
    upstream.piece = piece
    for msg in both(dsml, "dsml-raw", tools=TOOLS):
        assert msg == {"content": "", "reasoning": "The user wants Paris.", "finish": "tool_calls",
                       "calls": [("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"})]}
    assert upstream.prompts[-1].endswith("<｜Assistant｜><think>")


@pytest.mark.parametrize("piece", [2, 6])
def test_minimax_m3_nested_call_after_reasoning(m3: Server, upstream: CannedUpstream, piece: int) -> None:
    ns = "]<]minimax[>["
    upstream.text = (f"Paris, two days.\n</mm:think>\n\n{ns}<tool_call>\n{ns}<invoke name=\"get_weather\">"
                     f"{ns}<city>Paris{ns}</city>{ns}<days>2{ns}</days>{ns}</invoke>\n{ns}</tool_call>[e~[")
    upstream.piece = piece
    ts = httpx.get(f"{m3.url}/v1/models").json()["data"][0]["toolserve"]
    assert ts["tool_format"] == "minimax_m3"
    for msg in both(m3, "m3-raw", tools=TOOLS):
        assert msg == {"content": "", "reasoning": "Paris, two days.", "finish": "tool_calls",
                       "calls": [("get_weather", {"city": "Paris", "days": 2})]}
