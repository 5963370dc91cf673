"""Every family's constraint on the bundled SmolLM2 (issue 32).

(a) Schema-valid calls per format: one `--config` server serves the bundled model under each of
    the 34 tool formats; for N seeds per format, tool_choice required, a named function and
    auto, temperature 0.7, tools with varied schemas. Prints, per format and mode, the calls
    that validate / calls made in answers that ended by themselves, and the answers cut by
    max_tokens (`length`: their calls are not counted, a cut call cannot be whole) with the calls
    they held. Target: 100% valid whenever the finish is not length.
(b) Grammar build and mask cost for 1, 24 and 128 tools (Hermes and Qwen3-Coder syntax): the
    grammar written and compiled in this process on the model's vocabulary, and the mean time
    of one token mask along a call, against the engine's time per decoded token measured over
    HTTP without a grammar (so the ratio is the share of a decode step the mask adds).

    python bench/family_constraints.py [--seeds 4] [--formats hermes,qwen3_coder] [--skip-a]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from decode import free_port, sse_chunks, start

from toolserve.formats import constraint
from toolserve.formats.registry import FORMATS
from toolserve.models.files import bundled_model
from toolserve.types import ToolCall, ToolSpec

S = {"type": "string", "maxLength": 30}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.", "parameters": {
        "type": "object", "properties": {"city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "book_table", "description": "Book a restaurant table.", "parameters": {
        "type": "object", "properties": {"restaurant": S, "people": {"type": "integer", "minimum": 1, "maximum": 12},
                                         "when": {"type": "object", "properties": {"day": {"type": "string", "enum": ["mon", "tue", "wed"]},
                                                                                   "hour": {"type": "integer", "minimum": 0, "maximum": 23}},
                                                  "required": ["day"]}}, "required": ["restaurant", "people"]}}},
    {"type": "function", "function": {"name": "add_todo", "description": "Add items to a list.", "parameters": {
        "type": "object", "properties": {"items": {"type": "array", "items": S, "maxItems": 3}, "urgent": {"type": "boolean"}},
        "required": ["items"]}}},
]
ASK = "Check the weather in Lisbon, then book a table for 2 at Sakura on tue at 19, and add milk to my list."
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def serve(port: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning", *args]


def part_a(seeds: int, formats: list[str]) -> None:
    config = Path(tempfile.mkdtemp()) / "models.yaml"
    lines = ["models:"]
    for fmt in formats:
        lines += [f"  - id: {fmt}", "    model: bundled", f"    tool_format: {fmt}", "    ctx_size: 2048", "    parallel: 1"]
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(serve(port, "--config", str(config)), url)
    print(f"(a) schema-valid calls, {seeds} seeds per format and mode, temperature 0.7, max_tokens 160")
    print("valid/calls in answers that ended by themselves (answers cut by max_tokens: the calls they held)")
    print("| format | required | named | auto |\n|---|---|---|---|")
    totals = {"required": [0, 0], "named": [0, 0], "auto": [0, 0]}
    try:
        with httpx.Client(timeout=600) as client:
            for fmt in formats:
                cells = []
                for mode, choice in (("required", "required"), ("named", {"type": "function", "function": {"name": "book_table"}}), ("auto", "auto")):
                    valid = calls = cut = cut_calls = 0
                    for seed in range(seeds):
                        body = {"model": fmt, "messages": [{"role": "user", "content": ASK}], "tools": TOOLS, "tool_choice": choice,
                                "max_tokens": 160, "temperature": 0.7, "seed": seed}
                        r = client.post(f"{url}/v1/chat/completions", json=body).json()["choices"][0]
                        if r["finish_reason"] == "length":  # a call cut by max_tokens cannot be whole: not counted
                            cut += 1
                            cut_calls += len(r["message"].get("tool_calls") or [])
                            continue
                        for c in r["message"].get("tool_calls") or []:
                            calls += 1
                            try:
                                jsonschema.validate(json.loads(c["function"]["arguments"]), SCHEMAS[c["function"]["name"]])
                                valid += 1
                            except (jsonschema.ValidationError, KeyError, ValueError):
                                pass
                    totals[mode][0] += valid
                    totals[mode][1] += calls
                    cells.append(f"{valid}/{calls} ({cut}: {cut_calls})")
                print(f"| {fmt} | " + " | ".join(cells) + " |", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    print("| all | " + " | ".join(f"{v}/{c} = {100 * v / max(c, 1):.1f}%" for v, c in totals.values()) + " |\n")


def many_tools(n: int) -> list[ToolSpec]:
    """n tools shaped like an agent's: paths, commands, patterns, flags, limits, enums."""
    out = []
    for i in range(n):
        props: dict[str, Any] = {
            "path": {"type": "string", "description": "Absolute path."},
            "pattern": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
            "recursive": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["read", "write", "append"]},
        }
        if i % 3 == 0:
            props["edits"] = {"type": "array", "items": {"type": "object", "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                                                         "required": ["old", "new"]}}
        out.append(ToolSpec(f"tool_{i}", f"Tool number {i}.", {"type": "object", "properties": props, "required": ["path"]}))
    return out


def token_time(runs: int) -> float:
    """The engine's seconds per decoded token over HTTP, no grammar (EOS banned, greedy)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(serve(port, "--ctx-size", "2048"), url)
    body = {"messages": [{"role": "user", "content": "Write a long story about a lighthouse."}], "max_tokens": 256,
            "temperature": 0, "logit_bias": {"0": -100, "2": -100}, "stream": True}
    rates = []
    try:
        with httpx.Client(timeout=600) as client:
            for _ in range(runs):
                times = [time.perf_counter() for chunk in sse_chunks(client, f"{url}/v1/chat/completions", body)
                         if (chunk.get("choices") or [{}])[0].get("delta", {}).get("content")]
                rates.append((times[-1] - times[0]) / (len(times) - 1))
    finally:
        proc.terminate()
        proc.wait()
    return statistics.median(rates)


def part_b(runs: int) -> None:
    import llama_cpp
    import llguidance
    import numpy as np
    from llguidance.llamacpp import lltokenizer_from_vocab

    llm = llama_cpp.Llama(model_path=str(bundled_model()), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    tok = lltokenizer_from_vocab(vocab)
    per_token = token_time(runs)
    print(f"(b) grammar build and mask cost; the engine decodes a token in {1000 * per_token:.2f} ms without a grammar (median of {runs})")
    print("| format | tools | grammar chars | write ms | compile ms | mask µs/token | mask / decode step |\n|---|---|---|---|---|---|---|")
    bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
    for fmt_id in ("hermes", "qwen3_coder"):
        fmt = FORMATS[fmt_id]
        for n in (1, 24, 128):
            tools = many_tools(n)
            writes, compiles, masks = [], [], []
            args = {"path": "/src/app/main.py", "pattern": "TODO", "limit": 50, "mode": "read"}
            text = fmt.render_tool_call(ToolCall("c", tools[-1].name, json.dumps(args)))
            tokens = tok.tokenize_str(text)
            for _ in range(runs):
                t0 = time.perf_counter()
                grammar = constraint.required(fmt, tools, True, thinking_open=False).grammar
                t1 = time.perf_counter()
                m = llguidance.LLMatcher(tok, grammar, log_level=0)
                t2 = time.perf_counter()
                assert not m.is_error(), m.get_error()
                spent = 0.0
                for t in tokens:
                    s0 = time.perf_counter()
                    m.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
                    spent += time.perf_counter() - s0
                    assert m.consume_token(t), m.get_error()
                writes.append(1000 * (t1 - t0))
                compiles.append(1000 * (t2 - t1))
                masks.append(1e6 * spent / len(tokens))
            mask = statistics.median(masks)
            print(f"| {fmt_id} | {n} | {len(grammar)} | {statistics.median(writes):.1f} | {statistics.median(compiles):.1f} | "
                  f"{mask:.0f} | {mask / 1e6 / per_token:.1%} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--formats", default=",".join(sorted(FORMATS)))
    ap.add_argument("--skip-a", action="store_true")
    ap.add_argument("--skip-b", action="store_true")
    args = ap.parse_args()
    if not args.skip_a:
        part_a(args.seeds, args.formats.split(","))
    if not args.skip_b:
        part_b(args.runs)


if __name__ == "__main__":
    main()
