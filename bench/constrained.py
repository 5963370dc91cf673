"""What grammar-constrained tool calls cost and buy, on the bundled SmolLM2 over HTTP.

(a) decode tokens/s with and without a tool-call constraint, same prompt, same run: a named
    tool_choice whose only argument is a string of 1800-2000 characters (so the call outlasts
    max_tokens) vs no tools and the end-of-text tokens banned. Tokens from usage.completion_tokens,
    time between the first and the last streamed chunk (so prefill and grammar compile are left out).
(b) grammar compile time for the Hermes call grammar with 1, 10 and 50 tools: `llguidance.LLMatcher`
    built directly (in this process) on the model's vocabulary, plus the first token mask.
(c) schema-valid tool calls on the same 50 requests (10 prompts x 5 seed/temperature pairs, 5 tools
    with varied schemas), tool_choice "auto" (unconstrained text, parsed) vs "required" (constrained).
    A response is valid if it has at least one call and every call validates (jsonschema).

    python bench/constrained.py [--runs 3] [--tokens 384]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from decode import free_port, sse_chunks, start

from toolserve.models.files import bundled_model

BANNED = {"0": -100.0, "2": -100.0}  # SmolLM2's <|endoftext|> and <|im_end|>
PROMPT = "Write a long, detailed incident report about last night's database outage at the warehouse."
REPORT = {"type": "function", "function": {"name": "file_report", "description": "File an incident report.",
          "parameters": {"type": "object", "properties": {"text": {"type": "string", "minLength": 1800, "maxLength": 2000}},
                         "required": ["text"]}}}


def fn(name: str, desc: str, props: dict, required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


S = {"type": "string", "maxLength": 60}
TOOLS = [
    fn("get_weather", "Current weather in a city.",
       {"city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city", "unit"]),
    fn("book_table", "Book a restaurant table.",
       {"restaurant": S, "people": {"type": "integer", "minimum": 1, "maximum": 12},
        "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}}, ["restaurant", "people", "time"]),
    fn("add_todo", "Add items to a todo list.",
       {"list": S, "items": {"type": "array", "items": S, "minItems": 1, "maxItems": 5},
        "urgent": {"type": "boolean"}}, ["list", "items"]),
    fn("send_email", "Send an email.",
       {"to": {"type": "object", "properties": {"name": S, "address": S}, "required": ["address"],
               "additionalProperties": False}, "subject": S, "body": {"type": "string", "maxLength": 200}},
       ["to", "subject"]),
    fn("convert", "Convert an amount between currencies.",
       {"amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "enum": ["EUR", "USD", "GBP", "JPY"]},
        "to": {"type": "string", "enum": ["EUR", "USD", "GBP", "JPY"]}}, ["amount", "from", "to"]),
]
PROMPTS = [
    "What's the weather like in Lisbon right now, in celsius?",
    "Book a table for 4 at Chez Marcel at 19:30.",
    "Add milk, eggs and bread to my shopping list.",
    "Email Anna (anna@example.com) that the meeting moved to Friday.",
    "How much is 250 euros in US dollars?",
    "Is it going to be cold in Oslo today? Use fahrenheit.",
    "I need a dinner reservation for two at Sakura at 20:00.",
    "Put 'call the plumber' on my urgent home list.",
    "Tell bob@example.com the report is ready, subject 'Report'.",
    "Convert 1000 yen to pounds.",
]
MAX_TOKENS = 400
SETTINGS = [(0, 0.0), (1, 0.7), (2, 0.7), (3, 1.0), (4, 1.2)]  # (seed, temperature)


def decode_rate(client: httpx.Client, url: str, body: dict) -> tuple[float, int]:
    times, tokens = [], 0
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    for chunk in sse_chunks(client, f"{url}/v1/chat/completions", streamed):
        delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            times.append(time.perf_counter())
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    return (tokens - 1) / (times[-1] - times[0]), tokens


def part_a(client: httpx.Client, url: str, model: str, runs: int, n: int) -> None:
    base = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": n, "temperature": 0}
    free = {**base, "logit_bias": BANNED}
    constrained = {**base, "tools": [REPORT], "tool_choice": {"type": "function", "function": {"name": "file_report"}}}
    rates: dict[str, list[float]] = {"unconstrained (EOS banned)": [], "tool-call constraint": []}
    toks: dict[str, int] = {}
    for _ in range(runs):  # alternate, so drifts in machine load hit both alike
        for name, body in zip(rates, (free, constrained), strict=True):
            r, toks[name] = decode_rate(client, url, body)
            rates[name].append(r)
    print(f"(a) decode tokens/s, greedy, max_tokens {n}, median of {runs} runs")
    print("| mode | median tok/s | tokens | runs |\n|---|---|---|---|")
    for name, v in rates.items():
        print(f"| {name} | {statistics.median(v):.1f} | {toks[name]} | {', '.join(f'{x:.1f}' for x in v)} |")
    m = [statistics.median(v) for v in rates.values()]
    print(f"constrained / unconstrained = {m[1] / m[0]:.3f} (target >= 0.9)\n")


def part_b(runs: int) -> None:
    import llama_cpp
    import llguidance
    from llguidance.llamacpp import lltokenizer_from_vocab

    from toolserve.formats import constraint
    from toolserve.formats.registry import FORMATS
    from toolserve.types import ToolSpec

    llm = llama_cpp.Llama(model_path=str(bundled_model()), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    t0 = time.perf_counter()
    tok = lltokenizer_from_vocab(vocab, eos_token=eog)
    print(f"(b) llguidance tokenizer from the vocabulary ({n_vocab} tokens): {1000 * (time.perf_counter() - t0):.0f} ms (once per model)")
    print(f"Hermes call grammar, tool_choice required; median of {runs} compiles")
    print("| tools | grammar chars | LLMatcher() ms | + first mask ms |\n|---|---|---|---|")
    specs = [ToolSpec(f"{t['function']['name']}_{i}", t["function"]["description"], t["function"]["parameters"])
             for i in range(10) for t in TOOLS]
    for n in (1, 10, 50):
        grammar = constraint.required(FORMATS["hermes"], specs[:n], True, thinking_open=False).grammar
        build, first = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            m = llguidance.LLMatcher(tok, grammar, log_level=0)
            t1 = time.perf_counter()
            m.compute_bitmask()
            first.append(1000 * (time.perf_counter() - t0))
            build.append(1000 * (t1 - t0))
            assert not m.is_error(), m.get_error()
        print(f"| {n} | {len(grammar)} | {statistics.median(build):.2f} | {statistics.median(first):.2f} |")
    print()


SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def args_error(raw: str, schema: dict) -> str | None:
    """Why a call's arguments (JSON text) fail `schema`, in one line; None when they validate."""
    try:
        jsonschema.validate(json.loads(raw), schema)
    except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
        return str(exc).splitlines()[0]
    return None


