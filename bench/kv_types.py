"""KV cache types on the bundled SmolLM2: memory per cached token, decode speed, tool-call quality.

For --cache-type-k/--cache-type-v in (f16, f16), (q8_0, q8_0), (q4_0, q4_0), one toolserve each:

  bytes/token   a ~900-token completion prompt, then a different one: the first live context is
                saved as a prompt-cache snapshot; /health prompt_cache.bytes divided by that
                snapshot's usable tokens (whole 64-token chunks) and by all its prompt tokens.
                The llama.cpp figure n_layer * n_head_kv * head_dim * (bytes of K + V) is shown too.
  decode tok/s  greedy, 128 new tokens, end-of-text banned, median of 3 (as bench/decode.py)
  tool calls    the 10 prompts and 5 tools of bench/constrained.py at temperature 0, tool_choice
                "auto" and "required", parallel_tool_calls false: responses whose calls all validate

Quantised V turns on flash attention in toolserve, so the decode column compares configurations,
not only cache types.

    python bench/kv_types.py [--runs 3] [--tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from constrained import PROMPTS, TOOLS, calls_valid
from decode import free_port, over_http, start

from toolserve.models.files import bundled_model

TYPES = [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")]
BYTES_PER_VALUE = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # ggml block sizes
BANNED = {"0": -100.0, "2": -100.0}
LONG = " ".join(f"Line {i}: the quick brown fox number {i} jumps over the lazy dog." for i in range(60))


def kv_shape() -> tuple[int, int]:
    """(n_layer, n_head_kv * head_dim) from the GGUF metadata."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(bundled_model()), vocab_only=True, verbose=False)
    meta = llm.metadata
    arch = meta["general.architecture"]
    n_embd, n_head = int(meta[f"{arch}.embedding_length"]), int(meta[f"{arch}.attention.head_count"])
    n_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head))
    llm.close()
    return int(meta[f"{arch}.block_count"]), n_kv * (n_embd // n_head)


def cache_bytes(client: httpx.Client, url: str, model: str) -> tuple[int, int, int]:
    """(snapshot bytes, usable tokens, prompt tokens) of one saved live context."""
    first = client.post(f"{url}/v1/completions", json={"model": model, "prompt": LONG, "max_tokens": 1, "temperature": 0})
    n_prompt = first.json()["usage"]["prompt_tokens"]
    client.post(f"{url}/v1/completions", json={"model": model, "prompt": "Hello there", "max_tokens": 1})
    stats = client.get(f"{url}/health").json()["toolserve"]["prompt_cache"]
    chunk = stats["chunk_tokens"]
    return stats["bytes"], n_prompt - n_prompt % chunk, n_prompt


def tool_quality(client: httpx.Client, url: str, model: str) -> dict[str, int]:
    valid = {"auto": 0, "required": 0}
    for prompt in PROMPTS:
        for choice in valid:
            body = {"model": model, "messages": [{"role": "user", "content": prompt}], "tools": TOOLS,
                    "tool_choice": choice, "parallel_tool_calls": False, "max_tokens": 400, "temperature": 0}
            resp = client.post(f"{url}/v1/chat/completions", json=body)
            resp.raise_for_status()
            ok, why = calls_valid(resp.json()["choices"][0]["message"])
            valid[choice] += ok
            if choice == "required" and not ok:
                print(f"  CONSTRAINED FAILURE: {prompt!r}: {why}", file=sys.stderr)
    return valid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    n_layer, n_embd_kv = kv_shape()
    rows = []
    for k, v in TYPES:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
               "--threads", "2", "--ctx-size", "4096", "--cache-type-k", k, "--cache-type-v", v]
        proc = start(cmd, url)
        try:
            with httpx.Client(timeout=600) as client:
                model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
                nbytes, usable, n_prompt = cache_bytes(client, url, model)
                rates = over_http(url, model, args.tokens, args.runs, BANNED)
                quality = tool_quality(client, url, model)
        finally:
            proc.terminate()
            proc.wait()
        theory = n_layer * n_embd_kv * (BYTES_PER_VALUE[k] + BYTES_PER_VALUE[v])
        rows.append((k, v, nbytes, usable, n_prompt, theory, rates, quality))
        print(f"done: {k}/{v}", file=sys.stderr, flush=True)

    print(f"KV cache types, bundled SmolLM2 ({n_layer} layers, K/V width {n_embd_kv}), 2 threads")
    print(f"decode: greedy, {args.tokens} tokens, EOS banned, median of {args.runs}; tool calls: valid of 10 each")
    print("| K / V | snapshot bytes | bytes/usable token | bytes/prompt token | llama.cpp KV bytes/token "
          "| decode tok/s (runs) | auto valid | required valid |")
    print("|---|---|---|---|---|---|---|---|")
    for k, v, nbytes, usable, n_prompt, theory, rates, q in rows:
        runs = ", ".join(f"{x:.1f}" for x in rates)
        print(f"| {k} / {v} | {nbytes} ({usable}/{n_prompt} tok) | {nbytes / max(usable, 1):.0f} | {nbytes / n_prompt:.0f} "
              f"| {theory:.0f} | {statistics.median(rates):.1f} ({runs}) | {q['auto']}/10 | {q['required']}/10 |")
    base = statistics.median(rows[0][6])
    for k, v, nbytes, *_rest, rates, _q in rows[1:]:
        print(f"{k}/{v} vs f16/f16: memory {nbytes / rows[0][2]:.2f}x, decode {statistics.median(rates) / base:.2f}x")
    print("snapshot bytes = llama_state_seq_get_data of the live context (its KV cells plus a small header)")


if __name__ == "__main__":
    main()
