"""Decode speed on the bundled model, three ways in one run.

(a) llama-cpp-python's `Llama` called directly (generate() loop, in this process)
(b) toolserve over HTTP streaming
(c) llama-cpp-python's own server (`python -m llama_cpp.server`) over HTTP streaming

Greedy, 256 new tokens (end-of-text banned over HTTP so every run decodes all of them), several\nruns each.
Decode tokens/s = (tokens - 1) / (time of last token - time of first token), so prefill is left out.

    python bench/decode.py [--runs 5] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from toolserve.models.files import bundled_model

PROMPT = "Once upon a time, in a small village by the sea,"
THREADS = os.cpu_count() or 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def direct(model: str, n: int, runs: int) -> list[float]:
    """The leanest streaming loop over `Llama`: generate() plus detokenize() per token.

    generate() never stops by itself, so no end-of-text ban is needed (a logits processor
    would slow this baseline down)."""
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=2048, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    prompt = llm.tokenize(PROMPT.encode())
    rates = []
    for _ in range(runs):
        llm.reset()
        times = []
        for token in llm.generate(prompt, temp=0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            llm.detokenize([token])
            times.append(time.perf_counter())
            if len(times) == n:
                break
        rates.append((len(times) - 1) / (times[-1] - times[0]))
    llm.close()
    return rates


def sse_chunks(client: httpx.Client, url: str, body: dict) -> Iterator[dict]:
    """The JSON chunks of one streamed request, as they arrive (used by every HTTP bench)."""
    with client.stream("POST", url, json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])


def over_http(url: str, model: str, n: int, runs: int, banned: dict[str, float]) -> list[float]:
    rates = []
    body = {"model": model, "prompt": PROMPT, "max_tokens": n, "temperature": 0, "logit_bias": banned, "stream": True}
    with httpx.Client(timeout=300) as client:
        for _ in range(runs):
            times = []
            for chunk in sse_chunks(client, f"{url}/v1/completions", body):
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    times.append(time.perf_counter())
            rates.append((len(times) - 1) / (times[-1] - times[0]))
    return rates


def start(cmd: list[str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server did not start: {cmd}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    model = str(bundled_model())
    banned = {"0": -100.0, "2": -100.0}  # SmolLM2's <|endoftext|> and <|im_end|>

    results: dict[str, list[float]] = {}
    results["a: Llama direct"] = direct(model, args.tokens, args.runs)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    toolserve = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning", "--ctx-size", "2048"]
    proc = start(toolserve, url)
    try:
        mid = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        results["b: toolserve HTTP"] = over_http(url, mid, args.tokens, args.runs, banned)
    finally:
        proc.terminate()
        proc.wait()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(port), "--n_ctx", "2048", "--n_threads", str(THREADS), "--n_threads_batch", str(THREADS), "--verbose", "False"]
    try:
        proc = start(server, url)
    except RuntimeError:
        print("llama_cpp.server did not start: pip install 'llama-cpp-python[server]'", file=sys.stderr)
        proc = None
    if proc is not None:
        try:
            mid = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
            results["c: llama_cpp.server HTTP"] = over_http(url, mid, args.tokens, args.runs, banned)
        finally:
            proc.terminate()
            proc.wait()

    medians = {k: statistics.median(v) for k, v in results.items()}
    print(f"decode tokens/s, greedy, {args.tokens} new tokens, median of {args.runs} runs, {THREADS} threads")
    print("| engine | median tok/s | runs |")
    print("|---|---|---|")
    for k, v in results.items():
        print(f"| {k} | {medians[k]:.1f} | {', '.join(f'{x:.1f}' for x in v)} |")
    b = medians["b: toolserve HTTP"]
    print(f"\nb/a = {b / medians['a: Llama direct']:.3f} (target >= 0.95)")
    if "c: llama_cpp.server HTTP" in medians:
        print(f"b/c = {b / medians['c: llama_cpp.server HTTP']:.3f} (target >= 1.0)")


if __name__ == "__main__":
    main()
