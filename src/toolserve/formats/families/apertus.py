"""Apertus (swiss-ai): `<|tools_prefix|>[{"NAME": {...arguments}}, ...]<|tools_suffix|>`.

Each entry is an object with one key, the tool's name, whose value is the arguments object.
Reasoning is `<|inner_prefix|>...<|inner_suffix|>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import DONE, FAIL, MORE, Body, Format, Grammar, Sink, Trigger, Written, call_arguments, tool_dicts
from ..grammar import Params, Writer, json_value
from ..jsonstream import dumps, loads
from ..named_json_bodies import NamedJsonBody

PREFIX, SUFFIX = "<|tools_prefix|>", "<|tools_suffix|>"
INNER = ("<|inner_prefix|>", "<|inner_suffix|>")
_WS = " \t\r\n"


def _name(header: str) -> tuple[str, str | None] | None:
    try:
        name = loads(header)
    except ValueError:
        return None
    return (name, None) if isinstance(name, str) and name else None


class NameKeyedCalls:
    """`[{"name": {args}}, ...]` (a lone `{"name": {args}}` too): each entry read by a
    `NamedJsonBody` whose header is the quoted name and whose suffix is the entry's `}`."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.st = "top"
        self.in_list = False
        self.entry: Body | None = None

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, **_: Any) -> Written:
        """The JSON list of `{name: arguments}` entries."""
        entries, defs = [], {}
        for i, t in enumerate(tools):
            params = Params.of(t, i)
            defs.update(params.defs)
            entries.append({"type": "object", "properties": {t.name: params.schema}, "required": [t.name], "additionalProperties": False})
        items = entries[0] if len(entries) == 1 else {"anyOf": entries}
        schema: dict[str, Any] = {"type": "array", "items": items, "minItems": 1, **({} if many else {"maxItems": 1})}
        return Written(json_value(w, {**schema, "$defs": defs} if defs else schema), True)

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        # a failed entry fails the block: before any call it is text, after one the parser
        # keeps the calls and drops the rest of the block
        n = len(buf)
        while True:
            if self.entry is not None:
                pos, status = self.entry.advance(buf, pos, final)
                if status != DONE:
                    return pos, status
                self.entry = None
                if not self.in_list:
                    return pos, DONE
                self.st = "after"
            while pos < n and buf[pos] in _WS:
                pos += 1
            if pos >= n:
                if not final:
                    return pos, MORE
                return pos, DONE if self.st == "after" else FAIL
            c = buf[pos]
            if self.st == "top" and c == "[":
                self.in_list, self.st = True, "item"
            elif self.st in ("top", "item") and c == "{":
                self.entry = NamedJsonBody(self.sink, ":", _name, suffix="}")
            elif self.st == "after" and c == ",":
                self.st = "item"
            elif self.st == "after":  # `]`, or the list left unclosed before the suffix
                return (pos + 1 if c == "]" else pos), DONE
            else:
                return pos, FAIL
            pos += 1


class Apertus(Format):
    FORMAT_ID = "apertus"
    REASONING = INNER
    GRAMMAR = Grammar(triggers=(Trigger(PREFIX, NameKeyedCalls, close=SUFFIX),),
                      reasoning_open=(INNER[0],), reasoning_close=(INNER[1],), drop=("<|assistant_end|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = dumps([t["function"] for t in tool_dicts(tools)])
        return (
            "Tool Capabilities: these functions can be called (JSON schemas):\n" + listing + "\n\n"
            "To call functions, write <|tools_prefix|>, a JSON list with one object per call whose only key is "
            "the function's name and whose value is its arguments, then <|tools_suffix|>:\n"
            '<|tools_prefix|>[{"function_name": {"argument_name": "value"}}]<|tools_suffix|>\n'
            "When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return PREFIX + dumps([{call.name: call_arguments(call)}]) + SUFFIX


FORMAT = Apertus()
