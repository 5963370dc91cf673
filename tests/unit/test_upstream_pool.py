"""Which of a model's upstreams a request goes to (upstream/pool.py): prefix affinity, load,
upstreams that are down. The requests themselves are in tests/e2e/test_upstream_pool.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve.config import UpstreamConfig
from toolserve.upstream.pool import BLOCK, SLACK, PrefixMemory, UpstreamPool, block_hashes, prompt_key

URLS = ("http://a:8000", "http://b:8000", "http://c:8000")
CHAT = {"model": "m", "messages": [{"role": "system", "content": "s" * 300}, {"role": "user", "content": "hi"}]}


def pool(n: int = 2) -> UpstreamPool:
    p = UpstreamPool(UpstreamConfig(url=URLS[0], replicas=URLS[1:n]), name=lambda: "m")
    for c in p.clients:
        c.healthy = True
    return p


def loaded(p: UpstreamPool, counts: list[int]) -> UpstreamPool:
    p.open_counts = lambda: list(counts)  # type: ignore[method-assign]
    return p


@given(st.text(max_size=3 * BLOCK + 50), st.text(max_size=2 * BLOCK))
def test_a_prompt_extended_keeps_its_block_hashes(prefix: str, more: str) -> None:
    short, long = block_hashes(prefix), block_hashes(prefix + more)
    assert len(short) == len(prefix) // BLOCK
    assert long[: len(short)] == short


def test_one_different_character_changes_every_later_block() -> None:
    text = "x" * (3 * BLOCK)
    other = text[:BLOCK] + "y" + text[BLOCK + 1 :]
    a, b = block_hashes(text), block_hashes(other)
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]


def test_a_chat_turn_extends_the_key_of_the_turn_before() -> None:
    turn2 = {**CHAT, "messages": [*CHAT["messages"], {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]}
    assert prompt_key(turn2).startswith(prompt_key(CHAT))
    assert prompt_key({"prompt": "abc"}) == "abc" and prompt_key({"prompt": ["a", "b"]}) == "a\nb"
    tools = {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert prompt_key(tools) != prompt_key(CHAT) and prompt_key(tools).endswith(prompt_key(CHAT))


def test_memory_depth_is_the_longest_prefix_each_upstream_was_sent() -> None:
    m = PrefixMemory()
    text = "".join(chr(65 + k) * BLOCK for k in range(4))
    h = block_hashes(text)
    m.record(h[:2], 0)
    m.record(h, 1)
    assert m.depth(h, 3) == [2, 4, 0]
    m.forget(1)
    assert m.depth(h, 3) == [2, 0, 0] and len(m) == 2
    assert m.depth(block_hashes("z" + text), 3) == [0, 0, 0]


def test_memory_forgets_the_least_recently_sent() -> None:
    m = PrefixMemory(size=3)
    a, b = block_hashes("a" * 2 * BLOCK), block_hashes("b" * 2 * BLOCK)
    m.record(a, 0)
    m.record(b, 1)  # a's first block is the oldest: gone, and with it a's whole chain as a prefix
    assert m.depth(a, 2) == [0, 0] and m.depth(b, 2) == [0, 2]


def test_independent_prompts_take_turns() -> None:
    p = loaded(pool(3), [0, 0, 0])
    firsts = [p.order(block_hashes("q"))[0] for _ in range(6)]
    assert sorted(firsts) == [0, 0, 1, 1, 2, 2]
    assert loaded(pool(3), [2, 0, 1]).order([]) == [1, 2, 0]  # least busy first


def test_the_upstream_holding_the_prefix_comes_first_within_the_slack() -> None:
    h = block_hashes(prompt_key(CHAT))
    p = pool(2)
    p.memory.record(h, 1)
    assert loaded(p, [0, SLACK]).order(h)[0] == 1
    assert loaded(p, [0, SLACK + 1]).order(h) == [0, 1]  # too busy: the least busy one
    assert loaded(p, [10, 20]).order(h)[0] == 1  # the slack grows with the load: max(SLACK, least)
    assert loaded(p, [10, 21]).order(h)[0] == 0
    p.memory.record(h, 0)  # both hold it: the less busy one
    assert loaded(p, [3, 1]).order(h)[0] == 1 and loaded(p, [1, 3]).order(h)[0] == 0


def test_upstreams_down_are_not_chosen_and_going_down_forgets_the_prefixes() -> None:
    h = block_hashes(prompt_key(CHAT))
    p = loaded(pool(3), [0, 0, 0])
    p.memory.record(h, 1)
    p.clients[1].mark_down("cannot connect")
    assert 1 not in p.order(h) and p.memory.depth(h, 3) == [0, 0, 0]
    assert p.healthy is True and "http://b:8000: cannot connect" in (p.error or "")
    for c in p.clients:
        c.healthy = False
    assert p.healthy is False and p.order(h) == []
    with pytest.raises(Exception, match="none of its 3 upstream servers can be reached"):
        p.require()


def test_a_pool_of_one_is_that_upstream() -> None:
    p = pool(1)
    p.clients[0].mark_down("cannot connect (refused)")
    assert p.error == "cannot connect (refused)"
    assert "its upstream server cannot be reached (cannot connect (refused))" in p.unavailable().message


def test_answers_read_are_forgotten() -> None:
    """The pool keeps the answers being read (their upstream, the counts): a closed one goes at
    the next request, in a pool of one too."""
    import asyncio

    import httpx

    async def run() -> int:
        p = pool(1)

        class Answers:  # the transport a client's requests go to
            async def send(self, *request: Any) -> httpx.Response:
                return httpx.Response(200, json={"ok": True})

        p.clients[0].transport = Answers()  # type: ignore[assignment]
        for _ in range(5):
            resp = await p.open("/v1/completions", {"prompt": "x"})
            assert await p.read_json(resp) == {"ok": True}
        await p.open("/v1/completions", {"prompt": "x"})
        return len(p._owner)

    assert asyncio.run(run()) == 1
