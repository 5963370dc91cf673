"""The Guard's pure rules and the error messages of internal failures (issue 31)."""

from __future__ import annotations

import logging

import pytest

from toolserve.api.errors import REQUEST_ID, error_body, error_of, shaped, status_for, unexpected_error
from toolserve.api.guard import GuardSettings, needs_key
from toolserve.api.openai.schemas import NONFINITE_ERROR, SURROGATE_ERROR, first_invalid
from toolserve.errors import EngineFailure, InvalidRequest, described, log_failure


@pytest.mark.parametrize(
    ("origin", "host", "origins", "allowed"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", (), True),  # the server's own page
        ("http://192.168.1.5:8000", "192.168.1.5:8000", (), True),  # its own page, reached over the network
        ("http://localhost:3000", "127.0.0.1:8000", (), True),  # a local page: the default
        ("http://[::1]:5173", "127.0.0.1:8000", (), True),
        ("https://evil.example.com", "127.0.0.1:8000", (), False),
        ("null", "127.0.0.1:8000", (), False),  # a sandboxed frame or a file page
        ("app://obsidian.md", "127.0.0.1:8000", (), True),  # local apps and extensions, as Ollama allows them
        ("vscode-webview://1a2b3c", "127.0.0.1:8000", (), True),
        ("chrome-extension://jfgfiigpkhlkbnfnbobbkinehhfdhndo", "127.0.0.1:8000", (), True),
        ("app://obsidian.md.evil.com/x", "127.0.0.1:8000", (), False),
        ("http://localhost.evil.com", "127.0.0.1:8000", (), False),
        ("http://127.0.0.1:8000.evil.com", "127.0.0.1:8000", (), False),
        ("https://app.example.org", "127.0.0.1:8000", ("https://app.example.org",), True),
        ("http://localhost:3000", "127.0.0.1:8000", ("https://app.example.org",), False),  # the list replaces the default
        ("https://anything.example", "127.0.0.1:8000", ("*",), True),
    ],
)
def test_origin_allowed(origin: str, host: str, origins: tuple[str, ...], allowed: bool) -> None:
    assert GuardSettings(origins=origins).origin_allowed(origin, host) is allowed


@pytest.mark.parametrize(
    ("path", "needed"),
    [("/v1/chat/completions", True), ("/tokenize", True), ("/detokenize", True), ("/debug/engine-fault", True),
     ("/api/chat", True), ("/api/tags", True), ("/infill", True), ("/v1/rerank", True), ("/rerank", True), ("/api/version", False),
     ("/health", False), ("/metrics", False), ("/", False), ("/web/app.js", False), ("/openapi.json", False)],
)
def test_which_paths_need_the_key(path: str, needed: bool) -> None:
    assert needs_key(path) is needed


@pytest.mark.parametrize(
    ("body", "found"),
    [
        ({"a": [1, 2.5, "x"]}, None),
        ({"a": float("nan")}, (NONFINITE_ERROR, "a")),
        ({"a": [0, {"b": float("-inf")}]}, (NONFINITE_ERROR, "a[1].b")),
        ({"a": "ok", "b": ["\ud800"]}, (SURROGATE_ERROR, "b[0]")),
        ({"k\udc00": 1}, (SURROGATE_ERROR, "k\\udc00")),  # the place spelled so that it can be sent back
        ({"a": float("inf"), "b": "\ud800"}, (NONFINITE_ERROR, "a")),  # the first in document order
    ],
)
def test_first_invalid(body: object, found: tuple[str, str] | None) -> None:
    assert first_invalid(body) == found


@pytest.mark.parametrize(("path", "status", "shaped"), [
    ("/api/chat", 429, 503), ("/api/chat", 400, 400), ("/v1/chat/completions", 429, 429), ("/v1/messages", 429, 429)])
def test_ollama_answers_a_full_queue_with_503(path: str, status: int, shaped: int) -> None:
    assert status_for(path, status) == shaped


def test_error_shapes_by_route() -> None:
    body = error_body("bad", "invalid_request_error", "x", "c")
    assert shaped("/api/generate", 400, body) == {"error": "bad"}
    assert shaped("/v1/messages", 400, body) == {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    assert shaped("/infill", 400, body) == shaped("/v1/rerank", 400, body) == body


def test_first_invalid_reads_any_depth_without_recursion() -> None:
    deep: object = float("nan")
    for _ in range(100_000):
        deep = [deep]
    kind, where = first_invalid({"x": deep}) or ("", "")
    assert kind == NONFINITE_ERROR and where == "x" + "[0]" * 100_000


def token_ids_error() -> KeyError:
    key = (0, (1, 9690, 198, 4471))  # what the prompt cache raised: a key made of a prompt's tokens
    try:
        {}[key]
    except KeyError as exc:
        return exc
    raise AssertionError


def test_an_unexpected_exception_is_described_without_its_message(caplog: pytest.LogCaptureFixture) -> None:
    exc = token_ids_error()
    assert described(exc).startswith("KeyError in token_ids_error (test_guard_rules.py:")
    with caplog.at_level(logging.ERROR):
        log_failure(logging.getLogger("t"), "generation failed", exc)
    assert "9690" not in caplog.text and "KeyError" in caplog.text and "token_ids_error" in caplog.text


def test_server_errors_carry_the_request_id_and_client_errors_do_not(caplog: pytest.LogCaptureFixture) -> None:
    token = REQUEST_ID.set("req_abc")
    try:
        with caplog.at_level(logging.ERROR):
            body = error_of(EngineFailure("generation failed: KeyError"))
            client = error_of(InvalidRequest("bad", param="x"))
            unexpected = error_of(unexpected_error(token_ids_error()))
    finally:
        REQUEST_ID.reset(token)
    assert body["error"]["message"] == "generation failed: KeyError (request req_abc)"
    assert client["error"]["message"] == "bad"
    assert unexpected["error"]["message"] == "internal error: KeyError (request req_abc)"
    assert "req_abc EngineFailure: generation failed: KeyError" in caplog.text
    assert "9690" not in caplog.text and "9690" not in unexpected["error"]["message"]
