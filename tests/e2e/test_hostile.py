"""What a hostile client found (issue 31), one class of finding per test: the prompt cache's
eviction race, numbers JSON does not have, references to calls that were never made, routes
that computed without bounds or without the key, cross-site requests, keys in query strings,
internal errors that carried request data."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server

KEY = "s3cret-key"
EVIL = "https://evil.example.com"


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server(["--ctx-size", "512", "--log-level", "info", "--max-n", "4", "--embeddings"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def keyed() -> Iterator[Server]:
    s = Server(["--ctx-size", "256", "--api-key", KEY])
    yield s
    s.stop()


def post(srv: Server, path: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(f"{srv.url}{path}", content=content, timeout=120, **{"headers": {"content-type": "application/json"}, **kw})


# -- the prompt cache: a save evicted the snapshot chosen for the prompt -----------------------------
def test_a_full_prompt_cache_never_fails_a_valid_request_nor_leaks_a_prompt() -> None:
    """Issue 31's reproduction: one sequence, a cache that holds one system prompt's snapshot
    (about 200 tokens: 4.7 MB of 6); A, then B (A's sequence is saved), then A again: A's
    snapshot is chosen, and saving B's sequence first evicted it (a 500 whose message held the
    first request's token ids). Now B's is not saved and A's is restored."""
    system_a = "You are a careful assistant for a bank. " * 20
    system_b = "You are a cheerful assistant for a bakery. " * 20
    chats = [(system_a, "My password is hunter2, remember it."), (system_b, "Hi"), (system_a, "Hello")] * 2
    s = Server(["--ctx-size", "512", "--parallel", "1", "--cache-ram", "6"])
    try:
        cached = []
        for system, user in chats:
            body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}], "max_tokens": 4, "temperature": 0}
            r = post(s, "/v1/chat/completions", body)
            assert r.status_code == 200, r.text[:300]
            cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        assert cached[2] > 0 and cached[5] > 0  # A's system prompt came back from its snapshot
        cache = httpx.get(f"{s.url}/health").json()["toolserve"]["prompt_cache"]
        assert cache["restores"] >= 2 and cache["bytes"] <= cache["budget_bytes"]
        assert "hunter2" not in s.stderr_text()
    finally:
        s.stop()


def test_a_server_error_names_its_request_id_and_no_request_data() -> None:
    """A 5xx (here the engine process dying under a request) carries the request's id, which the
    log names beside the failure: nothing of the request itself."""
    s = Server(["--ctx-size", "256"], env={"TOOLSERVE_TEST_FAULTS": "1"})
    try:
        assert post(s, "/debug/engine-fault", {"kind": "exit"}).status_code == 200
        secret = "the launch code is 4471"
        r = post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": secret}], "max_tokens": 8})
        assert r.status_code == 503, r.text[:300]
        rid = r.headers["x-request-id"]
        message = r.json()["error"]["message"]
        assert message.endswith(f"(request {rid})") and "4471" not in message
        assert re.search(rf"{rid} EngineUnavailable", s.stderr_text())
        assert "4471" not in s.stderr_text()
    finally:
        s.stop()


# -- numbers that JSON does not have ---------------------------------------------------------------
NUMBER_CASES = [
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": '
                             '{"name": "f", "parameters": {"type": "object", "maximum": Infinity}}}]}', "tools[0].function.parameters.maximum"),
    ("/v1/completions", '{"prompt": "hi", "logit_bias": {"5": -Infinity}}', "logit_bias.5"),
    ("/v1/responses", '{"input": "hi", "tools": [{"type": "function", "name": "f", "strict": NaN}]}', "tools[0].strict"),
    ("/v1/responses", '{"input": [{"role": "user", "content": [{"type": "input_text", "text": 1e400}]}]}', "input[0].content[0].text"),
    ("/v1/responses", '{"input": "hi", "reasoning": {"effort": -1e400}}', "reasoning.effort"),
    ("/v1/responses", '{"input": "hi", "tool_choice": {"type": "function", "name": NaN}}', "tool_choice.name"),
    ("/v1/responses", '{"input": "hi", "tools": [{"type": "web_search", "x": Infinity}]}', "tools[0].x"),
    ("/v1/messages", '{"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "metadata": {"n": NaN}}', "metadata.n"),
    ("/v1/messages/count_tokens", '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": Infinity}]}]}',
     "messages[0].content[0].x"),
    ("/v1/embeddings", '{"input": "hi", "dimensions": 1e400}', "dimensions"),
    ("/tokenize", '{"content": "hi", "extra": [1, NaN]}', "extra[1]"),
]


@pytest.mark.parametrize(("path", "body", "param"), NUMBER_CASES)
@pytest.mark.parametrize("stream", [False, True])
def test_nan_and_infinities_are_a_400_naming_the_place(srv: Server, path: str, body: str, param: str, stream: bool) -> None:
    if stream:
        body = body[:-1] + ', "stream": true}'
    r = post(srv, path, body)
    assert r.status_code == 400, r.text[:300]
    if path.startswith("/v1/messages"):
        assert r.json()["type"] == "error" and param in r.json()["error"]["message"]
    else:
        error = r.json()["error"]
        assert error["param"] == param and error["code"] == "invalid_value", error


