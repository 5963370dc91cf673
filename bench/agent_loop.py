"""Agent loops stay fast: time-to-first-token per turn of a scripted 10-turn tool-using chat.

A system prompt of a few hundred tokens, 5 tools in OpenAI format and a user task; turn k sends
the history with k scripted assistant tool calls (fixed, never generated) and their tool results,
and asks for the next response (max_tokens 16, temperature 0, streamed over HTTP with httpx).
TTFT = time from sending the request to the first chunk carrying content or a tool-call delta.
toolserve holds back the text of a tool call until the call is whole (or the answer ends), so
its first delta comes after several generated tokens, where llama-server's `/completion`
(setups 7, 8) streams its first token at once: `--max-tokens 1` makes both measure the time to
the first generated token.

Servers, measured in the same run, one at a time:
  0 toolserve, cache on   (`--cache-ram 512`, the default)
  1 toolserve, cache off  (`--cache-ram 0`: no prefix reuse at all)
  2 llama_cpp.server      (llama-cpp-python's server: reuses the prefix it shares with its live context)
  3, 4 two conversations interleaved (A1, B1, A2, B2, ...) against toolserve (cache on) and
       llama_cpp.server
  5 llama-server          (llama.cpp's own server, `--jinja`, one slot of 4096 tokens, its default
                          prompt cache in RAM; built from the llama.cpp that the installed
                          llama-cpp-python vendors, see bench/llama_server.py)
  6 interleaved llama-server
  7, 8 llama-server on toolserve's prompt: the same conversation rendered and tokenized by
       toolserve (tools included, through its /tokenize) and sent as token ids to llama-server's
       /completion with cache_prompt; single, then interleaved. Both servers read the same tokens.
Each run uses fresh conversation ids; one warm-up request precedes them. llama-server renders the
conversation with the model's own template (`--jinja`); SmolLM2's drops the tools and the assistant
tool calls, so its prompts are shorter than toolserve's (see the prompt token counts).

    python bench/agent_loop.py [--runs 3] [--turns 10] [--only 0,1,2]   (setup numbers above)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import llama_server
from decode import free_port, sse_chunks, start

from toolserve.models.files import bundled_model

SYSTEM = (
    "You are Atlas, an operations assistant for a small logistics company. You help the dispatch "
    "team plan deliveries, check inventory in the three warehouses (Lyon, Porto, Gdansk), look up "
    "customer orders and shipping rates, and write short notes for the drivers. Always call a tool "
    "when the answer depends on live data: never guess a stock level, an order status or a price. "
    "Call one tool at a time and wait for its result before deciding what to do next. When a tool "
    "returns an error, explain it in one sentence and try a sensible alternative, such as another "
    "warehouse or a different date. Quantities are in units unless stated, weights in kilograms, "
    "distances in kilometres and prices in euros including VAT. Dates use the ISO format YYYY-MM-DD "
    "and times are local to the warehouse. Keep answers short and factual: the dispatch team reads "
    "them on a phone between loading two trucks. If a request is ambiguous, ask exactly one "
    "clarifying question. Never reveal internal customer identifiers to drivers, and never promise "
    "a delivery window narrower than two hours. Refrigerated goods must ship from Lyon or Porto "
    "only, because Gdansk has no cold storage this quarter. Orders above 500 kg need a second "
    "driver, and orders above 2000 kg need the articulated truck, which is booked a day ahead."
)


def fn(name: str, desc: str, props: dict, required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


S, INT = {"type": "string"}, {"type": "integer"}
TOOLS = [
    fn("check_stock", "Units in stock of a product in one warehouse.",
       {"sku": S, "warehouse": {"type": "string", "enum": ["Lyon", "Porto", "Gdansk"]}}, ["sku", "warehouse"]),
    fn("get_order", "Status, lines and weight of a customer order.", {"order_id": S}, ["order_id"]),
    fn("shipping_rate", "Price of shipping a weight between two cities on a date.",
       {"origin": S, "destination": S, "weight_kg": {"type": "number"}, "date": S},
       ["origin", "destination", "weight_kg"]),
    fn("reserve_stock", "Reserve units of a product for an order.",
       {"sku": S, "warehouse": S, "quantity": INT, "order_id": S}, ["sku", "warehouse", "quantity", "order_id"]),
    fn("driver_note", "Send a short note to the driver of a route.", {"route": S, "text": S}, ["route", "text"]),
]

SCRIPT = [  # (tool, arguments) for turns 1..10
    ("get_order", {"order_id": "ORD-{c}-1187"}),
    ("check_stock", {"sku": "CHZ-220", "warehouse": "Lyon"}),
    ("check_stock", {"sku": "CHZ-220", "warehouse": "Porto"}),
    ("check_stock", {"sku": "BTR-015", "warehouse": "Lyon"}),
    ("shipping_rate", {"origin": "Lyon", "destination": "Geneva", "weight_kg": 640, "date": "2026-11-24"}),
    ("shipping_rate", {"origin": "Porto", "destination": "Geneva", "weight_kg": 640, "date": "2026-11-24"}),
    ("reserve_stock", {"sku": "CHZ-220", "warehouse": "Lyon", "quantity": 120, "order_id": "ORD-{c}-1187"}),
    ("reserve_stock", {"sku": "BTR-015", "warehouse": "Lyon", "quantity": 40, "order_id": "ORD-{c}-1187"}),
    ("get_order", {"order_id": "ORD-{c}-1187"}),
    ("driver_note", {"route": "LY-GE-3", "text": "Two drivers, cold chain, dock 4 before 07:30."}),
]


def result(turn: int, conv: str) -> str:
    """A tool result of about 100 tokens, different per turn and conversation."""
    rows = [{"line": i + 1, "sku": f"SKU-{conv}-{turn}{i}", "qty": 10 * (i + turn), "status": "ok"} for i in range(4)]
    return json.dumps({"conversation": conv, "turn": turn, "ok": True, "rows": rows, "note": f"checked at 0{turn}:1{turn}"})


def messages(conv: str, turns: int) -> list[dict]:
    out = [{"role": "system", "content": SYSTEM},
           {"role": "user", "content": f"[{conv}] Customer order 1187 wants 120 cheese wheels and 40 butter packs "
                                       "delivered to Geneva on 2026-11-24. Plan it end to end."}]
    for k in range(turns):
        name, args = SCRIPT[k % len(SCRIPT)]
        args = {a: v.replace("{c}", conv) if isinstance(v, str) else v for a, v in args.items()}
        cid = f"call_{conv}_{k}"
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        out.append({"role": "tool", "tool_call_id": cid, "content": result(k + 1, conv)})
    return out


MAX_TOKENS = 16  # --max-tokens
EXTRA: list[str] = []  # more toolserve flags (--toolserve-args)
TOKENIZER: str | None = None  # a toolserve URL: setups 7-8 send its prompt tokens to llama-server


def ttft_tokens(client: httpx.Client, url: str, conv: str, turn: int) -> tuple[float, int, int]:
    """The same, for toolserve's prompt (tools rendered as toolserve renders them) sent as token
    ids to llama-server's /completion: both servers read exactly the same tokens."""
    assert TOKENIZER is not None
    tokens = client.post(f"{TOKENIZER}/tokenize", json={"messages": messages(conv, turn), "tools": TOOLS}).json()["tokens"]
    body = {"prompt": tokens, "n_predict": MAX_TOKENS, "temperature": 0, "stream": True, "cache_prompt": True}
    first, cached = None, -1
    t0 = time.perf_counter()
    for chunk in sse_chunks(client, f"{url}/completion", body):
        if first is None and chunk.get("content"):
            first = time.perf_counter() - t0
        timings = chunk.get("timings") or {}
        if "cache_n" in timings:
            cached = int(timings["cache_n"])
    return (first if first is not None else time.perf_counter() - t0), len(tokens), cached


