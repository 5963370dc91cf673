"""Kimi K2: `<|tool_call_begin|>functions.n:idx<|tool_call_argument_begin|>{...}<|tool_call_end|>`.

The id the model writes (`functions.n:idx`) is kept as the call id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Sink, Trigger, call_arguments, tool_dicts
from ..json_bodies import NamedJsonBody
from ..jsonstream import dumps

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGS_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_KIMI_ID = re.compile(r"functions\.[^:\s]+:\d+\Z")


def _header(text: str) -> tuple[str, str | None] | None:
    call_id = text.strip()
    name = call_id.removeprefix("functions.").rpartition(":")[0] if ":" in call_id else call_id
    return (name, call_id) if name else None


def _body(sink: Sink) -> NamedJsonBody:
    return NamedJsonBody(sink, ARGS_BEGIN, _header)


class KimiK2(Format):
    FORMAT_ID = "kimi_k2"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger(CALL_BEGIN, _body, close=CALL_END),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",),
                      drop=(SECTION_BEGIN, SECTION_END, "<|im_end|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "# Tools\n" + dumps(tool_dicts(tools))

    def render_tool_call(self, call: ToolCall) -> str:
        call_id = call.id if _KIMI_ID.match(call.id) else f"functions.{call.name}:0"
        args = dumps(call_arguments(call))
        return f"{SECTION_BEGIN}{CALL_BEGIN}{call_id}{ARGS_BEGIN}{args}{CALL_END}{SECTION_END}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"## Return of {call_id}\n{content}"


FORMAT = KimiK2()
