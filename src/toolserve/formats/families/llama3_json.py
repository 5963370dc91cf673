"""Llama 3.1-3.3 JSON tool prompt: optional `<|python_tag|>`, `{"name": n, "parameters": {...}}`; `;`-joined."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Sink, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps


def _body(sink: Sink) -> JsonCallsBody:
    return JsonCallsBody(sink, args_keys=("parameters", "arguments"), lists=True, seps=";")


class Llama3Json(Format):
    FORMAT_ID = "llama3_json"
    TOOL_RESULT_ROLE = "ipython"
    GRAMMAR = Grammar(triggers=(Trigger("<|python_tag|>", _body), Trigger("{", _body, lead=True)),
                      drop=("<|eom_id|>", "<|eot_id|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n\n".join(dumps(t) for t in tool_dicts(tools))
        return (
            "To use one of the functions below, reply with only a JSON object naming it and giving "
            "literal values for its arguments:\n"
            '{"name": "function_name", "parameters": {"argument_name": "value"}}\n'
            'For several calls, separate the objects with ";". Results are returned in an ipython message. '
            "When no function is needed, just answer in plain text.\n\nFunctions (JSON schemas):\n\n" + listing
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return dumps({"name": call.name, "parameters": call_arguments(call)})


FORMAT = Llama3Json()
