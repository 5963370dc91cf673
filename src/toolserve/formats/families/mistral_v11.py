"""Mistral v11+ tokenizer (Magistral, Devstral, Small 3.2): `[TOOL_CALLS]n[ARGS]{...}`, repeated.

Also reads the short-lived `[TOOL_CALLS]n[CALL_ID]id[ARGS]{...}` spelling, and `[ARGS]` left
out (`[TOOL_CALLS]n{...}`, as vLLM reads it): `[TOOL_CALLS]` is a special token, never prose,
and a name holds no `{`. Reasoning is `[THINK]...[/THINK]`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import FAIL, Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody


def _header(text: str) -> tuple[str, str | None]:
    name, _, call_id = text.partition("[CALL_ID]")
    return name.strip(), call_id.strip() or None


class _Body(NamedJsonBody):
    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        if self.st == "header":  # `[ARGS]` left out: the arguments object follows the name
            brace = buf.find("{", pos, pos + self.max_header)
            args = buf.find(self.delim, pos, pos + self.max_header + len(self.delim))
            if brace >= 0 and (args < 0 or brace < args):
                name, call_id = _header(buf[pos:brace])
                if "[" in name or not self.sink.allowed(name):
                    return pos, FAIL
                self.name, self.call_id, self.st = name, call_id, "open"
                pos = brace
        return super().advance(buf, pos, final)


_BODY = Spec(_Body, delim="[ARGS]", parse_header=_header)


class MistralV11(Format):
    FORMAT_ID = "mistral_v11"
    REASONING = ("[THINK]", "[/THINK]")
    GRAMMAR = Grammar(triggers=(Trigger("[TOOL_CALLS]", _BODY),),
                      reasoning_open=("[THINK]",), reasoning_close=("[/THINK]",), drop=("</s>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return f"[AVAILABLE_TOOLS]{dumps(tool_dicts(tools))}[/AVAILABLE_TOOLS]"

    def render_tool_call(self, call: ToolCall) -> str:
        return f"[TOOL_CALLS]{call.name}[ARGS]{dumps(call_arguments(call))}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"[TOOL_RESULTS]{content}[/TOOL_RESULTS]"


FORMAT = MistralV11()
