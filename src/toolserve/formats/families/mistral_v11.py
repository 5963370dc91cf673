"""Mistral v11+ tokenizer (Magistral, Devstral, Small 3.2): `[TOOL_CALLS]n[ARGS]{...}`, repeated.

Also reads the short-lived `[TOOL_CALLS]n[CALL_ID]id[ARGS]{...}` spelling; reasoning is
`[THINK]...[/THINK]`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Sink, Trigger, call_arguments, tool_dicts
from ..json_bodies import NamedJsonBody
from ..jsonstream import dumps


def _header(text: str) -> tuple[str, str | None]:
    name, _, call_id = text.partition("[CALL_ID]")
    return name.strip(), call_id.strip() or None


def _body(sink: Sink) -> NamedJsonBody:
    return NamedJsonBody(sink, "[ARGS]", _header)


class MistralV11(Format):
    FORMAT_ID = "mistral_v11"
    REASONING = ("[THINK]", "[/THINK]")
    GRAMMAR = Grammar(triggers=(Trigger("[TOOL_CALLS]", _body),),
                      reasoning_open=("[THINK]",), reasoning_close=("[/THINK]",), drop=("</s>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return f"[AVAILABLE_TOOLS]{dumps(tool_dicts(tools))}[/AVAILABLE_TOOLS]"

    def render_tool_call(self, call: ToolCall) -> str:
        return f"[TOOL_CALLS]{call.name}[ARGS]{dumps(call_arguments(call))}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"[TOOL_RESULTS]{content}[/TOOL_RESULTS]"


FORMAT = MistralV11()