def calls_valid(message: dict, truncated: bool = False) -> tuple[bool, str]:
    calls = message.get("tool_calls") or []
    cut = " [hit max_tokens]" if truncated else ""
    if not calls:
        return False, f"no call: {(message.get('content') or '')[:80]!r}{cut}"
    for c in calls:
        name, raw = c["function"]["name"], c["function"]["arguments"]
        if name not in SCHEMAS:
            return False, f"unknown tool {name!r}{cut}"
        if (error := args_error(raw, SCHEMAS[name])) is not None:
            return False, f"call {calls.index(c) + 1}/{len(calls)} {name}({raw[:80]}): {error}{cut}"
    return True, ""


def part_c(client: httpx.Client, url: str, model: str, only: str = "") -> None:
    modes = {"auto": ("auto", True), "required": ("required", True), "required (parallel_tool_calls false)": ("required", False)}
    if only:
        modes = {m: modes[m] for m in only.split(",")}
    valid = dict.fromkeys(modes, 0)
    failures: dict[str, list[str]] = {m: [] for m in modes}
    for p, prompt in enumerate(PROMPTS):
        for seed, temp in SETTINGS:
            for mode, (choice, parallel) in modes.items():
                body = {"model": model, "messages": [{"role": "user", "content": prompt}], "tools": TOOLS,
                        "tool_choice": choice, "parallel_tool_calls": parallel, "max_tokens": MAX_TOKENS,
                        "temperature": temp, "seed": seed}
                resp = client.post(f"{url}/v1/chat/completions", json=body)
                resp.raise_for_status()
                out = resp.json()
                ok, why = calls_valid(out["choices"][0]["message"], out["usage"]["completion_tokens"] >= MAX_TOKENS)
                valid[mode] += ok
                if not ok:
                    failures[mode].append(f"prompt {p} seed {seed} T {temp}: {why}")
    total = len(PROMPTS) * len(SETTINGS)
    print(f"(c) schema-valid calls on {total} requests (10 prompts x 5 seed/temperature pairs, 5 tools)")
    print("| tool_choice | valid | rate |\n|---|---|---|")
    for mode, k in valid.items():
        print(f"| {mode} ({'unconstrained' if mode == 'auto' else 'constrained'}) | {k}/{total} | {100 * k / total:.0f}% |")
    for mode in modes:
        for f in failures[mode] if mode != "auto" else []:
            print(f"  CONSTRAINED FAILURE ({mode}): {f}")
    for f in failures.get("auto", [])[:5]:
        print(f"  auto failure e.g.: {f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=384)
    ap.add_argument("--skip", default="", help="parts to skip, e.g. 'bc'")
    ap.add_argument("--c-modes", default="", help="comma-separated subset of: auto,required,required (parallel_tool_calls false)")
    args = ap.parse_args()
    if "b" not in args.skip:
        part_b(max(args.runs, 5))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning", "--threads", "2"]
    proc = start(cmd, url)
    try:
        with httpx.Client(timeout=600) as client:
            model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
            if "a" not in args.skip:
                part_a(client, url, model, args.runs, args.tokens)
            if "c" not in args.skip:
                part_c(client, url, model, args.c_modes)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
