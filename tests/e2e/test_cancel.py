"""A client that goes away stops its generation: the engine frees up long before max_tokens."""

from __future__ import annotations

import json
import socket
import time

import httpx

LONG = {"messages": [{"role": "user", "content": "Write a very long story about the sea."}], "max_tokens": 1500,
        "temperature": 0, "logit_bias": {"2": -100, "0": -100}}


def wait_idle(http: httpx.Client) -> dict:
    # a guard against hanging, not a speed assertion: 1500 tokens would take far longer than this
    for _ in range(600):
        stats = http.get("/health").json()["toolserve"]
        if not stats["busy"]:
            return stats
        time.sleep(0.05)
    raise AssertionError("engine still busy")


def test_stream_closed_early_stops_generation(server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=60) as http:
        before = wait_idle(http)["generated_tokens"]
        with http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as resp:
            lines = resp.iter_lines()
            for _ in range(6):
                next(lines)
        after = wait_idle(http)["generated_tokens"]
        assert 0 < after - before < 400
        r = http.post("/v1/chat/completions", json={"messages": LONG["messages"], "max_tokens": 3})
        assert r.status_code == 200


def test_non_stream_client_gone_stops_generation(server) -> None:  # type: ignore[no-untyped-def]
    log_start = len(server.stderr_text())
    with httpx.Client(base_url=server.url, timeout=60) as http:
        before = wait_idle(http)["generated_tokens"]
        body = json.dumps(LONG).encode()
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            )
            for _ in range(1200):  # wait until generation has begun (a hang guard, not a speed check)
                if http.get("/health").json()["toolserve"]["generated_tokens"] > before:
                    break
                time.sleep(0.05)
        # the client is gone: the engine stops long before 1500 tokens
        after = wait_idle(http)["generated_tokens"]
        assert 0 < after - before < 400
        # a client leaving is not a server error: no traceback in the log
        tail = server.stderr_text()[log_start:]
        assert "Traceback" not in tail and "Exception in ASGI application" not in tail, tail
