"""LFM2: `<|tool_call_start|>[f(a=1)]<|tool_call_end|>` (pythonic), or JSON inside in older templates;
reasoning in `<think>…</think>` (LFM2 thinking models)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import DONE, FAIL, MORE, Body, Format, Grammar, Sink, Trigger, Written, call_arguments, skip_ws, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps
from ..pythonic import PyCallsBody, py_call


class _Body:
    """Picks JSON or pythonic from the first characters: `{` / `[{` is JSON, `[f(` pythonic."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.inner: Body | None = None
        self.done = 0  # lists read whole in this block: another may follow (`[a()][b()]`)

    @classmethod
    def grammar(cls, w: Any, tools: Sequence[ToolSpec], many: bool, **_: Any) -> Written:
        """The pythonic list the template asks for."""
        return PyCallsBody.grammar(w, tools, many)

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        while True:
            if self.inner is None:
                i, n = skip_ws(buf, pos), len(buf)
                k = skip_ws(buf, i + 1) if buf.startswith("[", i) else i
                if k >= n:  # nothing but whitespace (after a `[`) so far
                    if self.done and (final or i >= n):
                        return (pos, DONE) if final else (i, MORE)  # blank space between lists: read once
                    return (pos, FAIL) if final else (i, MORE)
                if buf[k] == "{":
                    self.inner = JsonCallsBody(self.sink, prior=self.done > 0)
                elif k > i:
                    self.inner = PyCallsBody(self.sink)
                else:
                    return pos, DONE if self.done else FAIL
                pos = i
            new, status = self.inner.advance(buf, pos, final)
            if status != DONE:
                return new, status if status != FAIL or not self.done else DONE
            self.inner, self.done, pos = None, self.done + 1, new


class Lfm2(Format):
    FORMAT_ID = "lfm2"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger("<|tool_call_start|>", _Body, close="<|tool_call_end|>"),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",), drop=("<|im_end|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "List of tools: <|tool_list_start|>" + dumps([t["function"] for t in tool_dicts(tools)]) + "<|tool_list_end|>"

    def render_tool_call(self, call: ToolCall) -> str:
        return "<|tool_call_start|>[" + py_call(call.name, call_arguments(call)) + "]<|tool_call_end|>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<|tool_response_start|>{content}<|tool_response_end|>"


FORMAT = Lfm2()
