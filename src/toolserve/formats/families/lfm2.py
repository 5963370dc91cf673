"""LFM2: `<|tool_call_start|>[f(a=1)]<|tool_call_end|>` (pythonic), or JSON inside in older templates;
reasoning in `<think>…</think>` (LFM2 thinking models)."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import FAIL, MORE, Body, Format, Grammar, Sink, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps
from ..pythonic import PyCallsBody, py_call

_WS = " \t\r\n"


class _Body:
    """Picks JSON or pythonic from the first characters: `{` / `[{` is JSON, `[f(` pythonic."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.inner: Body | None = None

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        if self.inner is None:
            head = buf[pos:pos + 64].lstrip(_WS)
            if head.startswith("{") or (head.startswith("[") and head[1:].lstrip(_WS).startswith("{")):
                self.inner = JsonCallsBody(self.sink)
            elif head.startswith("[") and head[1:].lstrip(_WS):
                self.inner = PyCallsBody(self.sink)
            elif not final and (not head or head == "[" or not head[1:].strip(_WS)):
                return pos, MORE
            else:
                return pos, FAIL
        return self.inner.advance(buf, pos, final)


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
