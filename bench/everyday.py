"""Do answers end on their own? The everyday prompts of tests/everyday.py (24: questions, lists,
a haiku, an email, code, a translation) sent to the bundled model at its default settings, with
each loop-stopping setting in turn: none (dry_multiplier 0, repetition_penalty 1, loop guard
off), llama.cpp's DRY sampler alone (dry_multiplier 0.8), a repetition penalty of 1.1 alone, both
(toolserve's defaults for a local model), the loop guard alone, and the defaults with the guard. Each prompt --runs times (the
bundled model's card defaults sample at temperature 0.2: each run is another draw), max_tokens
--max-tokens; printed per setting: answers that ended by themselves, answers over 400 tokens,
the median and largest length, and the time taken.

With --questions, each setting also answers the 16 short questions of tests/everyday.QUESTIONS
(max_tokens 200): how many answers hold the right word, and the tokens spent.

    python bench/everyday.py [--runs 3] [--max-tokens 1024] [--model PATH] [--questions]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from decode import free_port, start
from tests.everyday import LIMIT, PROMPTS, QUESTIONS

SETTINGS: dict[str, dict[str, Any]] = {
    "none": {"dry_multiplier": 0.0, "repetition_penalty": 1.0, "loop_guard": False},
    "DRY 0.8": {"repetition_penalty": 1.0, "loop_guard": False},
    "repetition_penalty 1.1": {"dry_multiplier": 0.0, "loop_guard": False},
    "penalty + DRY": {"loop_guard": False},
    # a penalty the client sends counts the prompt's last 64 tokens too (llama.cpp's window)
    "penalty (prompt too) + DRY": {"repetition_penalty": 1.1, "loop_guard": False},
    "loop guard only": {"dry_multiplier": 0.0, "repetition_penalty": 1.0},
    "default (penalty + DRY + guard)": {},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--model", default=None)
    ap.add_argument("--only", default=None, help="comma-separated setting names")
    ap.add_argument("--questions", action="store_true", help="also: right answers to tests/everyday.QUESTIONS")
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--threads", "2", "--log-level", "warning"]
    proc = start([*cmd, *(["--model", args.model] if args.model else [])], url)
    names = args.only.split(",") if args.only else list(SETTINGS)
    try:
        with httpx.Client(timeout=600) as client:
            for name in names:
                lengths, ended, started = [], 0, time.monotonic()
                for run in range(args.runs):
                    for prompt in PROMPTS:
                        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens,
                                "seed": run, **SETTINGS[name]}
                        r = client.post(f"{url}/v1/chat/completions", json=body).json()
                        lengths.append(r["usage"]["completion_tokens"])
                        ended += r["choices"][0]["finish_reason"] == "stop"
                took = time.monotonic() - started
                over = sum(n > LIMIT for n in lengths)
                print(f"{name:32} ended {ended}/{len(lengths)}  over {LIMIT}: {over}  median {statistics.median(lengths):.0f}"
                      f"  max {max(lengths)}  {took:.0f} s", flush=True)
                if args.questions:
                    right, tokens = 0, 0
                    for run in range(args.runs):
                        for question, answer in QUESTIONS:
                            body = {"messages": [{"role": "user", "content": question}], "max_tokens": 200, "seed": run, **SETTINGS[name]}
                            r = client.post(f"{url}/v1/chat/completions", json=body).json()
                            right += re.search(rf"\b({answer})\b", r["choices"][0]["message"]["content"].lower()) is not None
                            tokens += r["usage"]["completion_tokens"]
                    print(f"{'':32} questions right {right}/{args.runs * len(QUESTIONS)}  tokens {tokens}", flush=True)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
