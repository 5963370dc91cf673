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
from dataclasses import dataclass, field
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import (
    DONE,
    FAIL,
    MORE,
    ArgsWriter,
    Format,
    Grammar,
    Sink,
    Trigger,
    Written,
    call_arguments,
    may_grow_into,
    skip_ws,
    tool_dicts,
)
from ..grammar import Params, Writer, alt, items_between, lit, markup_value, members, seq
from ..jsonstream import MAX_DEPTH, dumps
from ..schema import coerce, guess, prop_schema, types_of
from .minimax_m2 import _BODY as M2_BODY

NS = "]<]minimax[>["
THINK = ("<mm:think>", "</mm:think>")
INVOKE = f'{NS}<invoke name="'
# a tag's name is short: the bound lets a tag still arriving be held back by a bounded amount
_TAG = re.compile(re.escape(NS) + r"<(/?)([^<>/\s]{1,256})>")
_TAG_ARRIVING = re.compile(re.escape(NS) + r"</?[^<>/\s]{0,256}\Z")
_OPEN, _CLOSE_INVOKE = NS + "<", f"{NS}</invoke>"
_WS = " \t\r\n"


def _arriving_tag(buf: str, start: int) -> int:
    """First index >= start from which buf may still grow into a tag (len(buf) if none)."""
    n = len(buf)
    k = buf.rfind(_OPEN, max(start, n - len(_OPEN) - 257))
    if k >= 0 and _TAG_ARRIVING.match(buf, k):
        return k
    for j in range(max(start, n - len(_OPEN) + 1), n):
        if _OPEN.startswith(buf[j:]):
            return j
    return n


class _Element:
    """One parameter element, read as it streams: its text is kept and its tags matched with a
    stack of names (a close that is not the innermost open element's is text) until it closes."""

    def __init__(self, name: str, head: str) -> None:
        self.name = name
        self.parts = [head]  # its text so far, open tag included
        self.open = [name]

    def feed(self, buf: str, i: int) -> tuple[int, bool]:
        """Consumes buf[i:] up to the element's close (True), or up to a tag still arriving."""
        for m in _TAG.finditer(buf, i):
            if not m.group(1):
                self.open.append(m.group(2))
            elif self.open[-1] == m.group(2):
                self.open.pop()
                if not self.open:
                    self.parts.append(buf[i:m.end()])
                    return m.end(), True
        end = _arriving_tag(buf, i)
        self.parts.append(buf[i:end])
        return end, False

    def inner(self) -> str:
        """The text between the open and close tags, once closed."""
        text = "".join(self.parts)
        return text[len(self.parts[0]):len(text) - len(f"{NS}</{self.name}>")]


@dataclass
class _Node:
    """An element of a parameter's value; `kids` is None where it holds text (a scalar)."""

    name: str
    start: int  # its inner text: text[start:end]
    end: int = -1
    kids: list[_Node] | None = field(default_factory=list)
    gap: int = 0  # where the text after its last child begins


def _tree(text: str) -> _Node:
    """The elements of a complete value's inner text, in one pass over its tags.

    An element holds children when its inner text is only elements and whitespace; one nested
    deeper than MAX_DEPTH is kept as text (its tags included), so reading never recurses
    without bound."""
    root = _Node("", 0, len(text))
    nodes = [root]  # the open elements, as far as MAX_DEPTH
    names: list[str] = []  # the names of all open elements, however deep
    for m in _TAG.finditer(text):
        top = nodes[-1]
        if not m.group(1):
            names.append(m.group(2))
            if len(nodes) < len(names) or top.kids is None:
                continue  # inside an element kept as text
            if len(names) >= MAX_DEPTH or text[top.gap:m.start()].strip(_WS):
                top.kids = None
                continue
            node = _Node(m.group(2), m.end())
            node.gap = m.end()
            top.kids.append(node)
            nodes.append(node)
        elif names and names[-1] == m.group(2):
            names.pop()
            if len(nodes) > len(names) + 1:  # it closes a tracked element
                node = nodes.pop()
                node.end = m.start()
                if node.kids is not None and (not node.kids or text[node.gap:node.end].strip(_WS)):
                    node.kids = None
                nodes[-1].gap = m.end()
    if root.kids is not None and (len(nodes) > 1 or not root.kids or text[root.gap:].strip(_WS)):
        root.kids = None
    return root


def _value(text: str, node: _Node, schema: dict[str, Any]) -> Any:
    """An element as a JSON value, typed by `schema` where it gives types (recursion bounded
    by `_tree`'s depth)."""
    types = types_of(schema)
    if node.kids is None:
        inner = text[node.start:node.end]
        if not inner.strip() and types & {"object", "array"} and "string" not in types:
            return {} if "object" in types else []  # an element with no children: an empty one
        if types:
            return coerce(inner, schema)
        return guess(inner) if inner.strip() else inner
    if ("array" in types and "object" not in types) or (not types and all(k.name == "item" for k in node.kids)):
        items = schema.get("items")
        items = items if isinstance(items, dict) else {}
        values = []
        for kid in node.kids:  # a loop, not a comprehension: one frame per level of nesting
            values.append(_value(text, kid, items))
        return values
    obj: dict[str, Any] = {}
    repeated: set[str] = set()
    for kid in node.kids:
        value = _value(text, kid, prop_schema(schema, kid.name))
        if kid.name in repeated:
            obj[kid.name].append(value)
        elif kid.name in obj:  # a name written again: its values become a list
            obj[kid.name] = [obj[kid.name], value]
            repeated.add(kid.name)
        else:
            obj[kid.name] = value
    return obj


