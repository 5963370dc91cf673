"""Parser cost per streamed character, for a few families, with 1-char and 4-char pieces.

Baseline (same run): the bare loop that slices the text into pieces and hands them to a
no-op `feed`, so the numbers show what the parser itself adds. Budget: a token takes about
7 ms to decode here; 5% of that over ~4 characters per token is ~90 us per character.

    PYTHONPATH=src python bench/parser_cost.py
"""

from __future__ import annotations

import json
import time

from toolserve.formats.registry import FORMATS
from toolserve.types import ToolCall, ToolSpec

FAMILIES = ["hermes", "qwen3_coder", "gemma3_tool_code", "mistral", "generic_json", "gpt_oss", "gemma4"]
TOOLS = [ToolSpec("get_weather", "Weather.", {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "notes": {"type": "string"}}})]
ARGS = {"city": "San Francisco", "days": 3, "notes": "Bring an umbrella, maybe. " * 8}
PROSE = "Let me think about which tool fits the question best, and what to pass to it. " * 6


def sample(fmt_id: str) -> str:
    fmt = FORMATS[fmt_id]
    call = fmt.render_tool_call(ToolCall("call_x", "get_weather", json.dumps(ARGS)))
    if fmt_id == "generic_json":
        return call
    head = f"{fmt.REASONING[0]}{PROSE}{fmt.REASONING[1]}" if fmt.REASONING else ""
    return head + PROSE + "\n" + call + "\n" + call


def per_char(text: str, size: int, make_feed: object, repeat: int = 5) -> float:
    best = float("inf")
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    for _ in range(repeat):
        feed, finish = make_feed()  # type: ignore[operator]
        t0 = time.perf_counter()
        for piece in pieces:
            feed(piece)
        finish()
        best = min(best, time.perf_counter() - t0)
    return best / len(text) * 1e6


def baseline() -> tuple[object, object]:
    def noop(_: str = "") -> list[object]:
        return []
    return noop, noop


def main() -> None:
    print(f"{'family':18} {'chars':>6} {'1-char us/ch':>13} {'4-char us/ch':>13} {'x baseline(1)':>14}")
    for fmt_id in FAMILIES:
        text = sample(fmt_id)

        def parser(fmt_id: str = fmt_id) -> tuple[object, object]:
            p = FORMATS[fmt_id].new_parser(TOOLS)
            return p.feed, p.finish

        base = per_char(text, 1, baseline)
        one, four = per_char(text, 1, parser), per_char(text, 4, parser)
        print(f"{fmt_id:18} {len(text):6d} {one:13.2f} {four:13.2f} {one / base:14.1f}")
    print(f"baseline (no-op feed, 1-char pieces): {base:.3f} us/char; budget ~90 us/char (5% of 7 ms/token)")


if __name__ == "__main__":
    main()
