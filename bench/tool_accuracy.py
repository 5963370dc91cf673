"""Correct tool calls: toolserve against llama.cpp's own `llama-server --jinja`, same model, same requests.

The rule measured: the same model must make at least as many correct calls through toolserve as
through llama-server with --jinja.

Requests: bench/constrained.py's 10 prompts x 5 (seed, temperature) pairs = 50 per mode, each a
non-streaming POST /v1/chat/completions with its 5 TOOLS, max_tokens MAX_TOKENS (400), the seed
and temperature of the pair. Prompt i asks for tool i % 5 (get_weather, book_table, add_todo,
send_email, convert). Modes (tool_choice), `parallel_tool_calls` sent explicitly every time since
the servers' defaults differ (toolserve true, llama-server false):
  auto                  "auto", parallel_tool_calls true
  required              "required", parallel_tool_calls true
  required-noparallel   "required", parallel_tool_calls false
  named                 {"type": "function", "function": {"name": <the prompt's tool>}}, parallel_tool_calls true

A response is CORRECT if its message has at least one tool call, the FIRST call names the tool the
prompt asks for (in named mode: the named tool, the same one), and that call's arguments parse as
JSON and validate against the tool's schema (jsonschema). Later calls are not looked at.
SCHEMA-VALID is constrained.py's `calls_valid()`: at least one call, and every call names a known
tool and validates (a call cut by max_tokens fails it), whatever the tool.
ERRORS are answers other than HTTP 200 (status and message kept; whatever a server does not
support lands here), plus transport failures and 200 answers without choices[0].message. NO CALL
is a 200 answer whose message has no tool_calls. Errors count as not correct and not valid.

The servers run one after the other, never together: 2 threads, a context of 4096 tokens, one
slot (toolserve `--threads 2 --ctx-size 4096 --parallel 1`; llama-server `-t 2 -tb 2 -c 4096
-np 1 --jinja`, built from the llama.cpp that the installed llama-cpp-python vendors, see
bench/llama_server.py). The table's ratio is toolserve correct / llama-server correct (rule: >= 1).

    python bench/tool_accuracy.py [--modes auto,required,required-noparallel,named] [--model PATH]
                                  [--limit N] [--skip-llama-server] [--skip-toolserve] [--dump FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import llama_server
from constrained import MAX_TOKENS, PROMPTS, SCHEMAS, SETTINGS, TOOLS, args_error, calls_valid
from decode import free_port, start

from toolserve.models.files import bundled_model

SERVERS = ("toolserve", "llama-server --jinja")
MODES = ("auto", "required", "required-noparallel", "named")
EXAMPLES = 4  # failures shown per server and mode
CUT = 240  # characters of a failure shown


@dataclass
class Tally:
    correct: int = 0
    valid: int = 0
    errors: int = 0
    no_call: int = 0
    total: int = 0
    failures: dict[int, list[str]] = field(default_factory=dict)  # by prompt
    misses: Counter[str] = field(default_factory=Counter)  # why not correct, in short
    error_kinds: Counter[str] = field(default_factory=Counter)

    def miss(self, prompt: int, short: str, detail: str) -> None:
        self.misses[short] += 1
        self.failures.setdefault(prompt, []).append(detail)

    def examples(self) -> list[str]:
        """The first failure of each of the first EXAMPLES prompts that had one."""
        return [f[0] for f in list(self.failures.values())[:EXAMPLES]]


def expected_tool(p: int) -> str:
    return str(TOOLS[p % len(TOOLS)]["function"]["name"])


def request(mode: str, model: str, prompt: str, expected: str, seed: int, temp: float) -> dict:
    choice: str | dict = "auto" if mode == "auto" else "required"
    if mode == "named":
        choice = {"type": "function", "function": {"name": expected}}
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "tools": TOOLS,
            "tool_choice": choice, "parallel_tool_calls": mode != "required-noparallel",
            "max_tokens": MAX_TOKENS, "temperature": temp, "seed": seed}


def first_call_ok(message: dict, expected: str) -> tuple[bool, str]:
    """The definition of CORRECT (module docstring): first call is `expected`, its arguments valid."""
    calls = message.get("tool_calls") or []
    if not calls:
        return False, "no call"
    name, raw = calls[0]["function"]["name"], calls[0]["function"]["arguments"]
    if name != expected:
        return False, f"wrong tool: first call {name!r}, expected {expected!r}"
    if (error := args_error(raw, SCHEMAS[expected])) is not None:
        return False, f"invalid arguments: first call {name}({raw[:100]}): {error}"
    return True, ""


def shown(message: dict) -> str:
    """A failing message in short: its text and its calls."""
    parts = []
    if message.get("content"):
        parts.append(f"content {message['content'][:100]!r}")
    for c in message.get("tool_calls") or []:
        parts.append(f"call {c['function']['name']}({c['function']['arguments'][:100]})")
    return "; ".join(parts) or "empty message"


def judge(tally: Tally, prompt: int, where: str, resp: httpx.Response | None, exc: str, expected: str) -> dict:
    """Count one answer into `tally`; return what the dump keeps of it."""
    tally.total += 1
    if resp is None or resp.status_code != 200:
        kind = exc if resp is None else f"HTTP {resp.status_code}: {resp.text[:160]}"
        tally.errors += 1
        tally.error_kinds[kind] += 1
        tally.miss(prompt, "error", f"{where}: {kind}")
        return {"error": kind}
    out = None
    try:
        out = resp.json()
        choice = out["choices"][0]
        message = choice["message"]
        cut = choice.get("finish_reason") == "length" or (out.get("usage") or {}).get("completion_tokens", 0) >= MAX_TOKENS
        valid, why_invalid = calls_valid(message, cut)
        correct, why = first_call_ok(message, expected)
        detail = shown(message)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:  # not JSON, or not the OpenAI shape
        kind = f"HTTP 200, answer shape ({type(err).__name__} {err}): {resp.text[:160]}"
        tally.errors += 1
        tally.error_kinds[kind] += 1
        tally.miss(prompt, "error", f"{where}: {kind}")
        return {"error": kind, "body": out}
    tally.correct += correct
    tally.valid += valid
    tally.no_call += not message.get("tool_calls")
    if not correct:
        tally.miss(prompt, why.split(":")[0], f"{where}: {why}{' [cut by max_tokens]' if cut else ''} | {detail}"
                   + (f" | invalid: {why_invalid}" if message.get("tool_calls") and not valid else ""))
    return {"correct": correct, "valid": valid, "finish_reason": choice.get("finish_reason"), "message": message}


def run_server(name: str, cmd: list[str], url: str, modes: list[str], limit: int) -> tuple[dict[str, Tally], list[dict]]:
    print(f"[tool_accuracy] starting {name}", file=sys.stderr, flush=True)
    proc = start(cmd, url)
    tallies = {m: Tally() for m in modes}
    dump: list[dict] = []
    try:
        with httpx.Client(timeout=600) as client:
            model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
            for mode in modes:
                began = time.monotonic()
                for p, prompt in enumerate(PROMPTS[:limit]):
                    expected = expected_tool(p)
                    for seed, temp in SETTINGS:
                        body = request(mode, model, prompt, expected, seed, temp)
                        resp, exc = None, ""
                        try:
                            resp = client.post(f"{url}/v1/chat/completions", json=body)
                        except httpx.HTTPError as err:
                            exc = f"{type(err).__name__}: {err}"
                        where = f"prompt {p} seed {seed} T {temp}"
                        kept = judge(tallies[mode], p, where, resp, exc, expected)
                        dump.append({"server": name, "mode": mode, "prompt": p, "seed": seed, "temperature": temp,
                                     "expected": expected, **kept})
                t = tallies[mode]
                print(f"[tool_accuracy] {name} {mode}: {t.correct}/{t.total} correct "
                      f"({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait()
    return tallies, dump


def report(results: dict[str, dict[str, Tally]], modes: list[str], model: str, limit: int) -> None:
    n = len(PROMPTS[:limit]) * len(SETTINGS)
    print(f"Correct tool calls, {Path(model).name}: {len(PROMPTS[:limit])} prompts x {len(SETTINGS)} "
          f"seed/temperature pairs = {n} requests per mode, {len(TOOLS)} tools, max_tokens {MAX_TOKENS}\n")
    for mode in modes:
        print(f"### tool_choice {mode}\n")
        print("| server | correct | schema-valid | errors (HTTP non-200) | no call |\n|---|---|---|---|---|")
        for server, tallies in results.items():
            t = tallies[mode]
            print(f"| {server} | {t.correct}/{t.total} | {t.valid}/{t.total} | {t.errors} | {t.no_call} |")
        if len(results) == 2:
            ours, theirs = (results[s][mode].correct for s in SERVERS)
            ratio = f"{ours / theirs:.2f}" if theirs else ("inf" if ours else "n/a (both 0)")
            print(f"\ntoolserve correct / llama-server correct = {ours}/{theirs} = {ratio} "
                  f"({'meets' if ours >= theirs else 'FAILS'} the rule >= 1)")
        for server, tallies in results.items():
            t = tallies[mode]
            if t.misses:
                print(f"- {server}, not correct: " + ", ".join(f"{why} {k}" for why, k in t.misses.most_common()))
            for kind, k in t.error_kinds.most_common():
                print(f"- {server}, error x{k}: {kind[:CUT]}")
            for f in t.examples():
                print(f"- {server}, e.g. {f[:CUT]}")
        print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of: {','.join(MODES)}")
    ap.add_argument("--model", default="", help="GGUF file for both servers (default: the bundled SmolLM2)")
    ap.add_argument("--limit", type=int, default=len(PROMPTS), help="only the first N prompts")
    ap.add_argument("--skip-llama-server", action="store_true")
    ap.add_argument("--skip-toolserve", action="store_true")
    ap.add_argument("--dump", default="", help="write every answer (message or error) to this JSON file")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        ap.error(f"unknown modes {sorted(unknown)}; choose from {','.join(MODES)}")
    model = str(Path(args.model).resolve()) if args.model else str(bundled_model())

    def toolserve(port: int) -> list[str]:
        return [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                "--threads", "2", "--ctx-size", "4096", "--parallel", "1", "--model", model]

    def llama(port: int) -> list[str]:
        binary = llama_server.binaries()["llama-server"]  # built on first use, then cached
        return llama_server.server_command(binary, model, port, threads=2, ctx=4096, parallel=1, extra=("--jinja",))

    setups = [(SERVERS[0], toolserve, args.skip_toolserve), (SERVERS[1], llama, args.skip_llama_server)]
    results: dict[str, dict[str, Tally]] = {}
    dump: list[dict] = []
    for name, make, skip in setups:
        if skip:
            continue
        port = free_port()
        results[name], answers = run_server(name, make(port), f"http://127.0.0.1:{port}", modes, args.limit)
        dump.extend(answers)
    if args.dump:
        Path(args.dump).write_text(json.dumps(dump, indent=1))
    report(results, modes, model, args.limit)


if __name__ == "__main__":
    main()
