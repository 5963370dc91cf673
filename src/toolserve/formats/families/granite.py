"""Granite 3.x: `<|tool_call|>[{"name": n, "arguments": {...}}]`.

Granite 3.1 may write the marker as the text `<tool_call>` (vLLM reads both); a JSON list of
calls must follow it, as after `<|tool_call|>`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps


class Granite(Format):
    FORMAT_ID = "granite"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger("<|tool_call|>", JsonCallsBody), Trigger("<tool_call>", JsonCallsBody)),
                      reasoning_open=("<think>",), reasoning_close=("</think>",), drop=("<|end_of_text|>",),
                      answer_wrap=("<response>", "</response>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return (
            "To use the functions below, write <|tool_call|> followed by a JSON list with one entry per call:\n"
            '<|tool_call|>[{"name": "function_name", "arguments": {"argument_name": "value"}}]\n'
            "Results are returned in a tool message. When no function is needed, just answer in plain text.\n"
            "Functions (JSON schemas):\n" + dumps(tool_dicts(tools))
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return "<|tool_call|>" + dumps([{"name": call.name, "arguments": call_arguments(call)}])


FORMAT = Granite()
