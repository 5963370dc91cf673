"""Hunyuan A13B: `<tool_calls>[{"name": n, "arguments": {...}}, ...]</tool_calls>`.

Reasoning is `<think>...</think>`, the answer after it wrapped in `<answer>...</answer>` (the
wrapper is dropped). Without a call the template asks the model to start its reply with
`助手：` ("assistant:"); that label is dropped as vLLM does.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps


class Hunyuan(Format):
    FORMAT_ID = "hunyuan"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger("<tool_calls>", JsonCallsBody, close="</tool_calls>"),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",),
                      drop=("<answer>", "</answer>", "<|eos|>", "助手："))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = dumps([t["function"] for t in tool_dicts(tools)])
        return (
            "You can call the functions below (JSON schemas):\n" + listing + "\n\n"
            "To call functions, write a JSON list with one entry per call between <tool_calls> and </tool_calls>, "
            "and nothing else:\n"
            '<tool_calls>[{"name": "function_name", "arguments": {"argument_name": "value"}}]</tool_calls>\n'
            "Results are returned between <tool_response></tool_response>. "
            "When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return "<tool_calls>" + dumps([{"name": call.name, "arguments": call_arguments(call)}]) + "</tool_calls>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<tool_response>{content}</tool_response>"


FORMAT = Hunyuan()
