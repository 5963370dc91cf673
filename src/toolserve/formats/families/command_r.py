"""Command R7B / Command A: `<|START_ACTION|>[{"tool_call_id": i, "tool_name": n, "parameters": {...}}]<|END_ACTION|>`.

Reasoning is `<|START_THINKING|>…<|END_THINKING|>`; the answer may stand in
`<|START_RESPONSE|>…<|END_RESPONSE|>` (Command R7B) or `<|START_TEXT|>…<|END_TEXT|>` (Command A's
newer templates); those markers are special tokens and are dropped, as are the citation tags of
grounded answers (`<co>…</co: 0:[1]>`), whose text is kept. The model's `tool_call_id` ("0", "1") is not unique
across turns, so toolserve gives each call its own id.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps

# written as the template writes them: a list of {"tool_call_id", "tool_name", "parameters"}
_BODY = Spec(JsonCallsBody, name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"),
             ignore_keys=("tool_call_id", "id", "type"),
             write={"id_key": "tool_call_id", "id_schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,24}$"}})


class CommandR(Format):
    FORMAT_ID = "command_r"
    REASONING = ("<|START_THINKING|>", "<|END_THINKING|>")
    GRAMMAR = Grammar(triggers=(Trigger("<|START_ACTION|>", _BODY, close="<|END_ACTION|>"),),
                      reasoning_open=("<|START_THINKING|>",), reasoning_close=("<|END_THINKING|>",),
                      drop=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>",
                            "<|END_OF_TURN_TOKEN|>", "<co>"),
                      # citations of grounded answers: `<co>text</co: 0:[1]>` (or `<co: 0>text</co: 0>`), text kept
                      drop_tags=(("<co: ", ">"), ("</co: ", ">"), ("</co:", ">")))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = dumps([t["function"] for t in tool_dicts(tools)])
        return (
            "## Tools\nThe tools below are the only ones that exist; never call any other.\n\n"
            f"```json\n{listing}\n```\n\n"
            'To use them, write one action holding a JSON list with one entry per call, tool_call_id counting from "0":\n'
            '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "tool_name", "parameters": {"argument_name": "value"}}]'
            "<|END_ACTION|>\n"
            "Results are returned between <|START_TOOL_RESULT|> and <|END_TOOL_RESULT|>. "
            "When no tool is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        item = {"tool_call_id": call.id, "tool_name": call.name, "parameters": call_arguments(call)}
        return f"<|START_ACTION|>{dumps([item])}<|END_ACTION|>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        item = {"tool_call_id": call_id, "results": {"0": content}, "is_error": None}
        return f"<|START_TOOL_RESULT|>{dumps([item])}<|END_TOOL_RESULT|>"


FORMAT = CommandR()
