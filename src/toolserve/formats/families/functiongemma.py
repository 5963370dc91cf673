"""FunctionGemma: `<start_function_call>call:n{k:<escape>v<escape>,…}<end_function_call>`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments
from ..kv_bodies import KvCallsBody, kv_value

ESC = "<escape>"


_BODY = Spec(KvCallsBody, esc=ESC, close="<end_function_call>")


def declaration(tool: ToolSpec, esc: str) -> str:
    """`declaration:n{description:…,parameters:{…}}` in the family's own value syntax."""
    spec: dict[str, Any] = {"description": tool.description,
                            "parameters": tool.parameters or {"type": "object", "properties": {}}}
    return f"declaration:{tool.name}{kv_value(spec, esc)}"


class FunctionGemma(Format):
    FORMAT_ID = "functiongemma"
    GRAMMAR = Grammar(triggers=(Trigger("<start_function_call>", _BODY, close="<end_function_call>"),),
                      drop=("<end_of_turn>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        decls = "".join(f"<start_function_declaration>{declaration(t, ESC)}<end_function_declaration>"
                        for t in tools)
        return (
            "These functions are at your disposal:" + decls + "\nTo use one, write "
            f"<start_function_call>call:function_name{{argument_name:{ESC}value{ESC}}}<end_function_call>, "
            "one such block per call. Results are returned in <start_function_response> blocks. "
            "When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return f"<start_function_call>call:{call.name}{kv_value(call_arguments(call), ESC)}<end_function_call>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<start_function_response>response:{name}{{value:{ESC}{content}{ESC}}}<end_function_response>"


FORMAT = FunctionGemma()
