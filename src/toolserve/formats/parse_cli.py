"""`toolserve parse [--format ID | --template FILE | --gguf FILE] [--tools FILE] [--thinking-open]
[--split SPEC] [--explain] < model_output`.

Prints `{"content": ..., "reasoning": ..., "tool_calls": [{"name", "arguments", "id"}]}`.
`--split random:SEED` feeds the streaming parser random-sized pieces, `--split N` pieces of N
characters; without it the whole text goes in at once.

Without `--format` (or with `--format auto`) the family is detected as the server detects it,
from a chat template (`--template`: a Jinja file or a `tokenizer_config.json`; `--gguf`: the
model file's own template and architecture), and the output gains a `"format"` object saying
which family was chosen and by which rule. `--explain` adds that object for an explicit
`--format` too, with `"notes"`: what the parser kept as text and why, and markers of other
families found in the text. Exit 0 on any model output; 2 for a bad format id, an unreadable
tools, template or model file, or a bad --split.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from ..types import Delta, ToolSpec
from .base import Format
from .deltas import rebuild
from .lenient import LenientCalls
from .registry import FORMATS, Detection, explain_detection
from .template import tokenizer_config_template


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


def _template_file(path: str) -> str:
    """A chat template from a Jinja file, or from a `tokenizer_config.json`'s `chat_template`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"cannot read template file {path}: {exc}") from None
    if not path.endswith(".json"):
        return text
    try:
        found = tokenizer_config_template(json.loads(text))  # named templates: the default one, else the first
    except ValueError:
        found = None
    if found is None:
        raise _UsageError(f"template file {path}: no chat_template string in this JSON file")
    return found


def _gguf_template(path: str) -> tuple[str, str, str]:
    """(template source, where it came from, architecture) of a GGUF file, as the server picks them."""
    from ..models.files import gguf_metadata
    from .template import choose_template

    try:
        meta = gguf_metadata(path, skip_prefix="tokenizer.ggml.")
    except ModelLoadError as exc:
        raise _UsageError(exc.message) from None
    arch = str(meta.get("general.architecture") or "")
    gguf_template = meta.get("tokenizer.chat_template")
    source, label = choose_template(gguf_template if isinstance(gguf_template, str) else None, arch)
    where = f"{path} (its own template)" if label == "gguf" else f"toolserve's {label} (the GGUF has none)"
    return source, where, arch


def _call_markers(fmt: Format) -> list[str]:
    return [t.marker for t in fmt.GRAMMAR.triggers]


def _format_report(fmt: Format, found: Detection | None, template_from: str | None, arch: str | None) -> dict[str, Any]:
    report: dict[str, Any] = {"id": fmt.FORMAT_ID}
    if found is None:
        report["chosen_by"] = "--format"
    else:
        report.update(chosen_by=found.rule, why=found.why, template=template_from, architecture=arch or None)
    report["call_markers"] = _call_markers(fmt)
    lead = [t.marker for t in fmt.GRAMMAR.triggers if t.lead]
    if lead:
        report["call_markers_at_start_only"] = lead
    report["reasoning_markers"] = list(fmt.REASONING) if fmt.REASONING else []
    return report


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*\Z")


def _plausible_calls(fmt_id: str, text: str, tools: list[ToolSpec]) -> int:
    """Calls another family reads from the text, counting only names a tool could have (without
    --tools any name is accepted, and a family may take a whole JSON object for a name)."""
    return sum(1 for c in FORMATS[fmt_id].parse(text, tools).tool_calls if _NAME.match(c.name))