def element_value(text: str, schema: dict[str, Any]) -> Any:
    """An element's inner text as a JSON value, typed by `schema` where it gives types."""
    return _value(text, _tree(text), schema)


class M3CallsBody:
    """Reads the invokes of one `NS<tool_call>` block; a parameter is emitted once its element
    closes. The element's text is consumed as it arrives (never rescanned), and an element that
    does not close before the end of the output breaks the call off there."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.calls = 0
        self.name = ""
        self.writer: ArgsWriter | None = None
        self.element: _Element | None = None
        self.swallow = False  # a member that is no element: the rest of the output goes with it

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, **_: Any) -> Written:
        """Invokes with one element per parameter: a string as text, any other value as its JSON
        text (which the reader types from the schema, as it does nested elements)."""
        options = []
        for i, t in enumerate(tools):
            params = Params.of(t, i)

            def member(key: str, params: Params = params) -> str:
                return seq(w.mark(NS), lit(f"<{key}>"), element_grammar(w, params, params.prop(key), key))

            options.append(w.rule("invoke", seq(w.mark(NS), lit(f'<invoke name="{t.name}">'), members(w, params, member, ""),
                                                w.mark(NS), lit("</invoke>"))))
        one = alt(options)
        return Written(f'"\\n"? {one} ("\\n"? {one})* "\\n"?' if many else f'"\\n"? {one} "\\n"?', True)

    def _end(self) -> int:
        return FAIL if self.calls == 0 and self.writer is None else DONE

    def _break_off(self, pos: int) -> tuple[int, int]:
        """Cut off, or something that is no element: the call keeps the members that closed."""
        self.sink.abort_call()
        self.writer, self.calls, self.element, self.swallow = None, self.calls + 1, None, False
        return pos, DONE

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        n = len(buf)
        while True:
            if self.swallow or self.element is not None:
                pos = self._read_element(buf, pos)
                if self.element is not None or self.swallow:
                    return self._break_off(n) if final else (pos, MORE)
                continue
            i = skip_ws(buf, pos)
            if self.writer is None:  # between invokes
                if buf.startswith(INVOKE, i):
                    j = buf.find('">', i + len(INVOKE), i + len(INVOKE) + 256)
                    if j < 0:
                        return (i, MORE) if not final and n - i < len(INVOKE) + 256 else (pos, self._end())
                    name = buf[i + len(INVOKE):j].strip()
                    if not self.sink.allowed(name):
                        return pos, self._end()
                    self.sink.start_call(name)
                    self.name, self.writer, pos = name, ArgsWriter(self.sink), j + 2
                    continue
                if not final and may_grow_into(buf, i, INVOKE):
                    return i, MORE
                return pos, self._end()
            if buf.startswith(_CLOSE_INVOKE, i):
                self.writer.close()
                self.writer, self.calls, pos = None, self.calls + 1, i + len(_CLOSE_INVOKE)
                continue
            if buf.startswith(_OPEN, i) and not buf.startswith(NS + "</", i):
                m = _TAG.match(buf, i)
                if m is not None:
                    self.element, pos = _Element(m.group(2), m.group()), m.end()
                    continue
                if not final and _TAG_ARRIVING.match(buf, i):
                    return i, MORE  # the tag is still arriving
                # `NS<` and no tag: like an element never closed, the call ends with the output
                self.swallow, pos = True, i
                continue
            if not final and (may_grow_into(buf, i, _OPEN) or may_grow_into(buf, i, _CLOSE_INVOKE)):
                return i, MORE
            return self._break_off(n if final else pos)

    def _read_element(self, buf: str, pos: int) -> int:
        if self.element is None:  # swallowing
            return len(buf)
        pos, closed = self.element.feed(buf, pos)
        if closed:
            assert self.writer is not None
            key = self.element.name
            self.writer.member(key, element_value(self.element.inner(), prop_schema(self.sink.schema(self.name), key)))
            self.element = None
        return pos


def element_grammar(w: Writer, params: Params, schema: dict[str, Any], name: str, depth: int = 0) -> str:
    """An element's value and its close, as the renderer writes it: an object as an element per
    member, a list as `<item>` elements, a string as text, any other value as its JSON text."""
    schema = params.resolve(schema)
    close = lit(f"</{name}>")
    types = types_of(schema)
    if depth < 8 and types == {"object"} and isinstance(schema.get("properties"), dict):
        props = schema["properties"]
        inner = Params(schema, params.defs, tuple(k for k in schema.get("required") or () if k in props), tuple(props))

        def member(key: str) -> str:
            return seq(w.mark(NS), lit(f"<{key}>"), element_grammar(w, params, inner.prop(key), key, depth + 1))

        return seq(members(w, inner, member, "", "element"), w.mark(NS), close)
    if depth < 8 and types == {"array"} and isinstance(schema.get("items"), dict):
        item = w.rule("item", seq(w.mark(NS), lit("<item>"), element_grammar(w, params, schema["items"], "item", depth + 1)))
        return seq(items_between(item, "", schema.get("minItems"), schema.get("maxItems")), w.mark(NS), close)
    return seq(markup_value(w, params, schema, [NS], NS, layout=False), close)


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
                                Trigger("<minimax:tool_call>", M2_BODY, close="</minimax:tool_call>")),
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
