"""Several servers of one model behind one toolserve model (`--upstream URL,URL`, or a list
as a models.yaml entry's `url`): which of them a request goes to.

- Prefix affinity: a request's prompt (raw mode's rendered text, a chat body's tools and
  messages, a completion's prompt) is cut into blocks of BLOCK characters, each block's hash
  chained on the blocks before it, and the pool remembers which upstreams were sent each chain
  (the last MEMORY blocks). A request goes to the upstream that was sent the longest prefix of
  it: a conversation's next turn goes where its earlier turns are in the prefix cache.
- Load: the upstream with the longest prefix is passed over when it has more requests open than
  the least busy one plus max(SLACK, that one's count); then, and for a prompt no upstream was
  sent, the least busy one is chosen (ties in turn), so independent requests spread evenly.
- Failover: only upstreams not known to be down are chosen. One that cannot be connected to
  (nothing was sent) is marked down and the request goes to the next; the last one left is
  tried as a single upstream is (client.py: three attempts). An answer that failed or broke off
  after it was sent is not sent again. An upstream that goes down forgets its prefixes (a
  restarted server's cache is empty); each is checked on its own and serves again when it
  answers.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import httpx

from toolserve.config import UpstreamConfig
from toolserve.errors import UpstreamUnavailable
from toolserve.upstream.client import DOWN_INTERVAL, UpstreamClient, safe_url

BLOCK = 256  # characters of prompt per remembered block (about 64 tokens)
MEMORY = 65536  # blocks remembered (about 16 M characters of prompts), least recently sent forgotten
SLACK = 4  # open requests the upstream holding a prefix may have beyond the least busy one


def prompt_key(body: dict[str, Any]) -> str:
    """The text whose prefix an upstream caches: a completion's prompt, or a chat body's tools
    and messages, each message its own line (a conversation's next turn extends it)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    parts = [json.dumps(body.get("tools"), sort_keys=True, ensure_ascii=False)] if body.get("tools") else []
    messages = body.get("messages")
    if isinstance(messages, list):
        parts += [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in messages]
    return "\n".join(parts)


def block_hashes(text: str) -> list[bytes]:
    """One hash per whole block of `text`, each chained on those before it."""
    out, prev = [], b""
    for start in range(0, len(text) - BLOCK + 1, BLOCK):
        prev = hashlib.blake2b(prev + text[start : start + BLOCK].encode("utf-8", "surrogatepass"), digest_size=12).digest()
        out.append(prev)
    return out


class PrefixMemory:
    """Which upstreams (a bit each) were sent each block chain, least recently sent forgotten."""

    def __init__(self, size: int = MEMORY):
        self.size = size
        self._held: OrderedDict[bytes, int] = OrderedDict()

    def depth(self, hashes: list[bytes], n: int) -> list[int]:
        """For each of n upstreams, how many leading blocks of the prompt it was sent."""
        depth = [0] * n
        for k, h in enumerate(hashes):
            mask = self._held.get(h, 0)
            if not mask:
                break  # a chain not sent to anyone: no longer prefix either
            for i in range(n):
                if mask >> i & 1 and depth[i] == k:
                    depth[i] = k + 1
        return depth

    def record(self, hashes: list[bytes], i: int) -> None:
        for h in hashes:
            self._held[h] = self._held.get(h, 0) | 1 << i
            self._held.move_to_end(h)
        while len(self._held) > self.size:
            self._held.popitem(last=False)

    def forget(self, i: int) -> None:
        bit = 1 << i
        for h in [h for h, mask in self._held.items() if mask & bit]:
            if self._held[h] == bit:
                del self._held[h]
            else:
                self._held[h] &= ~bit

    def __len__(self) -> int:
        return len(self._held)


class UpstreamPool:
    """The upstreams of one model; what the backends ask of an upstream, with the choice made
    here. One URL is a pool of one, which behaves as that upstream."""

    def __init__(self, cfg: UpstreamConfig, name: Callable[[], str]):
        self._name = name
        self.memory = PrefixMemory()
        self.clients = [UpstreamClient(replace(cfg, url=url), name) for url in cfg.urls]
        for i, c in enumerate(self.clients):
            c.on_down = functools.partial(self.memory.forget, i)
        self._owner: dict[httpx.Response, UpstreamClient] = {}  # answers being read, by upstream
        self._turn = itertools.count()

    # -- health, as one upstream -----------------------------------------------------------------
    @property
    def healthy(self) -> bool | None:
        """True while one is up, False when all are down, None before any answered."""
        states = [c.healthy for c in self.clients]
        return True if True in states else False if all(s is False for s in states) else None

    @property
    def error(self) -> str | None:
        errors = [(c, c.error) for c in self.clients if c.error]
        if len(self.clients) == 1 or not errors:
            return errors[0][1] if errors else None
        return "; ".join(f"{safe_url(c.url)}: {e}" for c, e in errors)

    @property
    def models(self) -> list[dict[str, Any]]:
        """The model list of an upstream that is up (else of any that gave one)."""
        for c in sorted(self.clients, key=lambda c: c.healthy is not True):
            if c.models:
                return c.models
        return []

    def any(self) -> UpstreamClient:
        """One upstream that is up (the first, when none is), for questions any of them answers."""
        return next((c for c in self.clients if c.healthy), self.clients[0])

    async def start(self) -> None:
        for c in self.clients:
            await c.start()

    async def close(self) -> None:
        for c in self.clients:
            await c.close()

    def abort_all(self) -> None:
        for c in self.clients:
            c.abort_all()

    def unavailable(self) -> UpstreamUnavailable:
        if len(self.clients) == 1:
            return self.clients[0].unavailable()
        return UpstreamUnavailable(
            f"The model '{self._name()}' is unavailable: none of its {len(self.clients)} upstream servers can be reached "
            f"({self.error or 'none has answered yet'}). toolserve checks them every {DOWN_INTERVAL:g} s and serves the "
            "model again as soon as one answers.",
        )

    def require(self) -> None:
        if self.healthy is False:
            raise self.unavailable()

    def _prune(self) -> None:
        for resp in [r for r in self._owner if r.is_closed]:
            del self._owner[resp]

    def open_counts(self) -> list[int]:
        """Answers being read from each upstream (as of the last prune)."""
        counts = [0] * len(self.clients)
        for c in self._owner.values():
            counts[self.clients.index(c)] += 1
        return counts

    def status(self) -> list[dict[str, Any]]:
        self._prune()
        counts = self.open_counts()
        return [
            {"url": safe_url(c.url), "available": c.healthy is not False, "in_flight": counts[i], **({"error": c.error} if c.error else {})}
            for i, c in enumerate(self.clients)
        ]

    # -- requests ----------------------------------------------------------------------------------
    def order(self, hashes: list[bytes]) -> list[int]:
        """The upstreams not known down, the one this prompt should go to first."""
        alive = [i for i, c in enumerate(self.clients) if c.healthy is not False]
        if len(alive) <= 1:
            return alive
        counts, depth = self.open_counts(), self.memory.depth(hashes, len(self.clients))
        turn = next(self._turn)
        # least busy first, ties in turn
        by_load = sorted(alive, key=lambda i: (counts[i], (i - turn) % len(self.clients)))
        least = counts[by_load[0]]
        deepest = max(alive, key=lambda i: (depth[i], -counts[i]))
        if depth[deepest] and counts[deepest] <= least + max(SLACK, least):
            by_load.remove(deepest)
            by_load.insert(0, deepest)
        return by_load

    async def open(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST to the upstream chosen for this body (another if it cannot be connected to)."""
        self.require()
        self._prune()  # answers read or closed since: the counts, and a pool of one keeps none
        if len(self.clients) == 1:
            only = await self.clients[0].open(path, body)
            self._owner[only] = self.clients[0]
            return only
        hashes = block_hashes(prompt_key(body))
        order = self.order(hashes)
        for k, i in enumerate(order):
            client, last = self.clients[i], k == len(order) - 1
            resp = await client.open(path, body, failover=not last)
            if resp is None:
                continue  # marked down: the next one
            self._owner[resp] = client
            self.memory.record(hashes, i)
            return resp
        raise self.unavailable()

    def _of(self, resp: httpx.Response) -> UpstreamClient:
        return self._owner.get(resp) or self.clients[0]

    async def read_json(self, resp: httpx.Response) -> dict[str, Any]:
        return await self._of(resp).read_json(resp)

    def sse(self, resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        return self._of(resp).sse(resp)
