"""POST /v1/embeddings throughput: toolserve against llama.cpp's own `llama-server --embeddings`, in one run.

Both servers run at once, each with the same model file and threads; requests alternate between
them (one server works while the other idles), so slow phases of a shared machine hit both. A
request is one batch of --batch short texts (a few words each, different per request) with
`encoding_format: float`; inputs/s = batch size / the request's wall time (client-side, HTTP and
JSON included). The table gives the median over --runs requests after one warm-up each; the ratio
is toolserve / llama-server (above 1: toolserve faster). As a check that both compute the same
thing, it prints the lowest cosine between the two servers' vectors of the same texts.

Models (--models, comma-separated):
  minilm   all-MiniLM-L6-v2 f16 (BERT, mean pooling), from tests/embeddings/make_minilm.py:
           toolserve `--embedding-model`, llama-server `--embeddings`
  smollm2  the bundled SmolLM2-135M Q4_1 (no pooling in its header): toolserve `--embeddings`
           (last-token pooling), llama-server `--embeddings --pooling last`

llama-server gets --slots slots (`-np`), each of --ctx tokens, and a batch that holds them all
(`-b`/`-ub`), so that it too pools many inputs per decode. llama-server is built from the
llama.cpp that the installed llama-cpp-python vendors (bench/llama_server.py; cached).

--decode-check adds: toolserve with and without --embeddings (the embedding context idle),
128 greedy completion tokens, tok/s, alternating; the generation path must not slow down.

    python bench/embeddings.py [--runs 7] [--batch 64] [--threads 2] [--slots 16] [--ctx 512]
                               [--models minilm,smollm2] [--pause 1] [--decode-check]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.embeddings.make_minilm
import llama_server
from concurrency import serving
from decode import free_port

from toolserve.models.files import bundled_model

SUBJECTS = ["the cat", "a storm", "the market", "my neighbour", "the river", "an old clock", "the train", "a poet"]
VERBS = ["watched", "crossed", "ignored", "painted", "followed", "remembered", "broke", "found"]
OBJECTS = ["the bridge", "a letter", "the garden", "its shadow", "the harbour", "a red kite", "the moon", "a song"]


def texts(n: int, tag: int) -> list[str]:
    """`n` short sentences (6 to 9 words), different for every `tag`."""
    return [
        f"In {1900 + (tag * n + i) % 120} {SUBJECTS[i % 8]} {VERBS[(i // 8 + tag) % 8]} {OBJECTS[(i + tag) % 8]}."
        for i in range(n)
    ]


def request(url: str, model: str, inputs: list[str]) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    r = httpx.post(f"{url}/v1/embeddings", json={"model": model, "input": inputs, "encoding_format": "float"}, timeout=600)
    elapsed = time.perf_counter() - started
    if r.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:300]}")
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    return elapsed, np.array([d["embedding"] for d in data], dtype=np.float64)


def model_file(name: str) -> str:
    if name == "minilm":
        from tests.embeddings.make_minilm import build

        return str(build())
    if name == "smollm2":
        return str(bundled_model())
    raise SystemExit(f"unknown model {name!r} (minilm, smollm2)")


def commands(name: str, path: str, args: argparse.Namespace, bins: dict[str, Path], ports: tuple[int, int]) -> tuple[list[str], list[str]]:
    ours = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(ports[0]), "--threads", str(args.threads),
            "--log-level", "warning", "--no-web"]  # fmt: skip
    if name == "minilm":
        ours += ["--embedding-model", path, "--ctx-size", str(args.ctx), "--parallel", "1"]
    else:
        ours += ["--model", path, "--embeddings", "--ctx-size", str(args.ctx), "--parallel", "1"]
    extra = ["--embeddings", "-b", str(args.ctx * args.slots), "-ub", str(args.ctx * args.slots)]
    if name == "smollm2":
        extra += ["--pooling", "last"]
    server = bins["llama-server"]
    # -c is llama-server's whole pool: --slots slots of --ctx tokens. The repack check runs on the
    # bundled model, as toolserve's does (an embedding model cannot be evaluated by it)
    theirs = [str(server), "-m", path, "--host", "127.0.0.1", "--port", str(ports[1]), "-t", str(args.threads),
              "-tb", str(args.threads), "-c", str(args.ctx * args.slots), "-np", str(args.slots),
              *llama_server.server_flags(server, str(bundled_model())), *extra]  # fmt: skip
    return ours, theirs


def ids(url: str) -> list[str]:
    return [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]


def measure(name: str, args: argparse.Namespace, bins: dict[str, Path], logs: Path) -> list[str]:
    path = model_file(name)
    ports = (free_port(), free_port())
    ours, theirs = commands(name, path, args, bins, ports)
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    with contextlib.ExitStack() as stack:
        stack.enter_context(serving(f"toolserve-{name}", ours, urls[0], logs))
        stack.enter_context(serving(f"llama-server-{name}", theirs, urls[1], logs))
        served = ids(urls[0])
        model_ids = (Path(path).stem if name == "minilm" else served[0], ids(urls[1])[0])
        rates: tuple[list[float], list[float]] = ([], [])
        lowest = 1.0
        for r in range(args.runs + 1):
            batch = texts(args.batch, r)
            vecs = []
            for side in (0, 1) if r % 2 == 0 else (1, 0):  # who goes first alternates
                time.sleep(args.pause)  # the other server's threads settle first
                elapsed, v = request(urls[side], model_ids[side], batch)
                vecs.append((side, v))
                if r > 0:  # the first round warms up
                    rates[side].append(args.batch / elapsed)
            a, b = (v for _, v in sorted(vecs, key=lambda sv: sv[0]))
            lowest = min(lowest, float(np.min(np.sum(a * b, axis=1))))
    med = [statistics.median(x) for x in rates]
    print(f"{name}: toolserve {med[0]:.1f} inputs/s, llama-server {med[1]:.1f} inputs/s, ratio {med[0] / med[1]:.2f}; "
          f"lowest cosine between the servers' vectors {lowest:.5f}", flush=True)  # fmt: skip
    return [
        f"| {name} | toolserve | {med[0]:.1f} | {', '.join(f'{x:.1f}' for x in rates[0])} |",
        f"| {name} | llama-server | {med[1]:.1f} | {', '.join(f'{x:.1f}' for x in rates[1])} |",
        f"| {name} | ratio | **{med[0] / med[1]:.2f}** | lowest cosine between them {lowest:.5f} |",
    ]


def decode_check(args: argparse.Namespace, logs: Path) -> list[str]:
    """Generation with and without --embeddings (the embedding context idle): 128 greedy tokens
    of a completion, end-of-generation banned, tok/s over the request's wall time."""
    ports = (free_port(), free_port())
    base = [sys.executable, "-m", "toolserve.cli", "serve", "--threads", str(args.threads), "--ctx-size", "1024",
            "--parallel", "1", "--log-level", "warning", "--no-web"]  # fmt: skip
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    body = {"prompt": "Once upon a time", "max_tokens": 128, "temperature": 0, "logit_bias": {"0": -100, "2": -100}}
    rates: tuple[list[float], list[float]] = ([], [])
    with contextlib.ExitStack() as stack:
        stack.enter_context(serving("toolserve-plain", [*base, "--port", str(ports[0])], urls[0], logs))
        stack.enter_context(serving("toolserve-embeddings", [*base, "--port", str(ports[1]), "--embeddings"], urls[1], logs))
        for r in range(args.runs + 1):
            for side in (0, 1) if r % 2 == 0 else (1, 0):
                time.sleep(args.pause)
                started = time.perf_counter()
                out = httpx.post(f"{urls[side]}/v1/completions", json=body, timeout=600).json()
                if r > 0:
                    rates[side].append(out["usage"]["completion_tokens"] / (time.perf_counter() - started))
    med = [statistics.median(x) for x in rates]
    print(f"generation: {med[0]:.1f} tok/s without --embeddings, {med[1]:.1f} with, ratio {med[1] / med[0]:.2f}", flush=True)
    return [
        f"| generation, no --embeddings | tok/s | {med[0]:.1f} | {', '.join(f'{x:.1f}' for x in rates[0])} |",
        f"| generation, --embeddings | tok/s | {med[1]:.1f} | {', '.join(f'{x:.1f}' for x in rates[1])} |",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7, help="timed requests per server (after one warm-up)")
    p.add_argument("--batch", type=int, default=64, help="texts per request")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--slots", type=int, default=16, help="llama-server -np")
    p.add_argument("--ctx", type=int, default=512, help="tokens per input at most (toolserve --ctx-size; llama-server per slot)")
    p.add_argument("--models", default="minilm,smollm2")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between requests")
    p.add_argument("--decode-check", action="store_true", help="also: generation tok/s with and without --embeddings")
    args = p.parse_args()
    bins = llama_server.binaries()
    logs = Path(tempfile.mkdtemp(prefix="toolserve-bench-embeddings-"))
    print(f"server logs in {logs}", file=sys.stderr)
    rows = ["| model | server | median inputs/s | runs |", "|---|---|---|---|"]
    for name in args.models.split(","):
        rows += measure(name.strip(), args, bins, logs)
    if args.decode_check:
        rows += decode_check(args, logs)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
