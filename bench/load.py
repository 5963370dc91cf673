"""A bounded soak on the bundled model: many clients, mixed kinds of request, some cancelled.

For each `--parallel` setting a fresh `toolserve serve` is started, then:
1. single stream: `--single` streamed requests one after another -> tokens/s (the baseline);
2. soak: `--requests` requests from `--clients` concurrent clients, mixed: streamed chat,
   whole chat, a named tool call, a JSON-schema answer, and streams cancelled after 5 chunks
   (end-of-text is banned in plain chat, so those run to max_tokens);
3. the server's RSS before the soak (after a warm-up) and after it, and the prompt-cache bytes.

Reported: errors (any non-200, error event or invalid tool call / JSON; target 0), TTFT p50/p99
over streamed requests, aggregate tokens/s over the soak against single-stream tokens/s (both
count completion tokens over wall time, prefill included), and RSS growth against the cache
budget.

    python bench/load.py [--requests 300] [--clients 8] [--parallel 1,2] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode import free_port, start

NO_EOS = {"0": -100, "2": -100}  # SmolLM2's end-of-text tokens: streams run to max_tokens
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    },
}
ANSWER = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {
            "type": "object",
            "properties": {"title": {"type": "string", "maxLength": 24}, "stars": {"type": "integer", "minimum": 1, "maximum": 5}},
            "required": ["title", "stars"],
        },
    },
}
KINDS = ["stream"] * 8 + ["whole"] * 5 + ["tool"] * 3 + ["json"] * 2 + ["cancel"] * 2  # shares of 20


@dataclass
class Outcome:
    kind: str
    ok: bool
    problem: str = ""
    ttft: float | None = None
    tokens: int = 0
    seconds: float = 0.0  # from sending to the last byte (or to leaving, for cancelled ones)


@dataclass
class Soak:
    outcomes: list[Outcome] = field(default_factory=list)
    wall: float = 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def body_for(kind: str, i: int, max_tokens: int) -> dict:
    # a few conversations that go on (prefix reuse) among many fresh ones
    turns = [{"role": "user", "content": f"Tell me about place number {i % 7}."}]
    if i % 3 == 0:
        turns += [{"role": "assistant", "content": "It is a quiet town by a river."}, {"role": "user", "content": f"And its history, part {i}?"}]
    body: dict = {"messages": turns, "max_tokens": max_tokens, "temperature": 0.7, "seed": i, "logit_bias": NO_EOS}
    if kind == "tool":
        body.update(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=64)
        del body["logit_bias"]  # the grammar ends these
    elif kind == "json":
        body.update(response_format=ANSWER, max_tokens=64)
        del body["logit_bias"]
    elif kind in ("stream", "cancel"):
        body.update(stream=True, stream_options={"include_usage": True})
        if kind == "cancel":
            body["max_tokens"] = 400
    return body


async def one(c: httpx.AsyncClient, kind: str, i: int, max_tokens: int) -> Outcome:
    body = body_for(kind, i, max_tokens)
    started = time.perf_counter()
    try:
        if not body.get("stream"):
            r = await c.post("/v1/chat/completions", json=body)
            if r.status_code != 200:
                return Outcome(kind, False, f"HTTP {r.status_code}: {r.text[:120]}")
            data = r.json()
            choice = data["choices"][0]
            if kind == "tool":
                calls = choice["message"].get("tool_calls") or []
                if choice["finish_reason"] != "tool_calls" or not calls:
                    return Outcome(kind, False, f"no tool call ({choice['finish_reason']})")
                args = json.loads(calls[0]["function"]["arguments"])
                if not isinstance(args.get("city"), str) or args.get("unit") not in ("C", "F"):
                    return Outcome(kind, False, f"arguments off the schema: {args}")
            if kind == "json":
                answer = json.loads(choice["message"]["content"])
                if not isinstance(answer.get("stars"), int):
                    return Outcome(kind, False, f"answer off the schema: {answer}")
            return Outcome(kind, True, tokens=data["usage"]["completion_tokens"])
        ttft, tokens, chunks = None, 0, 0
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                return Outcome(kind, False, f"HTTP {r.status_code}")
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return Outcome(kind, False, f"error event: {chunk['error'].get('message')}")
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - started
                    if kind == "cancel" and chunks == 5:
                        # leaving the block drops the connection; one content chunk is about one token
                        return Outcome(kind, True, ttft=ttft, tokens=chunks)
        if tokens != body["max_tokens"]:
            return Outcome(kind, False, f"stream ended after {tokens} of {body['max_tokens']} tokens")
        return Outcome(kind, True, ttft=ttft, tokens=tokens)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as exc:
        return Outcome(kind, False, f"{type(exc).__name__}: {exc}")


async def soak(url: str, n: int, clients: int, max_tokens: int, seed: int) -> Soak:
    rng = random.Random(seed)
    work: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for i in range(n):
        work.put_nowait((i, rng.choice(KINDS)))
    result = Soak()

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=600) as c:
            while not work.empty():
                i, kind = work.get_nowait()
                started = time.perf_counter()
                out = await one(c, kind, i, max_tokens)
                out.seconds = time.perf_counter() - started
                result.outcomes.append(out)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    result.wall = time.perf_counter() - started
    return result


def single_stream(url: str, runs: int, max_tokens: int) -> float:
    """Completion tokens per second of one client, requests one after another."""

    async def go() -> float:
        async with httpx.AsyncClient(base_url=url, timeout=600) as c:
            tokens, started = 0, time.perf_counter()
            for i in range(runs):
                out = await one(c, "stream", 1000 + i, max_tokens)
                assert out.ok, out.problem
                tokens += out.tokens
            return tokens / (time.perf_counter() - started)

    return asyncio.run(go())


async def warm_tool(url: str, max_tokens: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        out = await one(c, "tool", 0, max_tokens)
        assert out.ok, out.problem


def wait_idle(url: str) -> dict:
    for _ in range(1200):
        stats = httpx.get(f"{url}/health", timeout=10).json()["toolserve"]
        if not stats["busy"]:
            return stats
        time.sleep(0.05)
    raise RuntimeError("server still busy after the soak")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_once(parallel: int, args: argparse.Namespace, seed: int) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
           "--parallel", str(parallel), "--max-queue", str(args.clients)]
    proc = start(cmd, url)
    try:
        single_stream(url, 2, args.max_tokens)  # warm-up: first allocations, grammar tokenizer
        asyncio.run(warm_tool(url, args.max_tokens))
        rss_before = rss_mb(proc.pid)
        single = single_stream(url, args.single, args.max_tokens)
        s = asyncio.run(soak(url, args.requests, args.clients, args.max_tokens, seed))
        stats = wait_idle(url)
        rss_after = rss_mb(proc.pid)
        after = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}, timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    bad = [o for o in s.outcomes if not o.ok]
    ttfts = [o.ttft for o in s.outcomes if o.ttft is not None]
    tokens = sum(o.tokens for o in s.outcomes)
    cache = stats.get("prompt_cache") or {}
    return {
        "parallel": parallel,
        "requests": len(s.outcomes),
        "kinds": {k: sum(o.kind == k for o in s.outcomes) for k in sorted(set(KINDS))},
        "errors": len(bad),
        "problems": sorted({o.problem for o in bad})[:5],
        "slowest": [(o.kind, round(o.seconds, 1), None if o.ttft is None else round(o.ttft, 1)) for o in sorted(s.outcomes, key=lambda o: -o.seconds)[:3]],
        "ttft_p50": pct(ttfts, 0.5),
        "ttft_p99": pct(ttfts, 0.99),
        "aggregate_tps": tokens / s.wall,
        "single_tps": single,
        "ratio": tokens / s.wall / single,
        "wall_s": s.wall,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "cache_budget_mb": cache.get("budget_bytes", 0) / 2**20,
        "cache_held_mb": cache.get("bytes", 0) / 2**20,
        "healthy_after": after.status_code == 200,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", default="1,2", help="comma-separated --parallel settings to compare")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--single", type=int, default=8, help="requests in the single-stream baseline")
    ap.add_argument("--runs", type=int, default=1, help="repeat each setting; medians are printed")
    ap.add_argument("--json", action="store_true", help="print every run as JSON too")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; {args.requests} requests from {args.clients} clients, mix {dict((k, KINDS.count(k) * 5) for k in dict.fromkeys(KINDS))} %")
    rows = []
    for parallel in [int(p) for p in args.parallel.split(",")]:
        runs = [run_once(parallel, args, seed) for seed in range(args.runs)]
        if args.json:
            for r in runs:
                print(json.dumps(r))
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], float | int) and not isinstance(runs[0][k], bool)}
        med["problems"] = sorted({p for r in runs for p in r["problems"]})
        med["healthy_after"] = all(r["healthy_after"] for r in runs)
        med["slowest"] = [x for r in runs for x in r["slowest"]]
        rows.append(med)
    print()
    print("| --parallel | errors | TTFT p50 | TTFT p99 | aggregate tok/s | single tok/s | ratio | RSS before -> after | cache held / budget | healthy after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in rows:
        print(
            f"| {m['parallel']:.0f} | {m['errors']:.0f} / {m['requests']:.0f} | {m['ttft_p50'] * 1000:.0f} ms | {m['ttft_p99'] * 1000:.0f} ms "
            f"| {m['aggregate_tps']:.1f} | {m['single_tps']:.1f} | {m['ratio']:.2f} "
            f"| {m['rss_before_mb']:.0f} -> {m['rss_after_mb']:.0f} MB | {m['cache_held_mb']:.0f} / {m['cache_budget_mb']:.0f} MB | {m['healthy_after']} |"
        )
        for p in m["problems"]:
            print(f"  problem: {p}")
        print(f"  slowest (kind, seconds, ttft): {m['slowest']}")


if __name__ == "__main__":
    main()
