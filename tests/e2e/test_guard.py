"""API key, Host check (DNS rebinding), CORS, body cap and request ids."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from tests.conftest import Server

MSG = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def keyed() -> Iterator[Server]:
    srv = Server(["--ctx-size", "512", "--api-key", "s3cret", "--max-body-mb", "1"])
    yield srv
    srv.stop()


def test_api_key_required_on_v1(keyed: Server) -> None:
    r = httpx.post(f"{keyed.url}/v1/chat/completions", json=MSG)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{keyed.url}/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{keyed.url}/health").status_code == 200  # health stays open
    ok = OpenAI(base_url=f"{keyed.url}/v1", api_key="s3cret", max_retries=0)
    assert ok.chat.completions.create(model=ok.models.list().data[0].id, **MSG).choices
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=f"{keyed.url}/v1", api_key="nope", max_retries=0).models.list()


def test_body_cap(keyed: Server) -> None:
    big = {"messages": [{"role": "user", "content": "x" * (2 * 1024 * 1024)}]}
    r = httpx.post(f"{keyed.url}/v1/chat/completions", json=big, headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}]}'

    r = httpx.post(f"{keyed.url}/v1/chat/completions", content=chunks(), headers={"Authorization": "Bearer s3cret", "Content-Type": "application/json"})
    assert r.status_code == 413
    assert httpx.get(f"{keyed.url}/health").status_code == 200


def test_foreign_host_is_refused(server: Server) -> None:
    r = httpx.get(f"{server.url}/v1/models", headers={"Host": "evil.example.com"})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "host_not_allowed"
    for host in ("localhost:1234", "127.0.0.1", "[::1]:80"):
        assert httpx.get(f"{server.url}/v1/models", headers={"Host": host}).status_code == 200


def test_cors_allows_localhost_pages_only(server: Server) -> None:
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    ok = httpx.options(f"{server.url}/v1/chat/completions", headers={"Origin": "http://localhost:3000", **pre})
    assert ok.headers.get("access-control-allow-origin") == "http://localhost:3000"
    bad = httpx.options(f"{server.url}/v1/chat/completions", headers={"Origin": "https://evil.example.com", **pre})
    assert "access-control-allow-origin" not in bad.headers


def test_request_id_header(server: Server) -> None:
    a = httpx.get(f"{server.url}/health").headers["x-request-id"]
    b = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": []}).headers["x-request-id"]
    assert a.startswith("req_") and b.startswith("req_") and a != b


def test_the_new_routes_need_the_key_and_answer_in_their_shape(keyed: Server) -> None:
    """Ollama's routes, /infill and /v1/rerank are guarded like /v1: the key, Ollama's error shape on /api/*."""
    r = httpx.post(f"{keyed.url}/api/chat", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 401 and set(r.json()) == {"error"} and "API key" in r.json()["error"]
    for path in ("/api/tags", "/api/ps"):
        assert httpx.get(f"{keyed.url}{path}").status_code == 401
    for path in ("/infill", "/v1/rerank", "/rerank", "/api/embed", "/api/show"):
        assert httpx.post(f"{keyed.url}{path}", json={}).status_code == 401
    assert httpx.get(f"{keyed.url}/api/version").status_code == 200  # clients probe it to find the server
    import ollama

    client = ollama.Client(host=keyed.url, headers={"Authorization": "Bearer s3cret"})
    assert client.chat(model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2}).done
    assert [m.model for m in client.list().models] == ["SmolLM2-135M-Instruct.Q4_1:latest"]


def test_origins_on_ollamas_routes(server: Server) -> None:
    body = {"prompt": "", "keep_alive": "5m"}  # a load call: what a page elsewhere should not be able to send
    bad = httpx.post(f"{server.url}/api/generate", json=body, headers={"Origin": "https://evil.example.com"})
    assert bad.status_code == 403 and set(bad.json()) == {"error"} and "--cors-origins" in bad.json()["error"]
    for app in ("app://obsidian.md", "vscode-webview://abc123", "http://localhost:3000"):  # Ollama's defaults, and ours
        assert httpx.post(f"{server.url}/api/generate", json=body, headers={"Origin": app}).status_code == 200
    pre = {"Origin": "app://obsidian.md", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    assert httpx.options(f"{server.url}/api/chat", headers=pre).headers.get("access-control-allow-origin") == "app://obsidian.md"