def ttft(client: httpx.Client, url: str, model: str, conv: str, turn: int) -> tuple[float, int, int]:
    """(TTFT seconds, prompt tokens, cached tokens) of one streamed request."""
    if TOKENIZER is not None:
        return ttft_tokens(client, url, conv, turn)
    body = {"model": model, "messages": messages(conv, turn), "tools": TOOLS, "tool_choice": "auto",
            "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    first, prompt, cached = None, -1, -1
    t0 = time.perf_counter()
    for chunk in sse_chunks(client, f"{url}/v1/chat/completions", body):
        delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
        if first is None and (delta.get("content") or delta.get("tool_calls")):
            first = time.perf_counter() - t0
        usage = chunk.get("usage") or {}
        if usage:
            prompt = usage.get("prompt_tokens", -1)
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", -1)
    return (first if first is not None else time.perf_counter() - t0), prompt, cached


def run_server(cmd: list[str], port: int, runs: int, turns: int, label: str, interleave: bool):
    """{(conv, turn): [ttft per run]}, {turn: (prompt tokens, cached tokens) of the last run}, /health."""
    url = f"http://127.0.0.1:{port}"
    proc = start(cmd, url)
    out: dict[tuple[str, int], list[float]] = {}
    info: dict[tuple[str, int], tuple[int, int]] = {}
    # llama-server (cpp-httplib) closes a kept-alive connection once a response took longer than
    # its 5 s keep-alive timeout, and the next request on it fails ("Server disconnected without
    # sending a response"): it gets a new connection per request (loopback, well under 1 ms).
    keepalive = 0 if Path(cmd[0]).name == "llama-server" else 20  # 20: httpx's default
    try:
        with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=100, max_keepalive_connections=keepalive)) as client:
            model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
            ttft(client, url, model, "warmup", 1)
            for r in range(runs):
                convs = ["A", "B"] if interleave else ["A"]
                for turn in range(1, turns + 1):
                    for c in convs:
                        t, p, k = ttft(client, url, model, f"{label}{r}{c}", turn)
                        out.setdefault((c, turn), []).append(t)
                        info[(c, turn)] = (p, k)
            health = client.get(f"{url}/health").json() if "toolserve.cli" in cmd else {}
    finally:
        proc.terminate()
        proc.wait()
    return out, info, health.get("toolserve")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--only", default="", help="comma-separated setup numbers 0-8 (default: all)")
    ap.add_argument("--toolserve-args", default="", help="extra arguments for toolserve serve, one string")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens asked per turn (1: time to the first generated token)")
    args = ap.parse_args()
    global MAX_TOKENS
    MAX_TOKENS = args.max_tokens
    EXTRA.extend(args.toolserve_args.split())
    model = str(bundled_model())
    py = sys.executable

    def toolserve(port: int, cache: int) -> list[str]:
        return [py, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                "--ctx-size", "4096", "--threads", "2", "--cache-ram", str(cache), *EXTRA]

    def llama_cpp_server(port: int) -> list[str]:
        return [py, "-m", "llama_cpp.server", "--model", model, "--port", str(port), "--n_ctx", "4096",
                "--n_threads", "2", "--n_threads_batch", "2", "--verbose", "False"]

    def llama_cpp_own_server(port: int) -> list[str]:
        binary = llama_server.binaries()["llama-server"]  # built on first use, then cached
        return llama_server.server_command(binary, model, port, threads=2, ctx=4096, parallel=1, extra=("--jinja",))

    def same_tokens(port: int) -> list[str]:  # llama-server, fed toolserve's prompt tokens
        global TOKENIZER
        tport = free_port()
        TOKENIZER = f"http://127.0.0.1:{tport}"
        tokenizers.append(start([*toolserve(tport, 0), "--parallel", "1"], TOKENIZER))  # idle but for /tokenize
        return llama_cpp_own_server(port)

    tokenizers: list[subprocess.Popen] = []
    setups = [("toolserve cache on", lambda p: toolserve(p, 512), False),
              ("toolserve cache off", lambda p: toolserve(p, 0), False),
              ("llama_cpp.server", llama_cpp_server, False),
              ("interleaved toolserve cache on", lambda p: toolserve(p, 512), True),
              ("interleaved llama_cpp.server", llama_cpp_server, True),
              ("llama-server", llama_cpp_own_server, False),
              ("interleaved llama-server", llama_cpp_own_server, True),
              ("llama-server, toolserve's tokens", same_tokens, False),
              ("interleaved llama-server, toolserve's tokens", same_tokens, True)]
    if args.only:
        setups = [setups[int(i)] for i in args.only.split(",")]
    med: dict[str, dict[int, float]] = {}
    infos, healths = {}, {}
    for i, (name, make, inter) in enumerate(setups):
        port = free_port()
        res, info, health = run_server(make(port), port, args.runs, args.turns, f"s{i}r", inter)
        med[name] = {t: statistics.median([x for (c, tt), v in res.items() if tt == t for x in v])
                     for t in range(1, args.turns + 1)}
        infos[name], healths[name] = info, health
        global TOKENIZER
        TOKENIZER = None
        for proc in tokenizers:
            proc.terminate()
            proc.wait()
        tokenizers.clear()
        print(f"done: {name}", file=sys.stderr, flush=True)

    print(f"TTFT ms per turn, median of {args.runs} runs (interleaved: of both conversations), max_tokens {MAX_TOKENS}")
    print("prompt/cached tokens of conversation A, last run, in brackets")
    print("| turn | " + " | ".join(med) + " |")
    print("|---" * (len(med) + 1) + "|")
    for t in range(1, args.turns + 1):
        cells = []
        for name in med:
            p, k = infos[name].get(("A", t), (-1, -1))
            cells.append(f"{1000 * med[name][t]:.0f} ({p}/{k})")
        print(f"| {t} | " + " | ".join(cells) + " |")
    ratios(med, args.turns)
    for name, h in healths.items():
        if h is not None:
            print(f"\n/health after '{name}': prompt_cache = {json.dumps(h.get('prompt_cache'))}")


