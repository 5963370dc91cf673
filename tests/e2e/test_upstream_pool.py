"""One model on several upstream servers behind one toolserve (`--upstream URL,URL`): requests
spread over them, a conversation's next turn goes where its prefix is cached, an upstream that
goes down (idle or mid-stream) gives its traffic to the others and takes it back when it returns.
The upstreams are real toolserve servers on the bundled model."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import CTX_SIZE, Server, free_port
from tests.e2e.test_load import NO_EOS
from tests.e2e.test_upstream import error_of, front

CHAT = "/v1/chat/completions"


def served(url: str) -> int:
    """Chat completions an upstream has answered with a 200 (its /metrics)."""
    text = httpx.get(f"{url}/metrics").text
    m = re.search(r'toolserve_requests_total\{route="/v1/chat/completions",status="200"\} ([0-9.]+)', text)
    return int(float(m.group(1))) if m else 0


def ask(url: str, messages: list[dict[str, Any]], max_tokens: int = 2, **extra: Any) -> dict[str, Any]:
    r = httpx.post(f"{url}{CHAT}", json={"messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def second() -> Iterator[Server]:
    srv = Server(["--ctx-size", str(CTX_SIZE)])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def pair(server: Server, second: Server) -> Iterator[Server]:
    with front(["--upstream", f"{server.url},{second.url}/v1", "--model-alias", "pair"]) as srv:
        yield srv


def test_the_card_lists_each_upstream(pair: Server, server: Server, second: Server) -> None:
    (card,) = httpx.get(f"{pair.url}/v1/models").json()["data"]
    ups = card["toolserve"]["upstreams"]
    assert [u["url"] for u in ups] == [server.url, second.url]  # the roots
    assert all(u["available"] and u["in_flight"] == 0 for u in ups)
    assert card["id"] == "pair" and card["toolserve"]["available"]


def test_independent_requests_spread_over_both(pair: Server, server: Server, second: Server) -> None:
    before = served(server.url), served(second.url)
    for k in range(6):
        ask(pair.url, [{"role": "user", "content": f"Say a colour ({k})."}])
    after = served(server.url), served(second.url)
    assert (after[0] - before[0], after[1] - before[1]) == (3, 3)


def test_a_conversation_next_turn_goes_where_its_prefix_is_cached(pair: Server, server: Server, second: Server) -> None:
    """Three conversations, their first turns in turn over two upstreams, then their second
    turns: taking turns alone would send one of them to the other upstream (0 cached tokens)."""
    convs = []
    for k in range(3):
        system = f"Conversation {uuid.uuid4().hex}. " + "You answer in one short sentence about colours. " * 8
        convs.append([{"role": "system", "content": system}, {"role": "user", "content": f"Name colour number {k}."}])
    homes = []
    for messages in convs:
        before = served(server.url)
        reply = ask(pair.url, messages, max_tokens=8)
        homes.append(served(server.url) - before)  # 1: it went to `server`, 0: to `second`
        messages += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "And another one?"}]
    assert sorted(homes) in ([0, 0, 1], [0, 1, 1])  # first turns spread
    for messages, home in zip(convs, homes, strict=True):
        before = served(server.url)
        usage = ask(pair.url, messages)["usage"]
        assert served(server.url) - before == home  # the same upstream as its first turn
        assert usage["prompt_tokens_details"]["cached_tokens"] > 100, usage  # its prefix was there


def test_an_upstream_down_gives_its_traffic_to_the_other_and_takes_it_back(server: Server) -> None:
    port = free_port()
    spare = Server(["--ctx-size", "1024"], port=port)
    with front(["--upstream", f"{server.url},{spare.url}", "--model-alias", "failover"]) as srv:
        spare.stop()
        before = served(server.url)
        for k in range(4):  # the first finds it gone (nothing sent yet): it goes to the other at once
            ask(srv.url, [{"role": "user", "content": f"Colour {k}?"}])
        assert served(server.url) - before == 4
        ups = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["toolserve"]["upstreams"]
        assert [u["available"] for u in ups] == [True, False] and "cannot connect" in ups[1]["error"]
        health = httpx.get(f"{srv.url}/health")
        assert health.status_code == 200 and health.json()["models"]["failover"]["available"] is True
        spare = Server(["--ctx-size", "1024"], port=port)
        try:
            deadline = time.monotonic() + 30  # checked every second while down
            while not httpx.get(f"{srv.url}/v1/models").json()["data"][0]["toolserve"]["upstreams"][1]["available"]:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            back = served(spare.url)
            for k in range(4):
                ask(srv.url, [{"role": "user", "content": f"Shade {k}?"}])
            assert served(spare.url) - back == 2
        finally:
            spare.stop()


# ---- an upstream killed while it streams, in each protocol ---------------------------------------

LONG_ASK = "Tell me a long story."
STREAMS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (CHAT, {"messages": [{"role": "user", "content": LONG_ASK}], "stream": True}),
    "responses": ("/v1/responses", {"input": LONG_ASK, "stream": True}),
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": LONG_ASK}], "stream": True}),
    "ollama": ("/api/chat", {"messages": [{"role": "user", "content": LONG_ASK}], "stream": True}),
}


def _stream(url: str, model: str, kind: str, started: threading.Event, out: dict[str, list[str]]) -> None:
    path, body = STREAMS[kind]
    body = {**body, "model": model, "max_tokens": 1500, "logit_bias": NO_EOS}
    if kind == "ollama":
        body = {**body, "options": {"num_predict": 1500}}
    lines: list[str] = []
    out[kind] = lines
    with httpx.stream("POST", f"{url}{path}", json=body, timeout=120) as r:
        lines.append(str(r.status_code))
        for line in r.iter_lines():
            if line:
                lines.append(line)
            if len(lines) == 4:
                started.set()


def test_an_upstream_killed_mid_stream_ends_each_protocol_with_its_error_then_503_until_back() -> None:
    port = free_port()
    upstream = Server(["--ctx-size", "2048", "--parallel", "4"], port=port)
    with front(["--upstream", upstream.url, "--model-alias", "fragile"]) as srv:
        out: dict[str, list[str]] = {}
        events = {kind: threading.Event() for kind in STREAMS}
        threads = [threading.Thread(target=_stream, args=(srv.url, "fragile", kind, events[kind], out)) for kind in STREAMS]
        for t in threads:
            t.start()
        for kind, e in events.items():
            assert e.wait(120), (kind, out.get(kind))
        upstream.proc.kill()
        for t in threads:
            t.join(120)
        upstream.stop()
        broke = "The upstream server broke off the answer"
        for kind, lines in out.items():
            assert lines[0] == "200", (kind, lines[:3])
        chat, responses, messages, ollama = (out[k] for k in STREAMS)
        assert chat[-1] == "data: [DONE]"
        err = json.loads(chat[-2][6:])["error"]
        assert err["code"] == "upstream_error" and err["message"].startswith(broke), chat[-2:]
        assert responses[-2] == "event: response.failed"
        failed = json.loads(responses[-1][6:])["response"]
        assert failed["status"] == "failed" and failed["error"]["code"] == "upstream_error"
        assert failed["error"]["message"].startswith(broke)
        assert [o["status"] for o in failed["output"]] == ["incomplete"]  # the message it was writing
        assert messages[-2] == "event: error"
        assert json.loads(messages[-1][6:])["error"]["message"].startswith(broke)
        assert set(json.loads(ollama[-1])) == {"error"} and json.loads(ollama[-1])["error"].startswith(broke)
        r = httpx.post(f"{srv.url}{CHAT}", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=60)
        assert r.status_code == 503 and error_of(r)["code"] == "upstream_unavailable"
        upstream = Server(["--ctx-size", "2048"], port=port)
        try:
            deadline = time.monotonic() + 30
            while (r := httpx.post(f"{srv.url}{CHAT}", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                                   timeout=60)).status_code != 200:
                assert r.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.3)
        finally:
            upstream.stop()
