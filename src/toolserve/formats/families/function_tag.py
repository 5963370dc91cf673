"""Llama 3 function-tag prompt / Functionary v3.1: `<function=n>{...}</function>`.

`<function name="n">{...}</function>` is read too (llama.cpp's Hermes 2 Pro parser reads both
spellings).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments
from ..grammar import lit
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody


def _name(header: str) -> tuple[str, None]:
    return header.strip(), None


def _quoted_name(header: str) -> tuple[str, None]:
    return header.strip().strip("\"'"), None


_BODY = Spec(NamedJsonBody, delim=">", parse_header=_name)
_NAMED_BODY = Spec(NamedJsonBody, delim=">", parse_header=_quoted_name, write={"head": lambda w, name: lit(f'"{name}"')})


class FunctionTag(Format):
    FORMAT_ID = "function_tag"
    TOOL_RESULT_ROLE = "ipython"
    GRAMMAR = Grammar(triggers=(Trigger("<function=", _BODY, close="</function>"),
                                Trigger("<function name=", _NAMED_BODY, close="</function>")),
                      drop=("<|eom_id|>", "<|eot_id|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        parts = ["These functions are at your disposal (JSON schemas):\n"]
        for t in tools:
            spec = {"name": t.name, "description": t.description, "parameters": t.parameters}
            parts.append(f"{t.name}:\n{dumps(spec)}\n")
        parts.append(
            "To use one, reply with the call alone, on a single line:\n\n"
            '<function=function_name>{"argument_name": "value"}</function>\n\n'
            "- Every call opens with <function= and closes with </function>; write several in a row for several calls.\n"
            "- Never leave out a required argument.\n"
            "- Results are returned in an ipython message. When no function is needed, just answer in plain text."
        )
        return "\n".join(parts)

    def render_tool_call(self, call: ToolCall) -> str:
        return f"<function={call.name}>{dumps(call_arguments(call))}</function>"


FORMAT = FunctionTag()
