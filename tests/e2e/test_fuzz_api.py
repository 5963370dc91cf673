"""Fuzzing the HTTP API from its own OpenAPI schema (schemathesis): never a 5xx, never a hang,
every error in OpenAI's shape. Bounded: a small context keeps every generation short."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import Server


@pytest.fixture(scope="module")
def small() -> Iterator[Server]:
    srv = Server(["--ctx-size", "128"])
    yield srv
    srv.stop()


def test_no_server_errors_from_schema_driven_requests(small: Server) -> None:
    schema = schemathesis.openapi.from_url(f"{small.url}/openapi.json")

    @given(case=schema.as_strategy())
    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: schemathesis.Case) -> None:
        response = case.call(base_url=small.url, timeout=60)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])
        if response.status_code >= 400 and case.method != "HEAD":  # a HEAD answer has no body
            try:
                body = response.json()
            except ValueError:
                raise AssertionError(f"not JSON: {case.method} {case.path} {response.status_code} {response.text[:300]!r}") from None
            if case.path.startswith("/v1/messages"):  # Anthropic's shape
                assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
            elif case.path.startswith("/api/"):  # Ollama's shape
                assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
            else:
                assert set(body["error"]) == {"message", "type", "param", "code"}

    check()


def test_context_is_the_size_asked_for(small: Server) -> None:
    """llama.cpp rounds a 128-token context up to 256; a prompt between the two is still too long."""
    assert httpx.get(f"{small.url}/v1/models").json()["data"][0]["max_model_len"] == 128
    prompt = list(range(200, 200 + 150))  # 150 token ids
    r = httpx.post(f"{small.url}/v1/completions", json={"prompt": prompt, "max_tokens": 4}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(f"{small.url}/v1/completions", json={"prompt": prompt[:120], "max_tokens": 50}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 8  # clamped to the room left


# Strings as JSON can carry them: any character, lone UTF-16 surrogates (`\ud800`) included,
# which schemathesis never draws (its alphabet leaves category Cs out).
# (st.text drops them from any alphabet, hence a joined list)
TEXT = st.lists(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=6).map("".join)


def as_json_reads(text: str) -> tuple[bool, str]:
    """How a JSON reader sees `text` sent as escapes: a high surrogate just before a low one is
    one character (`\\ud800\\udc00` is U+10000); any other surrogate is lone. Returns whether
    one is lone, and the text with pairs joined and lone ones spelled as their escape."""
    out, lone, i = [], False, 0
    while i < len(text):
        c = text[i]
        if 0xD800 <= ord(c) <= 0xDBFF and i + 1 < len(text) and 0xDC00 <= ord(text[i + 1]) <= 0xDFFF:
            out.append(chr(0x10000 + ((ord(c) - 0xD800) << 10) + (ord(text[i + 1]) - 0xDC00)))
            i += 2
            continue
        if 0xD800 <= ord(c) <= 0xDFFF:
            lone = True
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
        i += 1
    return lone, "".join(out)


def surrogate_places(value: object, path: str = "") -> set[str]:
    """Every place (OpenAI's param spelling) whose string, or key, holds a lone surrogate."""
    if isinstance(value, str):
        return {path} if as_json_reads(value)[0] else set()
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            inner = f"{path}.{k}" if path else k
            # a key's surrogate comes back spelled as its escape (the error must be valid UTF-8)
            lone, escaped = as_json_reads(inner)
            out |= {escaped} if lone else surrogate_places(v, escaped)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out |= surrogate_places(v, f"{path}[{i}]")
    return out


@st.composite
def request_with_text(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    t = lambda: draw(TEXT)  # noqa: E731
    kind = draw(st.sampled_from(["chat", "completion", "tokenize"]))
    if kind == "completion":
        prompt = draw(st.sampled_from([t(), [t(), t()]]))
        return "/v1/completions", {"prompt": prompt, "max_tokens": 1, "stop": [t()], "user": t()}
    if kind == "tokenize":
        return "/tokenize", {"content": t()}
    call = {"id": t(), "type": "function", "function": {"name": "f", "arguments": t()}}
    messages = [
        {"role": "system", "content": [{"type": "text", "text": t()}]},
        {"role": "user", "content": t(), "name": t()},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": t()},
        {"role": "tool", "tool_call_id": call["id"], "content": t()},  # it must answer the call
    ]
    params = {"type": "object", "properties": {t(): {"type": "string", "description": t()}}}
    tools = [{"type": "function", "function": {"name": "f", "description": t(), "parameters": params}}]
    return "/v1/chat/completions", {"messages": messages, "tools": tools, "stop": t(), "max_tokens": 1}


def test_lone_surrogates_anywhere_are_a_400_naming_the_place(small: Server) -> None:
    @given(request=request_with_text())
    @example(request=("/tokenize", {"content": "\ud800\udc00"}))  # a pair: U+10000 once read, not lone
    @example(request=("/tokenize", {"content": "\udc00\ud800"}))  # the wrong order: two lone ones
    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(request: tuple[str, dict[str, object]]) -> None:
        path, body = request
        data = json.dumps(body)  # ASCII: a lone surrogate travels as its \ud800 escape
        r = httpx.post(f"{small.url}{path}", content=data, headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code < 500, (path, data, r.text[:300])
        places = surrogate_places(body)
        if r.status_code >= 400:
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
        if places:
            assert r.status_code == 400 and error["code"] == "invalid_unicode", (data, r.text[:300])
            assert error["param"] in places, (error["param"], places)
        else:
            assert r.status_code == 200 or error["code"] != "invalid_unicode"

    check()