# -- references between items ----------------------------------------------------------------------------
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
REFERENCE_CASES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_1", "content": "x"}]},
     "messages[1].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [CALL]},
                                           {"role": "tool", "tool_call_id": "call_2", "content": "x"}]}, "messages[2].tool_call_id"),
    ("/v1/responses", {"input": [{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "nope", "output": "x"}]},
     "input[1].call_id"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": []}],
                       "tool_choice": {"type": "function", "name": "f", "namespace": "ns"}}, "tool_choice"),
    ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}]},
     "toolu_9"),
]


@pytest.mark.parametrize(("path", "body", "param"), REFERENCE_CASES)
def test_a_reference_to_a_call_never_made_is_a_400(srv: Server, path: str, body: dict[str, Any], param: str) -> None:
    r = post(srv, path, body)
    assert r.status_code == 400, r.text[:300]
    if path.startswith("/v1/messages"):
        assert param in r.json()["error"]["message"]
    else:
        assert r.json()["error"]["param"].startswith(param), r.json()


# -- Messages requests that are valid or nearly so ---------------------------------------------------------
TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}


@pytest.mark.parametrize(
    "body",
    [
        {"tools": [{"type": None, "name": "f", "input_schema": {"type": "object"}}], "messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "hi"}, TOOL_USE,
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}]},
        {"messages": [{"role": "user", "content": "hi"}, TOOL_USE,
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": None}]}]},
    ],
)
def test_messages_near_the_edge_are_answered(srv: Server, body: dict[str, Any]) -> None:
    for _ in range(3):  # again and again: the cache fault showed once the cache was full
        r = post(srv, "/v1/messages", {"max_tokens": 4, **body})
        assert r.status_code == 200, r.text[:300]


# -- bounds ------------------------------------------------------------------------------------------------
def test_tokenize_takes_the_chat_caps(srv: Server) -> None:
    many = [{"role": "user", "content": "x"}] * 2049
    r = post(srv, "/tokenize", {"messages": many})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text[:300]
    assert post(srv, "/tokenize", {"messages": many[:20]}).status_code == 200


def test_completions_cap_choices_over_all_prompts(srv: Server) -> None:
    r = post(srv, "/v1/completions", {"prompt": ["a"] * 3, "n": 2, "max_tokens": 1})  # 6 choices, over --max-n 4
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text[:300]
    r = post(srv, "/v1/completions", {"prompt": ["a"] * 2, "n": 2, "max_tokens": 1})
    assert r.status_code == 200 and len(r.json()["choices"]) == 4


def test_embeddings_cap_inputs_and_tokens(srv: Server) -> None:
    r = post(srv, "/v1/embeddings", {"input": ["a"] * 2049})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


def test_tokenize_and_detokenize_need_the_key(keyed: Server) -> None:
    for path, body in [("/tokenize", {"content": "hi"}), ("/detokenize", {"tokens": [1, 2]})]:
        assert post(keyed, path, body).status_code == 401
        assert post(keyed, path, body, headers={"content-type": "application/json", "authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.get(f"{keyed.url}/health").status_code == 200  # still open: load balancers


# -- cross-site requests -----------------------------------------------------------------------------------
def test_a_page_elsewhere_cannot_unload_the_model_or_generate(srv: Server) -> None:
    model = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"]
    r = httpx.post(f"{srv.url}/v1/models/{model}/unload", headers={"Origin": EVIL})  # a body-less simple request: no preflight
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    form = httpx.post(f"{srv.url}/v1/chat/completions", headers={"Origin": "null", "content-type": "text/plain"}, content="{}")
    assert form.status_code == 403
    m = post(srv, "/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
             headers={"Origin": EVIL, "content-type": "application/json"})
    assert m.status_code == 403 and m.json()["type"] == "error"  # in the protocol's own shape
    state = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["toolserve"]
    assert state.get("state", "loaded") == "loaded"
    # the server's own pages, and localhost pages (allowed by default), are not refused
    for origin in (srv.url, "http://localhost:3000"):
        ok = post(srv, "/tokenize", {"content": "hi"}, headers={"Origin": origin, "content-type": "application/json"})
        assert ok.status_code == 200, (origin, ok.text[:200])
    assert httpx.get(f"{srv.url}/v1/models", headers={"Origin": EVIL}).status_code == 200  # reads: CORS decides


def test_cors_origins_replace_the_local_default() -> None:
    s = Server(["--ctx-size", "256", "--cors-origins", "https://app.example.org"])
    try:
        body = {"content": "hi"}
        allowed = post(s, "/tokenize", body, headers={"Origin": "https://app.example.org", "content-type": "application/json"})
        assert allowed.status_code == 200
        assert post(s, "/tokenize", body, headers={"Origin": "http://localhost:3000", "content-type": "application/json"}).status_code == 403
    finally:
        s.stop()


# -- logs ----------------------------------------------------------------------------------------------------
def test_a_key_in_the_query_string_is_not_logged(srv: Server) -> None:
    r = httpx.get(f"{srv.url}/v1/models?api_key=sk-query-9f8e7d")
    assert r.status_code == 200
    log = srv.stderr_text()
    assert r.headers["x-request-id"] in log  # the access line is there
    assert "sk-query-9f8e7d" not in log
