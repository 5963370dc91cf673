"""FireFunction v2: ` functools[{"name": n, "arguments": {...}}]`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps


class Firefunction(Format):
    FORMAT_ID = "firefunction"
    GRAMMAR = Grammar(triggers=(Trigger("functools", JsonCallsBody),), drop=("<|eot_id|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return (
            "To use the functions below, reply with functools followed by a JSON list with one entry per call:\n"
            'functools[{"name": "function_name", "arguments": {"argument_name": "value"}}]\n'
            "Results are returned in a tool message. When no function is needed, just answer in plain text.\n\n"
            "Functions (JSON schemas):\n" + dumps([t["function"] for t in tool_dicts(tools)])
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return " functools" + dumps([{"name": call.name, "arguments": call_arguments(call)}])


FORMAT = Firefunction()
