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
