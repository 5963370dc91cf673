"""Any model whose template knows no tools: the whole answer is one JSON object.

`{"tool_calls": [{"name": n, "arguments": {...}}]}`, `{"tool_call": {...}}` or
`{"response": "text"}` (the convention of llama.cpp's generic format); the response text
streams as content.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments, tool_dicts
from ..json_bodies import GenericJsonBody
from ..jsonstream import dumps


class GenericJson(Format):
    FORMAT_ID = "generic_json"
    TOOL_RESULT_ROLE = "user"
    GRAMMAR = Grammar(triggers=(Trigger("{", GenericJsonBody, lead=True),))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = dumps([t["function"] for t in tool_dicts(tools)])
        return (
            f"Tools at your disposal (JSON schemas): {listing}\n\n"
            "Your whole reply must be a single JSON object. To use tools, list one entry per call:\n"
            '{"tool_calls": [{"name": "tool_name", "arguments": {"argument_name": "value"}}]}\n'
            'To reply without a tool:\n{"response": "your answer"}\n'
            'Results are returned as {"tool_response": {...}} objects.'
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return dumps({"tool_calls": [{"name": call.name, "arguments": call_arguments(call)}]})

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return dumps({"tool_response": {"tool_call_id": call_id, "name": name, "content": content}})


FORMAT = GenericJson()
