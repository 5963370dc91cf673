"""Speculative decoding from the prompt: toolserve with and without, llama-server with and without
n-gram drafts, in one run, on three workloads with the bundled model.

Servers (one sequence each, the same threads and context; llama-server built from the llama.cpp
that the installed llama-cpp-python vendors, bench/llama_server.py):
  toolserve off       `--speculative off`
  toolserve auto      the default (`--speculative auto`)
  toolserve on        `--speculative on`
  toolserve history   `--speculative history` (on, and drafts from earlier answers too)
  toolserve history -fa off   the same with `--flash-attn off`
  llama-server        no speculative decoding
  llama-server ngram-mod     `--spec-type ngram-mod` (its defaults: n_match 24, n_min 48, n_max 64)
  llama-server ngram-mod -fa off   the same with flash attention off
  llama-server ngram-simple  `--spec-type ngram-simple`
  llama-server ngram-map-k   `--spec-type ngram-map-k`

Workloads (greedy, non-streaming chat completions; each prompt sent once to warm the prompt
cache, then --runs times: so `history` and llama-server's n-gram tables know the answer given
to the warm-up):
  rewrite  a code file of about 1,000 tokens (toolserve's engine/slots.py) rewritten with one
           name changed, the whole file asked back
  agent    an agent turn whose tool call's arguments echo the conversation: a note the user
           wrote, saved with a write_file tool (tool_choice required, so both servers constrain)
  chat     a plain question, a story in the model's own words

Per server and workload: tok/s = completion tokens / request time (the prompt is cached, so
this is decode), acceptance = accepted / drafted tokens (toolserve: /health's counters;
llama-server: its response's timings.draft_n / draft_n_accepted), medians over the runs, and
the ratio to the best llama-server setting of that workload.

    python bench/speculative.py [--runs 3] [--threads 2] [--only rewrite,agent,chat]
                                [--llama-spec none,ngram-mod,ngram-mod:off,...] [--skip-llama-server] [--skip-toolserve]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import llama_server
from concurrency import cpu_busy, serving
from decode import free_port

from toolserve.models.files import bundled_model

ROOT = Path(__file__).resolve().parents[1]
CODE = (ROOT / "src" / "toolserve" / "engine" / "slots.py").read_text()[:3800]
NOTE = (
    "Meeting notes, 14 March. Attendees: Ana, Bruno, Chen, Dalia. The release moves to the second "
    "week of April because the installer still fails on machines without a GPU driver. Bruno owns "
    "the installer fix and will report on Friday. Chen will write the migration guide for the new "
    "configuration file, with one example per model family. Dalia asked that the benchmark numbers "
    "in the README be measured again on the release build. Next meeting: 21 March, same room."
)
WRITE_FILE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write text to a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}
WORKLOADS: dict[str, dict[str, Any]] = {
    "rewrite": {
        "messages": [{"role": "user", "content": f"Rewrite this file with PREFILL_CHUNK renamed to CHUNK_MAX. "
                                                 f"Answer with the whole file only.\n\n```python\n{CODE}\n```"}],
        "max_tokens": 400,
    },
    "agent": {
        "messages": [
            {"role": "system", "content": "You are an assistant that saves the user's notes with the write_file tool."},
            {"role": "user", "content": f"Save these notes to notes/2026-03-14.md exactly as written:\n\n{NOTE}"},
        ],
        "tools": [WRITE_FILE],
        "tool_choice": "required",
        "max_tokens": 200,
    },
    "chat": {
        "messages": [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a lost umbrella."}],
        "max_tokens": 128,
    },
}


def toolserve_counters(url: str) -> tuple[int, int]:
    spec = httpx.get(f"{url}/health", timeout=10).json()["toolserve"].get("speculative") or {}
    return int(spec.get("drafted_tokens", 0)), int(spec.get("accepted_tokens", 0))


def one(url: str, model: str, body: dict[str, Any], toolserve: bool) -> tuple[float, int, int, int]:
    """One request: (tok/s, completion tokens, drafted, accepted)."""
    before = toolserve_counters(url) if toolserve else (0, 0)
    started = time.perf_counter()
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": model, "temperature": 0, **body}, timeout=900)
    took = time.perf_counter() - started
    if r.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:300]}")
    out = r.json()
    tokens = int(out["usage"]["completion_tokens"])
    if toolserve:
        after = toolserve_counters(url)
        drafted, accepted = after[0] - before[0], after[1] - before[1]
    else:
        timings = out.get("timings") or {}
        drafted, accepted = int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))
    return tokens / took, tokens, drafted, accepted


def measure(url: str, model: str, workloads: list[str], runs: int, toolserve: bool, label: str) -> dict[str, dict[str, float]]:
    busy = cpu_busy()
    if busy > 0.15:
        print(f"warning: the CPUs were {100 * busy:.0f}% busy with other work before measuring {label}", file=sys.stderr)
    results: dict[str, dict[str, float]] = {}
    for name in workloads:
        body = WORKLOADS[name]
        one(url, model, body, toolserve)  # warm-up: the prompt is cached from here on
        rates, tokens, drafted, accepted = [], [], 0, 0
        for r in range(runs):
            rate, n, d, a = one(url, model, body, toolserve)
            rates.append(rate)
            tokens.append(n)
            drafted, accepted = drafted + d, accepted + a
            print(f"  {label} {name} run {r + 1}: {rate:.1f} tok/s, {n} tokens, drafted {d}, accepted {a}", file=sys.stderr, flush=True)
        results[name] = {"rate": statistics.median(rates), "tokens": statistics.median(tokens),
                         "acceptance": accepted / drafted if drafted else float("nan")}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--only", default="rewrite,agent,chat", help="workloads, comma-separated")
    ap.add_argument("--llama-spec", default="none,ngram-mod,ngram-mod:off,ngram-simple,ngram-map-k",
                    help="llama-server settings, comma-separated: none or a --spec-type, :off for -fa off")
    ap.add_argument("--skip-llama-server", action="store_true")
    ap.add_argument("--skip-toolserve", action="store_true")
    args = ap.parse_args()
    workloads = [w for w in args.only.split(",") if w]
    model = str(bundled_model())
    logs = Path(tempfile.mkdtemp(prefix="toolserve-bench-spec-"))
    setups: list[tuple[str, bool, list[str]]] = []
    if not args.skip_toolserve:
        for mode, fa in (("off", ""), ("auto", ""), ("on", ""), ("history", ""), ("history", "off")):
            cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--log-level", "warning", "--parallel", "1",
                   "--ctx-size", str(args.ctx), "--threads", str(args.threads), "--model", model, "--speculative", mode,
                   *(("--flash-attn", fa) if fa else ())]
            setups.append((f"toolserve {mode}" + (f" -fa {fa}" if fa else ""), True, cmd))
    if not args.skip_llama_server:
        binary = llama_server.binaries()["llama-server"]
        for setting in args.llama_spec.split(","):
            spec, _, fa = setting.partition(":")
            extra = ("--jinja", *(("--spec-type", spec) if spec != "none" else ()), *(("-fa", fa) if fa else ()))
            label = " ".join(x for x in ("llama-server", spec if spec != "none" else "", f"-fa {fa}" if fa else "") if x)
            setups.append((label, False, ["PORT", str(binary), *extra]))
    table: dict[str, dict[str, dict[str, float]]] = {}
    for label, is_toolserve, cmd in setups:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        if is_toolserve:
            full = [*cmd, "--port", str(port)]
        else:
            full = llama_server.server_command(Path(cmd[1]), model, port, threads=args.threads, ctx=args.ctx, parallel=1, extra=tuple(cmd[2:]))
        with ExitStack() as stack:
            served = stack.enter_context(serving(label.replace(" ", "-"), full, url, logs))
            table[label] = measure(url, served, workloads, args.runs, is_toolserve, label)
    print(f"\nspeculative decoding, bundled model, 1 sequence, {args.threads} threads, greedy; medians of {args.runs} runs")
    print("tok/s = completion tokens / request time (prompt cached); acceptance = accepted / drafted draft tokens")
    print("| server | " + " | ".join(f"{w} tok/s | {w} acc. | {w} vs best llama-server" for w in workloads) + " |")
    print("|---|" + "---|---|---|" * len(workloads))
    best = {w: max((r[w]["rate"] for label, r in table.items() if label.startswith("llama-server")), default=float("nan")) for w in workloads}
    for label, res in table.items():
        cells = []
        for w in workloads:
            acc = res[w]["acceptance"]
            cells += [f"{res[w]['rate']:.1f}", "-" if acc != acc else f"{100 * acc:.0f}%", f"{res[w]['rate'] / best[w]:.2f}" if best[w] == best[w] else "-"]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("\ncommand: " + shlex.join([sys.executable, *sys.argv]))
    print(f"server logs: {logs}")


if __name__ == "__main__":
    main()
