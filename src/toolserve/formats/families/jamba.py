"""Jamba 1.5 / 1.6 / 1.7: `<tool_calls>[{"name": n, "arguments": {...}}, ...]</tool_calls>`.

The tools are shown the way Jamba's own template does (`<tool_definitions>` holding a
`# Tools` / `## Functions` listing).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps


class Jamba(Format):
    FORMAT_ID = "jamba"
    GRAMMAR = Grammar(triggers=(Trigger("<tool_calls>", JsonCallsBody, close="</tool_calls>"),),
                      drop=("<|eom|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n\n".join(dumps(t["function"]) for t in tool_dicts(tools))
        return (
            f"<tool_definitions>\n# Tools\n\n## Functions\n\n{listing}\n</tool_definitions>\n\n"
            "To call functions, write a JSON list with one entry per call between <tool_calls> and </tool_calls>:\n"
            '<tool_calls>[{"name": "function_name", "arguments": {"argument_name": "value"}}]</tool_calls>\n'
            "Results are returned in a tool message. When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return "<tool_calls>" + dumps([{"name": call.name, "arguments": call_arguments(call)}]) + "</tool_calls>"


FORMAT = Jamba()
