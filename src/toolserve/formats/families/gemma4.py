"""Gemma 4: `<|tool_call>call:n{k:<|"|>v<|"|>,…}<tool_call|>` (several `call:` per block); reasoning in `<|channel>thought…<channel|>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Sink, Trigger, call_arguments
from ..markup_bodies import KvCallsBody, kv_value
from .functiongemma import declaration

ESC = '<|"|>'


def _body(sink: Sink) -> KvCallsBody:
    return KvCallsBody(sink, ESC)


class Gemma4(Format):
    FORMAT_ID = "gemma4"
    REASONING = ("<|channel>thought", "<channel|>")
    GRAMMAR = Grammar(triggers=(Trigger("<|tool_call>", _body, close="<tool_call|>"),),
                      reasoning_open=("<|channel>thought",), reasoning_close=("<channel|>",),
                      drop=("<turn|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "".join(f"<|tool>{declaration(t, ESC)}<tool|>" for t in tools)

    def render_tool_call(self, call: ToolCall) -> str:
        return f"<|tool_call>call:{call.name}{kv_value(call_arguments(call), ESC)}<tool_call|>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<|tool_response>response:{name}{{value:{ESC}{content}{ESC}}}<tool_response|>"


FORMAT = Gemma4()
