"""Phi-4-mini: `functools[{"name": n, "arguments": {...}}]`, or `<|tool_call|>{...}<|/tool_call|>` (the tool
prompt of llama.cpp's Phi-4-mini template); tools listed in `<|tool|>…<|/tool|>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps


class Phi4Mini(Format):
    FORMAT_ID = "phi4_mini"
    GRAMMAR = Grammar(triggers=(Trigger("functools", JsonCallsBody),
                                Trigger("<|tool_call|>", JsonCallsBody, close="<|/tool_call|>")),
                      drop=("<|end|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return f"<|tool|>{dumps([t['function'] for t in tool_dicts(tools)])}<|/tool|>"

    def render_tool_call(self, call: ToolCall) -> str:
        return "functools" + dumps([{"name": call.name, "arguments": call_arguments(call)}])


FORMAT = Phi4Mini()