def _notes(fmt: Format, text: str, tools: list[ToolSpec], calls: int, parser_log: list[str]) -> list[str]:
    """What a user asking "why was my call not recognised" needs to see: what the parser kept
    as text and why, and other families whose markers are in the text and what they read."""
    notes = list(parser_log)
    own = _call_markers(fmt)
    if calls == 0 and not any(m in text for m in own if len(m) > 1):
        notes.append(f"the text holds none of {fmt.FORMAT_ID}'s call markers ({', '.join(own) or 'none'})")
    others: dict[str, list[str]] = {}
    for fid, other in sorted(FORMATS.items()):
        for m in _call_markers(other):
            if fid != fmt.FORMAT_ID and len(m) >= 4 and m not in own and m in text:
                others.setdefault(m, []).append(fid)
    for marker, fids in others.items():
        readers = [(fid, n) for fid in fids if (n := _plausible_calls(fid, text, tools)) > calls]
        if readers:
            most = max(n for _, n in readers)
            best = [fid for fid, n in readers if n == most]
            notes.append(f"the text holds {marker!r}, a call marker of {', '.join(fids)}: read as {' or '.join(best)} "
                         f"it gives {most} call(s); the model may be writing another family's syntax "
                         f"(try --format {best[0]})")
        else:
            notes.append(f"the text holds {marker!r}, a call marker of {', '.join(fids)}, but none of them reads a "
                         "call from it either")
    return notes


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main(argv: list[str]) -> int:
    ap = _Parser(prog="toolserve parse", description="Parse model output into content, reasoning and tool calls.")
    ap.add_argument("--format", default="auto",
                    help="format id, or auto (the default: detect from --template / --gguf): " + ", ".join(sorted(FORMATS)))
    ap.add_argument("--template", help="chat template to detect the format from: a Jinja file or a tokenizer_config.json")
    ap.add_argument("--gguf", help="model file to detect the format from (its chat template and architecture)")
    ap.add_argument("--architecture", help="model architecture for detection (GGUF general.architecture, e.g. qwen3)")
    ap.add_argument("--tools", help="JSON file with an OpenAI tools list (without it any name is accepted; with it, an "
                                    "answer that is nothing but JSON call objects naming its tools is read as calls, as "
                                    "the server does under tool_choice auto)")
    ap.add_argument("--thinking-open", action="store_true", help="the prompt ended inside reasoning")
    ap.add_argument("--split", help="random:SEED or N: feed the streaming parser in pieces")
    ap.add_argument("--explain", action="store_true",
                    help="also print the family's markers and notes on what was not read as a call")
    try:
        args = ap.parse_args(argv)
        found: Detection | None = None
        template_from: str | None = None
        arch = args.architecture
        if args.format == "auto":
            if args.template and args.gguf:
                raise _UsageError("give --template or --gguf, not both")
            if args.template:
                source, template_from = _template_file(args.template), args.template
            elif args.gguf:
                source, template_from, gguf_arch = _gguf_template(args.gguf)
                arch = arch or gguf_arch
            elif arch:
                source = ""
            else:
                raise _UsageError("--format auto needs --template FILE, --gguf FILE or --architecture NAME "
                                  "(or name the format with --format ID)")
            found = explain_detection(source, arch)
            fmt_id = found.format_id
        elif args.format in FORMATS:
            if args.template or args.gguf:
                raise _UsageError("--template / --gguf detect the format: leave out --format or use --format auto")
            fmt_id = args.format
        else:
            raise _UsageError(f"unknown format {args.format!r}; known: auto, {', '.join(sorted(FORMATS))}")
        tools = load_tools(args.tools) if args.tools else []
        text = _read_stdin()
        chunks = list(pieces(text, args.split))
    except _UsageError as exc:
        print(f"toolserve parse: {exc}", file=sys.stderr)
        return 2
    fmt = FORMATS[fmt_id]
    collect = _Collect()
    logger = logging.getLogger(__package__)
    old_level = logger.level
    logger.addHandler(collect)
    logger.setLevel(logging.DEBUG)
    try:
        parser = fmt.new_parser(tools, thinking_open=args.thinking_open)
        lenient = LenientCalls(tools) if tools else None  # as the server reads an answer under tool_choice auto
        deltas: list[Delta] = []
        for chunk in chunks:
            got = parser.feed(chunk)
            deltas += lenient.feed(got) if lenient is not None else got
        got = parser.finish()
        deltas += lenient.finish(got) if lenient is not None else got
    finally:
        logger.removeHandler(collect)
        logger.setLevel(old_level)
    msg = rebuild(deltas)
    calls = [{"name": c.name, "arguments": _loads(c.arguments), "id": c.id} for c in msg.tool_calls]
    out: dict[str, Any] = {"content": msg.content, "reasoning": msg.reasoning, "tool_calls": calls}
    if found is not None or args.explain:
        out["format"] = _format_report(fmt, found, template_from, arch)
    if args.explain:
        out["notes"] = _notes(fmt, text, tools, len(calls), collect.lines)
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
