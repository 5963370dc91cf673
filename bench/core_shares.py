"""Two local models answering at once on the same cores: shares (engine/cores.py) against the
other ways to run them, in one run.

One server serves two models on the bundled file (`--config`, both preloaded, one sequence
each). For each setup the script streams one model alone, then both at once (one client each,
different prompts, greedy, `--tokens` new tokens with the end-of-text tokens banned):

  shares   each model asks for all the cores (`threads` = the cores): busy at once, each
           computes on its share (the default)
  split    each model on half the cores (`threads` = half): they never ask for more than there is
  none     as `shares` with --no-core-shares: both compute at once on all the cores; measured
           once, with `--none-tokens` tokens, as it is many times slower (--skip-none: not at all)

It prints per setup the median over --runs runs of: the lone stream's tok/s, each stream's tok/s
when both run, and the aggregate (both streams' tokens over the wall time from sending to the
last token), and the aggregate against the lone stream.

--embeddings also measures one model served with `--embeddings` (its embedding context is a
second engine): a chat stream alone, then the same stream while a client sends /v1/embeddings
requests of 16 short inputs back to back; with shares, and with --no-core-shares. Run it on an
otherwise idle machine.

    python bench/core_shares.py [--runs 3] [--tokens 128] [--none-tokens 24] [--skip-none] [--embeddings]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import concurrency as cc
import httpx
from decode import free_port

from toolserve.engine import cores
from toolserve.models.files import bundled_model


def config(path: Path, threads: int) -> str:
    models = "".join(f"  - id: {m}\n    ctx_size: 2048\n    parallel: 1\n    threads: {threads}\n    preload: true\n" for m in ("a", "b"))
    path.write_text(f"keep_alive: null\nmodels:\n{models}")
    return str(path)


async def streams(url: str, models: list[str], tokens: int, banned: list[int], tag: str) -> list[cc.Stream]:
    bodies = [{
        **({"model": m} if m else {}), "max_tokens": tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"({tag}) Write a story about {cc.TOPICS[i % len(cc.TOPICS)]}."}],
        "logit_bias": {str(t): -100 for t in banned},
    } for i, m in enumerate(models)]
    async with httpx.AsyncClient(timeout=1800) as client:
        return list(await asyncio.gather(*(cc.one_stream(client, url, b) for b in bodies)))


async def chat_beside_embeddings(url: str, tokens: int, banned: list[int], tag: str) -> tuple[cc.Stream, float]:
    """One chat stream while embeddings requests run back to back; embedded inputs/s."""
    done = asyncio.Event()

    async def embed(client: httpx.AsyncClient) -> float:
        n, started = 0, time.perf_counter()
        while not done.is_set():
            inputs = [f"({tag}) sentence {i} about {cc.TOPICS[i % len(cc.TOPICS)]}" for i in range(16)]
            r = await client.post(f"{url}/v1/embeddings", json={"input": inputs})
            r.raise_for_status()
            n += len(inputs)
        return n / (time.perf_counter() - started)

    async with httpx.AsyncClient(timeout=1800) as client:
        task = asyncio.create_task(embed(client))
        (chat,) = await streams(url, [""], tokens, banned, tag)
        done.set()
        return chat, await task


def rate(s: cc.Stream) -> float:
    return (s.tokens - 1) / (s.last - s.first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--none-tokens", type=int, default=24)
    ap.add_argument("--skip-none", action="store_true")
    ap.add_argument("--embeddings", action="store_true", help="also a chat stream beside an embedding context")
    args = ap.parse_args()
    n = cores.count()
    if n < 2:
        sys.exit("needs at least 2 cores")
    model = str(bundled_model())
    banned = cc.eog_ids(model)
    logs = Path(tempfile.mkdtemp(prefix="toolserve-bench-shares-"))
    busy = cc.cpu_busy()
    if busy > 0.15:
        print(f"warning: the CPUs were {busy:.0%} busy before the run; numbers will be low and noisy", file=sys.stderr)
    setups = {"shares": (n, []), "split": (n // 2, [])}
    if not args.skip_none:
        setups["none"] = (n, ["--no-core-shares"])
    table: dict[str, dict[str, list[float]]] = {k: {"alone": [], "a": [], "b": [], "both": []} for k in setups}
    for r in range(args.runs):
        for name, (threads, extra) in setups.items():
            if name == "none" and r > 0:
                continue
            tokens = args.none_tokens if name == "none" else args.tokens
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                   "--config", config(logs / f"{name}.yaml", threads), *extra]
            with cc.serving(f"toolserve-{name}", cmd, url, logs):
                asyncio.run(streams(url, ["a", "b"], 8, banned, "warm"))
                (alone,) = asyncio.run(streams(url, ["a"], tokens, banned, f"alone-{r}"))
                both = asyncio.run(streams(url, ["a", "b"], tokens, banned, f"both-{r}"))
            t = table[name]
            t["alone"].append(rate(alone))
            t["a"].append(rate(both[0]))
            t["b"].append(rate(both[1]))
            t["both"].append(cc.summarise(both).aggregate)
            print(f"run {r + 1} {name}: alone {t['alone'][-1]:.1f}, together {t['a'][-1]:.1f} + {t['b'][-1]:.1f} tok/s "
                  f"(aggregate {t['both'][-1]:.1f})", file=sys.stderr, flush=True)
    emb: dict[str, dict[str, list[float]]] = {k: {"alone": [], "beside": [], "inputs": []} for k in ("shares", "none")}
    for r in range(args.runs if args.embeddings else 0):
        for name, extra in (("shares", []), ("none", ["--no-core-shares"])):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                   "--embeddings", "--parallel", "1", *extra]
            with cc.serving(f"toolserve-embeddings-{name}", cmd, url, logs):
                asyncio.run(streams(url, [""], 8, banned, "warm"))
                (alone,) = asyncio.run(streams(url, [""], args.tokens, banned, f"e-alone-{r}"))
                beside, inputs = asyncio.run(chat_beside_embeddings(url, args.tokens, banned, f"e-beside-{r}"))
            e = emb[name]
            e["alone"].append(rate(alone))
            e["beside"].append(rate(beside))
            e["inputs"].append(inputs)
            print(f"run {r + 1} embeddings {name}: chat alone {e['alone'][-1]:.1f}, beside embeddings {e['beside'][-1]:.1f} tok/s, "
                  f"{inputs:.1f} inputs/s", file=sys.stderr, flush=True)
    print(f"\nTwo models on the bundled file, {n} cores, median of {args.runs} runs ({args.tokens} tokens; "
          f"none: 1 run of {args.none_tokens})\n")
    print("| setup | threads each | alone tok/s | together: a | together: b | aggregate | aggregate / alone |")
    print("|---|---|---|---|---|---|---|")
    for name, (threads, _) in setups.items():
        med = {k: statistics.median(v) for k, v in table[name].items()}
        print(f"| {name} | {threads} | {med['alone']:.1f} | {med['a']:.1f} | {med['b']:.1f} | {med['both']:.1f} | {med['both'] / med['alone']:.2f} |")
    if args.embeddings:
        print(f"\nOne model with --embeddings, {n} threads, median of {args.runs} runs\n")
        print("| setup | chat alone tok/s | chat beside embeddings tok/s | embedded inputs/s |")
        print("|---|---|---|---|")
        for name, e in emb.items():
            med = {k: statistics.median(v) for k, v in e.items()}
            print(f"| {name} | {med['alone']:.1f} | {med['beside']:.1f} | {med['inputs']:.1f} |")


if __name__ == "__main__":
    main()
