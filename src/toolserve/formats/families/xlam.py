"""Salesforce xLAM (Llama-xLAM-2, xLAM-2 Qwen): the answer is a JSON list of calls,
`[{"name": n, "arguments": {...}}, ...]`.

Also read, as vLLM's xLAM parser does: the list in a ```` ```json ```` fence, after
`[TOOL_CALLS]`, or between `<tool_call>` and `</tool_call>`; `<think>...</think>` before it is
reasoning. A bare list is only a call at the start of the answer (or right after the
reasoning), and every entry must name an offered tool, so prose that merely starts with `[`
stays text.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, PrefixChoice, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps

_CALLS = Spec(PrefixChoice, options=[("[", JsonCallsBody, False), ("{", JsonCallsBody, False)])
# one marker for ``` and ```json (a marker that is a prefix of another would be taken before the
# longer one arrived); the language tag is read here
_FENCED = Spec(PrefixChoice, options=[("json", _CALLS, True), ("[", JsonCallsBody, False), ("{", JsonCallsBody, False)])
# `[TOOL_CALLS]` also starts with `[`: its own marker goes first; the bare list is what it writes
_LEAD = Spec(PrefixChoice, options=[("[TOOL_CALLS]", JsonCallsBody, True), ("[", JsonCallsBody, False)], write={"canonical": 1})


class XLam(Format):
    FORMAT_ID = "xlam"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(
        triggers=(Trigger("[", _LEAD, lead=True), Trigger("```", _FENCED, close="```", lazy=False),  # a fence is prose too
                  Trigger("[TOOL_CALLS]", JsonCallsBody), Trigger("<tool_call>", JsonCallsBody, close="</tool_call>")),
        reasoning_open=("<think>",), reasoning_close=("</think>",), drop=("<|eot_id|>", "<|im_end|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n\n".join(dumps(t["function"]) for t in tool_dicts(tools))
        return (
            "You have access to a set of tools. When using tools, make calls in a single JSON array:\n\n"
            '[{"name": "tool_name", "arguments": {"argument_name": "value"}}]\n\n'
            "Write one entry per call. If no tool is suitable, say so. For tasks that don't need tools, "
            "respond directly in plain text. The available tools are:\n\n" + listing
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return dumps([{"name": call.name, "arguments": call_arguments(call)}])


FORMAT = XLam()
