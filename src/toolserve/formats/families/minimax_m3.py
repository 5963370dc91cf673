"""MiniMax M3: every tag carries the namespace token `]<]minimax[>[` (NS), and a parameter is an
element named after it:

    NS<tool_call>
    NS<invoke name="n">NS<city>Paris NS</city>NS<items>NS<item>…NS</item>NS</items>NS</invoke>
    NS</tool_call>

(no spaces inside: NS is glued to each tag). An object is nested elements, an array repeated
elements (`<item>`, or any name where the schema asks for an array); a scalar is typed by the
tool's schema, else read as JSON where it is JSON, else kept as text. Reasoning is
`<mm:think>`…`</mm:think>`, opened by the template at the end of the prompt.

llama.cpp forks ship an M3 template that keeps M2's `<minimax:tool_call>` block with M3's
thinking tags; those calls are read with M2's body (minimax_m2.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import DONE, FAIL, MORE, Format, Grammar, Sink, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..markup_bodies import ArgsWriter
from ..schema import coerce, guess, prop_schema, types_of
from .minimax_m2 import _body as m2_body

NS = "]<]minimax[>["
THINK = ("<mm:think>", "</mm:think>")
INVOKE = f'{NS}<invoke name="'
_TAG = re.compile(re.escape(NS) + r"<(/?)([^<>/\s]+)>")
_WS = " \t\r\n"


def _skip_ws(buf: str, i: int) -> int:
    while i < len(buf) and buf[i] in _WS:
        i += 1
    return i


def _member_end(buf: str, i: int) -> tuple[str, int, int] | None:
    """(name, end of the open tag, end of the matching close) of the element at buf[i], if complete."""
    stack: list[str] = []
    m = _TAG.match(buf, i)
    if m is None or m.group(1):
        return None
    name, inner = m.group(2), m.end()
    for m in _TAG.finditer(buf, i):
        if not m.group(1):
            stack.append(m.group(2))
        elif stack and stack[-1] == m.group(2):
            stack.pop()
            if not stack:
                return name, inner, m.end()
    return None


def _children(text: str) -> list[tuple[str, str]] | None:
    """The elements at the top level of `text` as (name, inner text); None when it holds none."""
    out, i = [], _skip_ws(text, 0)
    if not text.startswith(NS + "<", i):
        return None
    while i < len(text):
        found = _member_end(text, i)
        if found is None:
            return None
        name, inner, end = found
        out.append((name, text[inner:end - len(f"{NS}</{name}>")]))
        i = _skip_ws(text, end)
    return out


def element_value(text: str, schema: dict[str, Any]) -> Any:
    """An element's inner text as a JSON value, typed by `schema` where it gives types."""
    kids = _children(text)
    types = types_of(schema)
    if kids is None:
        if types:
            return coerce(text, schema)
        return guess(text) if text.strip() else text
    if ("array" in types and "object" not in types) or (not types and all(n == "item" for n, _ in kids)):
        items = schema.get("items")
        return [element_value(inner, items if isinstance(items, dict) else {}) for _, inner in kids]
    obj: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, inner in kids:
        value = element_value(inner, prop_schema(schema, name))
        if name in repeated:
            obj[name].append(value)
        elif name in obj:  # a name written again: its values become a list
            obj[name] = [obj[name], value]
            repeated.add(name)
        else:
            obj[name] = value
    return obj


class M3CallsBody:
    """Reads the invokes of one `NS<tool_call>` block; a parameter is emitted once its element closes."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.calls = 0
        self.name = ""
        self.writer: ArgsWriter | None = None

    def _end(self) -> int:
        return FAIL if self.calls == 0 and self.writer is None else DONE

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        n = len(buf)
        while True:
            i = _skip_ws(buf, pos)
            rest = buf[i:]
            if self.writer is None:  # between invokes
                if rest.startswith(INVOKE):
                    j = buf.find('">', i + len(INVOKE), i + len(INVOKE) + 256)
                    if j < 0:
                        return (pos, MORE) if not final and n - i < len(INVOKE) + 256 else (pos, self._end())
                    name = buf[i + len(INVOKE):j].strip()
                    if not self.sink.allowed(name):
                        return pos, self._end()
                    self.sink.start_call(name)
                    self.name, self.writer, pos = name, ArgsWriter(self.sink), j + 2
                    continue
                if not final and INVOKE.startswith(rest):
                    return pos, MORE
                return pos, self._end()
            if rest.startswith(f"{NS}</invoke>"):
                self.writer.close()
                self.writer, self.calls, pos = None, self.calls + 1, i + len(f"{NS}</invoke>")
                continue
            found = _member_end(buf, i) if rest.startswith(NS + "<") and not rest.startswith(NS + "</") else None
            if found is not None:
                key, inner, end = found
                schema = prop_schema(self.sink.schema(self.name), key)
                self.writer.member(key, element_value(buf[inner:end - len(f"{NS}</{key}>")], schema))
                pos = end
                continue
            if not final and (rest.startswith(NS + "<") or (NS + "<").startswith(rest)) and not rest.startswith(NS + "</"):
                return pos, MORE  # an element still open, or a tag still arriving
            if not final and f"{NS}</invoke>".startswith(rest):
                return pos, MORE
            # cut off, or something that is no element: the call keeps the members that closed
            self.sink.abort_call()
            self.writer, self.calls = None, self.calls + 1
            return (n if final else pos), DONE


def _m3_value(value: Any) -> str:
    if isinstance(value, dict):
        return "".join(f"{NS}<{k}>{_m3_value(v)}{NS}</{k}>" for k, v in value.items())
    if isinstance(value, list):
        return "".join(f"{NS}<item>{_m3_value(v)}{NS}</item>" for v in value)
    return value if isinstance(value, str) else dumps(value)


class MinimaxM3(Format):
    FORMAT_ID = "minimax_m3"
    REASONING = THINK
    GRAMMAR = Grammar(triggers=(Trigger(f"{NS}<tool_call>", M3CallsBody, close=f"{NS}</tool_call>"),
                                Trigger("<minimax:tool_call>", m2_body, close="</minimax:tool_call>")),
                      reasoning_open=(THINK[0],), reasoning_close=(THINK[1],), drop=("[e~[",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(f"<tool>{dumps(t['function'])}</tool>" for t in tool_dicts(tools))
        return (
            "# Tools\nYou may call one or more tools to assist with the user query. "
            f"Here are the tools available in JSONSchema format:\n\n<tools>\n{listing}\n</tools>\n\n"
            f"To call them, write one {NS}<tool_call> block with an invoke element per call, and an element "
            "named after each parameter (objects as nested elements, arrays as <item> elements):\n\n"
            f'{NS}<tool_call>\n{NS}<invoke name="tool_name">{NS}<parameter_name>value{NS}</parameter_name>'
            f"{NS}</invoke>\n{NS}</tool_call>\n\nWhen no tool is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return (f'{NS}<tool_call>\n{NS}<invoke name="{call.name}">{_m3_value(call_arguments(call))}'
                f"{NS}</invoke>\n{NS}</tool_call>")


FORMAT = MinimaxM3()
