"""Llama 3.1 built-in tools: `<|python_tag|>brave_search.call(query="...")`, or plain code
after the tag, which is a `code_interpreter` call `{"code": ...}`. Custom tools are called in
the JSON form of llama3_json, at the start of the answer or after the tag. Results come back
as `ipython`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import DONE, FAIL, MORE, Body, Format, Grammar, Sink, Trigger, Written, call_arguments, skip_ws
from ..grammar import Writer, alt, rx
from ..jsonstream import escape_str
from ..pythonic import PyCallsBody, py_call
from .llama3_json import json_calls

_END = ("<|eom_id|>", "<|eot_id|>")
_BUILTIN_CALL = re.compile(r"\s*[A-Za-z_]\w*\.call\(")
_BUILTIN_PREFIX = re.compile(r"\s*([A-Za-z_]\w*(\.(c(a(l(l)?)?)?)?)?)?\Z")


class _CodeBody:
    """Everything up to the end-of-turn token is code for `code_interpreter`."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.started = False

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        if not self.started:
            pos = len(buf) - len(buf[pos:].lstrip())
            if pos >= len(buf) and not final:
                return pos, MORE
            if not self.sink.allowed("code_interpreter"):
                return pos, FAIL
            self.sink.start_call("code_interpreter")
            self.sink.call_args('{"code": "')
            self.started = True
        ends = [j for j in (buf.find(m, pos) for m in _END) if j >= 0]
        end = min(ends) if ends else len(buf)
        if not ends and not final:  # hold back a possible partial end token
            for j in range(max(pos, len(buf) - 10), len(buf)):
                if any(m.startswith(buf[j:]) for m in _END):
                    end = j
                    break
        self.sink.call_args(escape_str(buf[pos:end]))
        if ends or final:
            self.sink.call_args('"}')
            self.sink.end_call()
            return end, DONE
        return end, MORE


class _Body:
    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.inner: Body | None = None

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, **_: Any) -> Written:
        """`n.call(k=v)` for a tool, as the renderer writes it; code for `code_interpreter`
        (any text: the end-of-turn token ends it)."""
        options = []
        calls = [t for t in tools if t.name != "code_interpreter"]
        if calls:
            options.append(PyCallsBody.grammar(w, calls, False, bracketed=False, suffix=".call").expr)
        if len(calls) < len(tools):
            options.append(w.terminal("code", "/(?s:.+)/ & ~/(?s:.*(?:" + "|".join(rx(m) for m in _END) + ").*)/"))
        return Written(alt(options))

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        if self.inner is None:
            pos = skip_ws(buf, pos)  # read once: no marker starts with whitespace
            if pos == len(buf) and not final:
                return pos, MORE
            rest = buf[pos:pos + 64]
            if rest.lstrip().startswith("{"):  # a custom tool in the JSON form
                self.inner = json_calls(self.sink)
            elif _BUILTIN_CALL.match(rest):
                self.inner = PyCallsBody(self.sink, bracketed=False, name_map=lambda s: s.removesuffix(".call"))
            elif not final and len(rest) < 64 and _BUILTIN_PREFIX.match(rest):
                return pos, MORE  # the 64 characters that decide are not all here
            else:
                self.inner = _CodeBody(self.sink)
        return self.inner.advance(buf, pos, final)


class Llama3Builtin(Format):
    FORMAT_ID = "llama3_builtin"
    TOOL_RESULT_ROLE = "ipython"
    GRAMMAR = Grammar(triggers=(Trigger("<|python_tag|>", _Body), Trigger("{", json_calls, lead=True)), drop=_END)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        names = [t.name for t in tools if t.name not in ("code_interpreter",)]
        return "Environment: ipython" + (f"\nTools: {', '.join(names)}" if names else "")

    def render_tool_call(self, call: ToolCall) -> str:
        args = call_arguments(call)
        if call.name == "code_interpreter":
            return "<|python_tag|>" + str(args.get("code", ""))
        return "<|python_tag|>" + py_call(call.name + ".call", args)


FORMAT = Llama3Builtin()
