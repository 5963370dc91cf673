"""gpt-oss (Harmony): channels `analysis` (reasoning), `commentary to=functions.n` (calls), `final`.

`<|channel|>commentary to=functions.n <|constrain|>json<|message|>{...}<|call|>`; the recipient
may also stand in the role header: `<|start|>assistant to=functions.n<|channel|>commentary…`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import (
    CONTENT,
    DONE,
    FAIL,
    MORE,
    REASONING,
    Format,
    Grammar,
    Sink,
    Spec,
    Trigger,
    Written,
    call_arguments,
    may_grow_into,
    skip_ws,
)
from ..grammar import Params, Writer, alt, json_value, lit, seq, text_until
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody
from ..schema import prop_schema, types_of

MESSAGE, CALL = "<|message|>", "<|call|>"
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")  # the header holds the marker (a `<|channel|>` trigger is its prefix)
_TAG = re.compile(r"<\|(\w+)\|>")
_HEADER_TAGS = {"channel", "constrain", "message"}


def _bad_header(text: str) -> bool:
    """A header is one short line whose only tags are channel/constrain (message ends it)."""
    return "\n" in text or any(m.group(1) not in _HEADER_TAGS for m in _TAG.finditer(text))


class _Header:
    """Reads a Harmony header up to `<|message|>` and decides where the message goes."""

    next_state: str | None = None

    def __init__(self, sink: Sink, prefix: str) -> None:
        self.sink = sink
        self.prefix = prefix  # "<|channel|>" when the trigger was the channel marker itself
        self.name: str | None = None  # the function the header addressed
        self.call: NamedJsonBody | None = None

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, *, prefix: str, **_: Any) -> Written:
        """A call as the renderer writes it, from where the trigger left: after `<|start|>`
        the role and channel, after `<|channel|>` the channel (one call: `<|call|>` ends the
        answer)."""
        head = {"": seq(lit("assistant"), w.mark("<|channel|>")), "<|channel|>": ""}[prefix]
        return Written(seq(head, lit("commentary "), recipient(w, tools)))

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        if self.call is not None:
            return self.call.advance(buf, pos, final)
        if self.name is None:
            j = buf.find(MESSAGE, pos, pos + 300)
            if j < 0:
                bad = final or len(buf) - pos > 300 or _bad_header(buf[pos:pos + 300])
                return pos, FAIL if bad else MORE
            header = self.prefix + buf[pos:j]
            if _bad_header(header):
                return pos, FAIL
            pos = j + len(MESSAGE)
            recipient = _RECIPIENT.search(header)
            if recipient is None:
                channel = _CHANNEL.search(header)
                # analysis is reasoning; a preamble (commentary to no one) is shown, as final is
                self.next_state = REASONING if channel is not None and channel.group(1) == "analysis" else CONTENT
                return pos, DONE
            name = recipient.group(1).removeprefix("functions.")
            if not self.sink.allowed(name):
                return pos, FAIL
            self.name = name
        i = skip_ws(buf, pos)
        if buf.startswith(CALL, i):  # `<|message|><|call|>`: a call without arguments
            self.sink.start_call(self.name)
            self.sink.end_call()
            return i + len(CALL), DONE
        if not final and may_grow_into(buf, i, CALL):
            return i, MORE
        name = self.name
        self.call = NamedJsonBody(self.sink, "", lambda _: (name, None), suffix=CALL)
        return self.call.advance(buf, pos, final)


def recipient(w: Writer, tools: Sequence[ToolSpec]) -> str:
    """`to=functions.n <|constrain|>json<|message|>{...}`, each tool with its own arguments (the
    header's other spellings between the name and `<|message|>` are taken too)."""
    options = []
    header = w.rule("header", alt([lit(" "), lit("json"), lit("commentary"), w.mark("<|constrain|>"), w.mark("<|channel|>")]))
    for i, t in enumerate(tools):
        params = Params.of(t, i)
        args = json_value(w, params.document(params.schema))
        options.append(w.rule("call", seq(lit(f"to=functions.{t.name}"), f"{header}*", w.mark(MESSAGE), args)))
    return seq(alt(options), f"({w.mark(CALL)})?")  # an end-of-generation token where the vocabulary has it


def _ts_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(dumps(v) for v in schema["enum"])
    types = sorted(types_of(schema)) or ["any"]
    out = []
    for t in types:
        if t == "object" and schema.get("properties"):
            inner = ", ".join(f"{k}{'' if k in (schema.get('required') or []) else '?'}: "
                              f"{_ts_type(prop_schema(schema, k))}" for k in schema["properties"])
            out.append("{ " + inner + " }")
        elif t == "array":
            out.append(_ts_type(schema.get("items") or {}) + "[]")
        else:
            out.append({"integer": "number", "object": "object"}.get(t, t))
    return " | ".join(out)


def _ts_function(tool: ToolSpec) -> str:
    params = tool.parameters or {}
    lines = [f"// {tool.description}"] if tool.description else []
    props = params.get("properties") or {}
    if not props:
        return "\n".join([*lines, f"type {tool.name} = () => any;"])
    lines.append(f"type {tool.name} = (_: {{")
    required = params.get("required") or []
    for key in props:
        sub = prop_schema(params, key)
        if sub.get("description"):
            lines.append(f"// {sub['description']}")
        lines.append(f"{key}{'' if key in required else '?'}: {_ts_type(sub)},")
    lines.append("}) => any;")
    return "\n".join(lines)


class GptOss(Format):
    FORMAT_ID = "gpt_oss"
    REASONING = ("<|channel|>analysis<|message|>", "<|end|>")
    # `to=functions.` leading a segment: the template wrote `<|start|>assistant` and the model
    # goes on with the recipient of the role header
    GRAMMAR = Grammar(triggers=(Trigger("<|start|>", Spec(_Header, prefix="")),
                                Trigger("<|channel|>", Spec(_Header, prefix="<|channel|>")),
                                Trigger("to=functions.", Spec(_Header, prefix=""), lead=True)),
                      reasoning_close=("<|end|>",), drop=("<|return|>", CALL))

    def required_grammar(self, w: Writer, tools: Sequence[ToolSpec], parallel: bool, reasoning: bool) -> str:
        """The analysis channel first if the model may reason and wants to, then a commentary
        channel addressed to a function (the generation prompt ends with `<|start|>assistant`)."""
        open_, close = self.REASONING  # type: ignore[misc]
        start = seq(w.mark("<|start|>"), lit("assistant"))
        analysis = seq(w.mark(open_), text_until(w, close), start)
        # the generation prompt ends with `<|start|>assistant`; a history call is written with it
        call = w.rule("commentary", seq(w.mark("<|channel|>"), lit("commentary "), recipient(w, tools)))
        # `<|call|>` ends the turn where the vocabulary has it; spelled out, more calls may follow
        more = f'("\\n"? {start} {call})*' if parallel else ""
        return seq(f"({analysis} | {start})?" if reasoning else f"({start})?", call, more)

    def lazy_grammar(self, w: Writer, tools: Sequence[ToolSpec], parallel: bool) -> tuple[str, tuple[tuple[str, bool], ...]]:
        """From `to=functions.` on, wherever it stands (`<|channel|>` also opens the analysis and
        the final answer, so it arms nothing)."""
        more = seq(lit("\n") + "?", w.mark("<|start|>"), lit("assistant"), w.mark("<|channel|>"), lit("commentary "), recipient(w, tools))
        return seq(recipient(w, tools), f"({more})*" if parallel else ""), (("to=functions.", False),)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        body = "\n\n".join(_ts_function(t) for t in tools)
        return f"# Tools\n\n## functions\n\nnamespace functions {{\n\n{body}\n\n}} // namespace functions"

    def render_tool_call(self, call: ToolCall) -> str:
        args = dumps(call_arguments(call))
        return (f"<|start|>assistant<|channel|>commentary to=functions.{call.name} <|constrain|>json"
                f"<|message|>{args}<|call|>")

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{content}<|end|>"


FORMAT = GptOss()
