"""Every bad input gets an OpenAI error object with a 4xx status, and the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import CTX_SIZE

MSG = [{"role": "user", "content": "hi"}]


def error_of(resp: httpx.Response) -> dict:
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/chat/completions", {"model": "x"}, 400, "messages"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, "messages[0].role"),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0].content"),
        ("/v1/chat/completions", {"messages": MSG, "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/chat/completions", {"messages": MSG, "max_tokens": "many"}, 400, "max_tokens"),
        ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": -1}, 400, "max_completion_tokens"),
        ("/v1/chat/completions", {"messages": MSG, "temperature": 3}, 400, "temperature"),
        ("/v1/chat/completions", {"messages": MSG, "temperature": -0.1}, 400, "temperature"),
        ("/v1/chat/completions", {"messages": MSG, "top_p": 1.5}, 400, "top_p"),
        ("/v1/chat/completions", {"messages": MSG, "n": 0}, 400, "n"),
        ("/v1/chat/completions", {"messages": MSG, "top_logprobs": 50, "logprobs": True}, 400, "top_logprobs"),
        ("/v1/chat/completions", {"messages": MSG, "top_logprobs": 2}, 400, "top_logprobs"),
        ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"abc": 1}}, 400, "logit_bias"),
        ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"99999999": 1}}, 400, "logit_bias"),
        ("/v1/chat/completions", {"messages": MSG, "stop": ["a"] * 17}, 400, "stop"),
        ("/v1/chat/completions", {"messages": MSG * 2049}, 400, "messages"),
        ("/v1/chat/completions", {"messages": MSG, "n": 17}, 400, "n"),
        ("/v1/chat/completions", {"messages": MSG, "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]}, 400, "tools"),
        ("/v1/chat/completions", {"messages": MSG, "tools": [{"type": "function", "function": {"name": "bad name!"}}]}, 400, "tools[0].function.name"),
        ("/v1/chat/completions", {"messages": MSG, "stream": "yes please"}, 400, "stream"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]}, 400, "messages[0].content[0]"),
        ("/v1/completions", {"model": "x"}, 400, "prompt"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": [99999999]}, 400, "prompt"),
        ("/v1/completions", {"prompt": "hi", "suffix": "end"}, 400, "suffix"),
        ("/tokenize", {}, 400, "prompt"),
        ("/detokenize", {"tokens": [99999999]}, 400, "tokens"),
    ],
)
def test_bad_requests(http: httpx.Client, path: str, body: dict, status: int, param: str) -> None:
    resp = http.post(path, json=body)
    assert resp.status_code == status, resp.text
    err = error_of(resp)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param


def test_malformed_json(http: httpx.Client) -> None:
    resp = http.post("/v1/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"})
    assert resp.status_code == 400
    assert error_of(resp)["code"] == "invalid_json"


def test_unknown_model_is_404(http: httpx.Client, client) -> None:  # type: ignore[no-untyped-def]
    resp = http.post("/v1/chat/completions", json={"model": "gpt-9", "messages": MSG})
    assert resp.status_code == 404
    assert error_of(resp)["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=MSG)


def test_context_length_exceeded(http: httpx.Client) -> None:
    long = "word " * (CTX_SIZE + 100)
    messages = [{"role": "user", "content": long}]
    for path, body, param, count_body in [
        ("/v1/chat/completions", {"messages": messages}, "messages", {"messages": messages}),
        ("/v1/completions", {"prompt": long}, "prompt", {"prompt": long}),
    ]:
        resp = http.post(path, json=body)
        assert resp.status_code == 400
        err = error_of(resp)
        assert err["code"] == "context_length_exceeded"
        assert err["param"] == param
        assert str(CTX_SIZE) in err["message"]
        n_prompt = http.post("/tokenize", json=count_body).json()["count"]
        assert f"{n_prompt} tokens" in err["message"]


def test_unknown_route_and_method(http: httpx.Client) -> None:
    assert error_of(http.get("/v1/nope"))["code"] == "not_found"
    resp = http.get("/v1/chat/completions")
    assert resp.status_code == 405
    error_of(resp)


def test_extra_fields_are_ignored(http: httpx.Client) -> None:
    resp = http.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 2, "some_vendor_field": {"x": 1}})
    assert resp.status_code == 200


def test_still_serving_after_errors(client, model_id: str, http: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    for _ in range(3):
        http.post("/v1/chat/completions", content=b"not json", headers={"content-type": "application/json"})
        http.post("/v1/chat/completions", json={"messages": []})
    r = client.chat.completions.create(model=model_id, messages=MSG, max_tokens=4)
    assert r.choices[0].message.content is not None
