"""Tool-call accuracy on a real tool-trained model: toolserve against llama-server --jinja (and any
other OpenAI-compatible server already running, such as vLLM), same GGUF, same requests.

The model: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (tests/qwen_coder.py fetches it from PyPI and
checks its hash), or --model PATH. The cases are written here (not taken from a benchmark), in
six categories:

  single      one tool offered, the question needs it
  choice      ten tools offered, the question needs one of them
  parallel    the question needs two calls
  typed       nested objects, arrays, integers, numbers, booleans and enums in the arguments
  follow_up   a conversation with an earlier call and its result: the next turn is a new call,
              or an answer that uses the result (then correct = no call and the result's value
              in the text)
  no_tool     tools offered, none fits: correct = no call

A call answer is CORRECT when its calls match the expected ones one to one (any order, no extra
call): same name, and every expected argument present with the expected value (strings compared
case-insensitively, the expected text inside the actual; a tuple lists alternatives; numbers,
booleans, lists and objects compared as values). Other arguments are not looked at. Beside it:
SCHEMA-VALID (every call's arguments validate against its tool's schema, jsonschema), and IN TEXT
(no call returned, but the answer's text is one that toolserve's lenient reader would read as
calls: what a server that keeps such answers as text leaves on the table).

Modes: tool_choice "auto" (all cases) and "required" (the cases that need a call), each request
non-streaming, temperature 0, max_tokens 256, parallel_tool_calls true. Servers run one after
the other with 2 threads, a 4096-token context and one sequence.

    python bench/real_tool_accuracy.py [--model PATH] [--modes auto,required] [--only CATEGORY,...]
                                       [--skip-llama-server] [--skip-toolserve]
                                       [--peer NAME=URL] [--variant NAME=FLAGS] [--dump FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.qwen_coder
import llama_server
from decode import free_port, start

from toolserve.formats.lenient import lenient_calls
from toolserve.types import ToolSpec

MAX_TOKENS = 256
CATEGORIES = ("single", "choice", "parallel", "typed", "follow_up", "no_tool")


def fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


S = {"type": "string"}
TOOLS = {t["function"]["name"]: t for t in [
    fn("get_weather", "Current weather in a city", {"city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
       ["city"]),
    fn("get_time", "The current local time in a city or time zone", {"timezone": S}, ["timezone"]),
    fn("convert_currency", "Convert an amount of money from one currency to another (ISO codes)",
       {"amount": {"type": "number"}, "from_currency": S, "to_currency": S}, ["amount", "from_currency", "to_currency"]),
    fn("get_stock_price", "The latest price of a stock by its ticker symbol", {"symbol": S}, ["symbol"]),
    fn("translate", "Translate a text into another language", {"text": S, "target_language": S}, ["text", "target_language"]),
    fn("calculate", "Evaluate an arithmetic expression", {"expression": S}, ["expression"]),
    fn("send_email", "Send an email", {"to": S, "subject": S, "body": S}, ["to", "subject", "body"]),
    fn("set_thermostat", "Set the home thermostat", {"temperature": {"type": "number"},
                                                     "mode": {"type": "string", "enum": ["heat", "cool", "auto"]}},
       ["temperature", "mode"]),
    fn("search_flights", "Search flights between two airports (IATA codes) on a date (YYYY-MM-DD)",
       {"origin": S, "destination": S, "date": S, "passengers": {"type": "integer", "minimum": 1},
        "nonstop": {"type": "boolean"}}, ["origin", "destination", "date", "passengers"]),
    fn("create_event", "Create a calendar event", {
        "title": S, "start": {"type": "string", "description": "ISO 8601 date and time"},
        "attendees": {"type": "array", "items": {"type": "string"}},
        "reminder": {"type": "object", "properties": {"minutes": {"type": "integer"},
                                                      "method": {"type": "string", "enum": ["email", "popup"]}},
                     "required": ["minutes", "method"]}}, ["title", "start"]),
]}
ALL = list(TOOLS)
FEW = ["get_weather", "get_time", "get_stock_price", "convert_currency"]


@dataclass
class Case:
    category: str
    messages: list[dict[str, Any]]
    tools: list[str]
    calls: list[tuple[str, dict[str, Any]]]  # expected; [] for an answer in words
    says: str = ""  # an answer in words must contain this (follow_up)


def ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def after(question: str, name: str, args: dict[str, Any], result: Any, *more: dict[str, Any]) -> list[dict[str, Any]]:
    """A conversation that made one call and got its result (then, maybe, more turns)."""
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return [*ask(question), {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)}, *more]


W = "get_weather"
CASES = [
    Case("single", ask("What's the weather in Paris right now?"), [W], [(W, {"city": "paris"})]),
    Case("single", ask("What time is it in Tokyo?"), ["get_time"], [("get_time", {"timezone": "tokyo"})]),
    Case("single", ask("What is Apple's stock (AAPL) trading at?"), ["get_stock_price"], [("get_stock_price", {"symbol": "aapl"})]),
    Case("single", ask("Translate 'good morning' into Spanish."), ["translate"],
         [("translate", {"text": "good morning", "target_language": ("spanish", "es")})]),
    Case("single", ask("Compute 17 * 23 for me."), ["calculate"], [("calculate", {"expression": "17"})]),
    Case("single", ask("Send an email to bob@example.com with the subject 'Lunch' saying I'll be late."), ["send_email"],
         [("send_email", {"to": "bob@example.com", "subject": "lunch"})]),
    Case("single", ask("How warm is it in Berlin, in fahrenheit?"), [W], [(W, {"city": "berlin", "unit": "fahrenheit"})]),
    Case("single", ask("Convert 100 USD to EUR."), ["convert_currency"],
         [("convert_currency", {"amount": 100, "from_currency": "usd", "to_currency": "eur"})]),
    Case("choice", ask("Is it raining in London at the moment?"), ALL, [(W, {"city": "london"})]),
    Case("choice", ask("What time is it in New York?"), ALL, [("get_time", {"timezone": ("new york", "new_york")})]),
    Case("choice", ask("How much is 250 euros in Japanese yen?"), ALL,
         [("convert_currency", {"amount": 250, "from_currency": "eur", "to_currency": "jpy"})]),
    Case("choice", ask("What's Microsoft's share price (MSFT)?"), ALL, [("get_stock_price", {"symbol": "msft"})]),
    Case("choice", ask("Turn the heating on to 21 degrees."), ALL, [("set_thermostat", {"temperature": 21, "mode": "heat"})]),
    Case("choice", ask("Translate 'thank you very much' into French."), ALL,
         [("translate", {"text": "thank you very much", "target_language": ("french", "fr")})]),
    Case("choice", ask("Use the calculator: what is 1024 / 8?"), ALL, [("calculate", {"expression": "1024"})]),
    Case("choice", ask("Email alice@example.com that the meeting moved to 3pm."), ALL, [("send_email", {"to": "alice@example.com"})]),
    Case("parallel", ask("What's the weather in Paris and in Tokyo?"), FEW, [(W, {"city": "paris"}), (W, {"city": "tokyo"})]),
    Case("parallel", ask("What time is it in London, and what's the weather there?"), FEW,
         [("get_time", {"timezone": "london"}), (W, {"city": "london"})]),
    Case("parallel", ask("Get me the stock prices of AAPL and GOOGL."), FEW,
         [("get_stock_price", {"symbol": "aapl"}), ("get_stock_price", {"symbol": "googl"})]),
    Case("parallel", ask("Convert 10 USD to EUR, and 10 USD to GBP."), FEW,
         [("convert_currency", {"amount": 10, "to_currency": "eur"}), ("convert_currency", {"amount": 10, "to_currency": "gbp"})]),
    Case("parallel", ask("Translate 'hello' into German and into Italian."), ["translate", W],
         [("translate", {"target_language": ("german", "de")}), ("translate", {"target_language": ("italian", "it")})]),
    Case("parallel", ask("Check the weather in Rome and in Madrid."), FEW, [(W, {"city": "rome"}), (W, {"city": "madrid"})]),
    Case("typed", ask("Find nonstop flights from JFK to LAX on 2026-12-24 for 3 passengers."), ["search_flights", W],
         [("search_flights", {"origin": "jfk", "destination": "lax", "date": "2026-12-24", "passengers": 3, "nonstop": True})]),
    Case("typed", ask("Any flights from BOS to ORD on 2027-01-05 for one person? Stops are fine."), ["search_flights", W],
         [("search_flights", {"origin": "bos", "destination": "ord", "date": "2027-01-05", "passengers": 1})]),
    Case("typed", ask("Create an event 'Team sync' on 2026-12-01 at 10:00 with ann@example.com and bo@example.com, "
                      "and a popup reminder 15 minutes before."), ["create_event"],
         [("create_event", {"title": "team sync", "attendees": ["ann@example.com", "bo@example.com"],
                            "reminder": {"minutes": 15, "method": "popup"}})]),
    Case("typed", ask("Put 'Dentist' in my calendar for 2026-12-03 09:30 with an email reminder an hour before."), ["create_event"],
         [("create_event", {"title": "dentist", "reminder": {"minutes": 60, "method": "email"}})]),
    Case("typed", ask("Set the thermostat to 18.5 degrees, cooling."), ["set_thermostat", W],
         [("set_thermostat", {"temperature": 18.5, "mode": "cool"})]),
    Case("typed", ask("Convert 12.75 GBP into USD."), ["convert_currency"],
         [("convert_currency", {"amount": 12.75, "from_currency": "gbp", "to_currency": "usd"})]),
    Case("follow_up", after("What's the weather in Paris?", W, {"city": "Paris"}, {"temperature_c": 18, "sky": "cloudy"}),
         FEW, [], says="18"),
    Case("follow_up", after("What time is it in Tokyo?", "get_time", {"timezone": "Asia/Tokyo"}, {"time": "09:15"}),
         FEW, [], says="9:15"),
    Case("follow_up", after("What's AAPL at?", "get_stock_price", {"symbol": "AAPL"}, {"price": 189.5, "currency": "USD"}),
         FEW, [], says="189.5"),
    Case("follow_up", after("What's the weather in Paris?", W, {"city": "Paris"}, {"temperature_c": 18, "sky": "cloudy"},
                            {"role": "assistant", "content": "It is 18°C and cloudy in Paris."},
                            {"role": "user", "content": "And in Lyon?"}), FEW, [(W, {"city": "lyon"})]),
    Case("follow_up", after("What's the weather in Oslo?", W, {"city": "Oslo"}, {"temperature_c": -3, "sky": "snow"},
                            {"role": "assistant", "content": "It is -3°C with snow in Oslo."},
                            {"role": "user", "content": "What time is it there?"}), FEW, [("get_time", {"timezone": "oslo"})]),
    Case("no_tool", ask("Write a haiku about autumn."), FEW, []),
    Case("no_tool", ask("What is the capital of Australia?"), FEW, []),
    Case("no_tool", ask("Explain what a Python list comprehension is, briefly."), FEW, []),
    Case("no_tool", ask("Write a package.json for a Node app called my-app with an express dependency."), FEW, []),
    Case("no_tool", ask("Tell me a short joke about programmers."), FEW, []),
    Case("no_tool", ask("Show the Python code that sorts the list [3, 1, 2]."), FEW, []),
]


def matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, tuple):
        return any(matches(e, actual) for e in expected)
    if isinstance(expected, str):
        return isinstance(actual, str) and expected.lower() in actual.lower()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and float(expected) == float(actual)
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            any(matches(e, a) for a in actual) for e in expected)
    return bool(expected == actual)


def calls_match(expected: list[tuple[str, dict[str, Any]]], calls: list[tuple[str, Any]]) -> bool:
    """Each expected call matched by a distinct actual call, none left over."""
    if len(expected) != len(calls):
        return False
    left = list(calls)
    for name, args in expected:
        hit = next((c for c in left if c[0] == name and matches(args, c[1])), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


def schema_valid(calls: list[tuple[str, Any]]) -> bool:
    try:
        for name, args in calls:
            jsonschema.validate(args, TOOLS[name]["function"]["parameters"])
    except (jsonschema.ValidationError, KeyError):
        return False
    return True


@dataclass
class Tally:
    total: int = 0
    correct: int = 0
    calls: int = 0  # answers with at least one call
    valid: int = 0  # ... whose calls all validate
    in_text: int = 0  # no call, but the text is calls to toolserve's lenient reader
    errors: int = 0
    wrong: list[str] = field(default_factory=list)


def judge(case: Case, message: dict[str, Any], tally: Tally) -> bool:
    raw = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    calls: list[tuple[str, Any]] = []
    for name, text in raw:
        try:
            calls.append((name, json.loads(text)))
        except (ValueError, TypeError):
            calls.append((name, text))
    content = message.get("content") or ""
    if calls:
        tally.calls += 1
        tally.valid += schema_valid(calls)
    elif lenient_calls(content, [ToolSpec(n, "", TOOLS[n]["function"]["parameters"]) for n in case.tools]):
        tally.in_text += 1
    # a call answer: the calls match; an answer in words: no call, and the result's value in the text
    ok = calls_match(case.calls, calls) if case.calls else (not calls and case.says in content)
    tally.correct += ok
    if not ok:
        shown = "; ".join(f"{n}({json.dumps(a)[:90]})" for n, a in calls) or repr(content[:120])
        tally.wrong.append(f"{case.messages[-1]['content'] if isinstance(case.messages[-1]['content'], str) else ''}"[:60]
                           + f" -> {shown}")
    return ok


def run(name: str, url: str, modes: list[str], cases: list[Case]) -> tuple[dict[tuple[str, str], Tally], list[dict]]:
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    dump = []
    with httpx.Client(timeout=900) as client:
        model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
        for mode in modes:
            began = time.monotonic()
            for case in cases:
                if mode == "required" and not case.calls:
                    continue
                tally = tallies[(mode, case.category)]
                tally.total += 1
                body = {"model": model, "messages": case.messages, "tools": [TOOLS[t] for t in case.tools],
                        "tool_choice": mode, "parallel_tool_calls": True, "temperature": 0, "max_tokens": MAX_TOKENS}
                try:
                    r = client.post(f"{url}/v1/chat/completions", json=body)
                    r.raise_for_status()
                    message = r.json()["choices"][0]["message"]
                except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                    tally.errors += 1
                    tally.wrong.append(f"error: {exc}"[:160])
                    dump.append({"server": name, "mode": mode, "case": case.messages[-1], "error": str(exc)})
                    continue
                ok = judge(case, message, tally)
                dump.append({"server": name, "mode": mode, "category": case.category, "case": case.messages[-1],
                             "correct": ok, "message": message})
            done = sum(t.correct for (m, _), t in tallies.items() if m == mode)
            print(f"[real_tool_accuracy] {name} {mode}: {done} correct ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    return tallies, dump


def report(results: dict[str, dict[tuple[str, str], Tally]], modes: list[str], categories: list[str]) -> None:
    servers = list(results)
    for mode in modes:
        cats = [c for c in categories if mode == "auto" or c != "no_tool"]
        print(f"\n### tool_choice {mode}: correct (answers with a call / all calls schema-valid / calls left in text)\n")
        print("| category | " + " | ".join(servers) + " |\n|---|" + "---|" * len(servers))
        for cat in [*cats, "all"]:
            row = []
            for s in servers:
                ts = [t for (m, c), t in results[s].items() if m == mode and (c == cat or cat == "all")]
                tot = sum(t.total for t in ts)
                row.append(f"{sum(t.correct for t in ts)}/{tot} ({sum(t.calls for t in ts)} / {sum(t.valid for t in ts)} / "
                           f"{sum(t.in_text for t in ts)})" + (f" {sum(t.errors for t in ts)} errors" if any(t.errors for t in ts) else ""))
            print(f"| {cat} | " + " | ".join(row) + " |")
        for s in servers:
            for (m, c), t in results[s].items():
                if m == mode:
                    for w in t.wrong:
                        print(f"- {s}, {mode}, {c}: {w[:200]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="", help="GGUF for both servers (default: Qwen2.5-Coder-0.5B-Instruct Q4_K_M)")
    ap.add_argument("--modes", default="auto,required")
    ap.add_argument("--only", default=",".join(CATEGORIES), help="comma-separated categories")
    ap.add_argument("--skip-llama-server", action="store_true")
    ap.add_argument("--skip-toolserve", action="store_true")
    ap.add_argument("--peer", action="append", default=[], help="NAME=URL of another running OpenAI-compatible server")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=FLAGS: also toolserve with these serve flags, e.g. 'no loop defaults=--dry-multiplier 0 --repetition-penalty 1'")
    ap.add_argument("--dump", default="")
    args = ap.parse_args()
    if args.model:
        model = str(Path(args.model).resolve())
    else:
        from tests.qwen_coder import path

        model = str(path())
    modes = [m for m in args.modes.split(",") if m]
    categories = [c for c in args.only.split(",") if c]
    cases = [c for c in CASES if c.category in categories]

    def toolserve(port: int, extra: tuple[str, ...] = ()) -> list[str]:
        return [sys.executable, "-m", "toolserve.cli", "serve", "--port", str(port), "--log-level", "warning",
                "--threads", "2", "--ctx-size", "4096", "--parallel", "1", "--model", model, *extra]

    def llama(port: int) -> list[str]:
        binary = llama_server.binaries()["llama-server"]
        return llama_server.server_command(binary, model, port, threads=2, ctx=4096, parallel=1, extra=("--jinja",))

    results: dict[str, dict[tuple[str, str], Tally]] = {}
    dump: list[dict] = []
    servers = [("toolserve", toolserve, args.skip_toolserve), ("llama-server --jinja", llama, args.skip_llama_server)]
    for variant in args.variant:
        label, _, flags = variant.partition("=")
        servers.append((f"toolserve {label}", functools.partial(toolserve, extra=tuple(flags.split())), False))
    for name, make, skip in servers:
        if skip:
            continue
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start(make(port), url)
        try:
            results[name], answers = run(name, url, modes, cases)
        finally:
            proc.terminate()
            proc.wait()
        dump += answers
    for peer in args.peer:
        name, _, url = peer.partition("=")
        results[name], answers = run(name, url.rstrip("/"), modes, cases)
        dump += answers
    if args.dump:
        Path(args.dump).write_text(json.dumps(dump, indent=1, ensure_ascii=False))
    print(f"Tool-call accuracy, {Path(model).name}, {len(cases)} cases, temperature 0, max_tokens {MAX_TOKENS}")
    report(results, modes, categories)


if __name__ == "__main__":
    main()
