"""`toolserve parse --format ID [--tools FILE] [--thinking-open] [--split SPEC] < model_output`.

Prints `{"content": ..., "reasoning": ..., "tool_calls": [{"name", "arguments", "id"}]}`.
`--split random:SEED` feeds the streaming parser random-sized pieces, `--split N` pieces of N
characters; without it the whole text goes in at once. Exit 0 on any model output; 2 for a
bad format id, an unreadable tools file or a bad --split.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from typing import Any

from ..types import Delta, ToolSpec
from .base import rebuild
from .registry import FORMATS


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line on stderr, exit 2 (no usage dump)
        raise _UsageError(message)


def load_tools(path: str) -> list[ToolSpec]:
    """ToolSpecs from a JSON file holding an OpenAI `tools` list (or `{"tools": [...]}`)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise _UsageError(f"cannot read tools file {path}: {exc}") from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise _UsageError(f"tools file {path}: expected a JSON list of tools")
    tools = []
    for item in data:
        fn = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _UsageError(f"tools file {path}: every tool needs a function name")
        params = fn.get("parameters")
        tools.append(ToolSpec(fn["name"], fn.get("description") or "", params if isinstance(params, dict) else {}))
    return tools


def pieces(text: str, split: str | None) -> Iterator[str]:
    if not split:
        yield text
        return
    if split.startswith("random:"):
        try:
            rng = random.Random(int(split[7:]))
        except ValueError:
            raise _UsageError(f"bad --split {split!r}: expected random:SEED or N") from None
        i = 0
        while i < len(text):
            step = rng.randint(1, 8)
            yield text[i:i + step]
            i += step
        return
    try:
        size = int(split)
    except ValueError:
        raise _UsageError(f"bad --split {split!r}: expected random:SEED or N") from None
    if size < 1:
        raise _UsageError("--split N needs N >= 1")
    for i in range(0, len(text), size):
        yield text[i:i + size]


def _read_stdin() -> str:
    raw = getattr(sys.stdin, "buffer", None)
    return raw.read().decode("utf-8", "replace") if raw is not None else sys.stdin.read()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:  # never expected: parsers emit JSON objects; show the text rather than crash
        return text


def main(argv: list[str]) -> int:
    ap = _Parser(prog="toolserve parse", description="Parse model output into content, reasoning and tool calls.")
    ap.add_argument("--format", required=True, help="format id: " + ", ".join(sorted(FORMATS)))
    ap.add_argument("--tools", help="JSON file with an OpenAI tools list (without it any name is accepted)")
    ap.add_argument("--thinking-open", action="store_true", help="the prompt ended inside reasoning")
    ap.add_argument("--split", help="random:SEED or N: feed the streaming parser in pieces")
    try:
        args = ap.parse_args(argv)
        if args.format not in FORMATS:
            raise _UsageError(f"unknown format {args.format!r}; known: {', '.join(sorted(FORMATS))}")
        tools = load_tools(args.tools) if args.tools else []
        text = _read_stdin()
        chunks = list(pieces(text, args.split))
    except _UsageError as exc:
        print(f"toolserve parse: {exc}", file=sys.stderr)
        return 2
    parser = FORMATS[args.format].new_parser(tools, thinking_open=args.thinking_open)
    deltas: list[Delta] = []
    for chunk in chunks:
        deltas += parser.feed(chunk)
    deltas += parser.finish()
    msg = rebuild(deltas)
    calls = [{"name": c.name, "arguments": _loads(c.arguments), "id": c.id} for c in msg.tool_calls]
    out = {"content": msg.content, "reasoning": msg.reasoning, "tool_calls": calls}
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
