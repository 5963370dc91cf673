"""Under load and faults: concurrent clients, a full queue, timeouts, shutdown, metrics."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server

NO_EOS = {"0": -100, "2": -100}  # SmolLM2's end-of-text tokens: generation runs to max_tokens
ASK = [{"role": "user", "content": "Tell me a story."}]


def wait_idle(url: str) -> dict[str, Any]:
    for _ in range(600):  # a guard against hanging, not a speed assertion
        stats = httpx.get(f"{url}/health").json()["toolserve"]
        if not stats["busy"]:
            return stats
        time.sleep(0.05)
    raise AssertionError("engine still busy")


async def one_client(url: str, i: int) -> str:
    kind = ("stream", "whole", "cancel")[i % 3]
    body = {"messages": [{"role": "user", "content": f"Story number {i}."}], "max_tokens": 24, "temperature": 0.8, "seed": i}
    async with httpx.AsyncClient(base_url=url, timeout=300) as c:
        if kind == "whole":
            r = await c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
            return kind
        cancel_body = {**body, "max_tokens": 2000, "logit_bias": NO_EOS} if kind == "cancel" else body
        async with c.stream("POST", "/v1/chat/completions", json={**cancel_body, "stream": True}) as r:
            assert r.status_code == 200
            seen = 0
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    break
                if line.startswith("data: "):
                    seen += 1
                    assert "error" not in json.loads(line[6:])
                    if kind == "cancel" and seen == 3:
                        return kind  # leaving the block closes the connection halfway
            assert kind == "stream"
    return kind


def test_sixteen_concurrent_clients(server: Server) -> None:
    async def run() -> list[str]:
        return await asyncio.gather(*(one_client(server.url, i) for i in range(16)))

    kinds = asyncio.run(run())
    assert sorted(kinds) == sorted(("stream", "whole", "cancel")[i % 3] for i in range(16))
    wait_idle(server.url)  # cancelled ones freed the engine
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 4}, timeout=60)
    assert r.status_code == 200


@pytest.fixture(scope="module")
def tight() -> Iterator[Server]:
    srv = Server(["--ctx-size", "2048", "--max-queue", "1", "--parallel", "1"])
    yield srv
    srv.stop()


def test_full_queue_gets_429_with_retry_after(tight: Server) -> None:
    body = {"messages": ASK, "max_tokens": 60, "logit_bias": NO_EOS}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=tight.url, timeout=120) as c:
            return await asyncio.gather(*(c.post("/v1/chat/completions", json=body) for _ in range(5)))

    codes = [r.status_code for r in asyncio.run(run())]
    assert 429 in codes and 200 in codes
    refused = next(r for r in asyncio.run(run()) if r.status_code == 429)
    assert all(r.status_code in (200, 429) for r in asyncio.run(run()))
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error"
    wait_idle(tight.url)
    assert httpx.post(f"{tight.url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 2}, timeout=60).status_code == 200


@pytest.fixture(scope="module")
def hasty() -> Iterator[Server]:
    srv = Server(["--ctx-size", "2048", "--request-timeout", "2"])
    yield srv
    srv.stop()


def test_request_timeout(hasty: Server) -> None:
    long = {"messages": ASK, "max_tokens": 1800, "logit_bias": NO_EOS}  # far more than 2 s of work
    r = httpx.post(f"{hasty.url}/v1/chat/completions", json=long, timeout=120)
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "request_timeout"
    with httpx.stream("POST", f"{hasty.url}/v1/chat/completions", json={**long, "stream": True}, timeout=120) as s:
        lines = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["error"]["code"] == "request_timeout"
    wait_idle(hasty.url)


def test_shutdown_ends_streams_properly_and_exits_zero() -> None:
    srv = Server(["--ctx-size", "2048", "--shutdown-grace", "1"])
    long = {"messages": ASK, "max_tokens": 1800, "logit_bias": NO_EOS, "stream": True}
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=long, timeout=120) as s:
        lines = s.iter_lines()
        next(lines)
        srv.proc.send_signal(signal.SIGTERM)
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["error"]["code"] == "shutting_down"
    assert srv.proc.wait(timeout=60) == 0
    srv.log.close()


def test_metrics(server: Server) -> None:
    httpx.post(f"{server.url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 3}, timeout=60)
    text = httpx.get(f"{server.url}/metrics").text
    assert 'toolserve_requests_total{route="/v1/chat/completions",status="200"}' in text
    for name in ("toolserve_completion_tokens_total", "toolserve_time_to_first_token_seconds_bucket",
                 "toolserve_time_per_output_token_seconds_count", "toolserve_queue_depth", "toolserve_active_requests",
                 "toolserve_prompt_cache_hits_total"):
        assert name in text


@pytest.fixture(scope="module")
def twin() -> Iterator[Server]:
    """Two model instances, no waiting room, and tighter caps than the defaults."""
    srv = Server(["--ctx-size", "1024", "--parallel", "2", "--max-queue", "0", "--max-n", "2", "--max-stops", "1"])
    yield srv
    srv.stop()


def test_parallel_instances_run_two_at_once(twin: Server) -> None:
    body = {"messages": ASK, "max_tokens": 200, "logit_bias": NO_EOS}
    seen_active: list[int] = []

    async def watch(c: httpx.AsyncClient, done: asyncio.Event) -> None:
        while not done.is_set():
            seen_active.append((await c.get("/health")).json()["toolserve"]["active"])
            await asyncio.sleep(0.02)

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=twin.url, timeout=300) as c:
            done = asyncio.Event()
            watcher = asyncio.create_task(watch(c, done))
            first = [asyncio.create_task(c.post("/v1/chat/completions", json=body)) for _ in range(2)]
            while max(seen_active, default=0) < 2 and not all(t.done() for t in first):
                await asyncio.sleep(0.02)
            third = await c.post("/v1/chat/completions", json={**body, "max_tokens": 2})
            results = [*(await asyncio.gather(*first)), third]
            done.set()
            await watcher
            return results

    a, b, third = asyncio.run(run())
    assert max(seen_active) == 2  # both instances generated at the same time
    for r in (a, b):
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 200
    assert third.status_code == 429 and third.json()["error"]["type"] == "rate_limit_error"
    assert httpx.get(f"{twin.url}/health").json()["toolserve"]["slots"] == 2


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"n": 3}, "n"), ({"stop": ["a", "b"]}, "stop")],
)
def test_caps_are_settings(twin: Server, extra: dict[str, Any], param: str) -> None:
    r = httpx.post(f"{twin.url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 2, **extra}, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == param and "limit" in err["message"]
    ok = {k: v[:1] if isinstance(v, list) else 2 for k, v in extra.items()}  # at the cap: accepted
    assert httpx.post(f"{twin.url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 2, **ok}, timeout=60).status_code == 200


@pytest.mark.parametrize("flag", [True, False])
def test_prompts_are_logged_only_when_asked(flag: bool) -> None:
    secret = "my password is hunter2"
    srv = Server(["--ctx-size", "512", "--log-level", "info", *(["--log-prompts"] if flag else [])])
    try:
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": secret}], "max_tokens": 2}, timeout=60)
        assert r.status_code == 200
        request_id = r.headers["x-request-id"]
    finally:
        srv.stop()
    log = srv.stderr_text()
    assert request_id in log  # the access line is there either way
    assert (secret in log) is flag
