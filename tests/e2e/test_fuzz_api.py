"""Fuzzing the HTTP API from its own OpenAPI schema (schemathesis): never a 5xx, never a hang,
every error in OpenAI's shape. Bounded: a small context keeps every generation short."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

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
        if response.status_code >= 400:
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}

    check()


def test_context_is_the_size_asked_for(small: Server) -> None:
    """llama.cpp rounds a 128-token context up to 256; a prompt between the two is still too long."""
    assert httpx.get(f"{small.url}/v1/models").json()["data"][0]["max_model_len"] == 128
    prompt = list(range(200, 200 + 150))  # 150 token ids
    r = httpx.post(f"{small.url}/v1/completions", json={"prompt": prompt, "max_tokens": 4}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(f"{small.url}/v1/completions", json={"prompt": prompt[:120], "max_tokens": 50}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 8  # clamped to the room left