def ratios(med: dict[str, dict[int, float]], last: int) -> None:
    """The ratios whose setups were all measured."""
    print()
    on = med.get("toolserve cache on")
    tail = range(max(1, last - 2), last + 1)
    if on is not None:
        if "toolserve cache off" in med:
            print(f"turn {last}: cache off / cache on = {med['toolserve cache off'][last] / on[last]:.2f} (target >= 5)")
        for other in ("llama_cpp.server", "llama-server", "llama-server, toolserve's tokens"):
            if other in med:
                mine = statistics.median(on[t] for t in tail)
                theirs = statistics.median(med[other][t] for t in tail)
                print(f"single conversation, turns {tail.start}-{last}: toolserve / {other} = {mine / theirs:.2f}")
    inter = med.get("interleaved toolserve cache on")
    if inter is not None:
        ts = statistics.median(inter[t] for t in tail)
        for other, target in (("llama_cpp.server", " (target >= 3)"), ("llama-server", ""), ("llama-server, toolserve's tokens", "")):
            if f"interleaved {other}" in med:
                lc = statistics.median(med[f"interleaved {other}"][t] for t in tail)
                print(f"interleaved, turns {tail.start}-{last}: {other} / toolserve = {lc / ts:.2f}{target}")


if __name__ == "__main__":
    main()
