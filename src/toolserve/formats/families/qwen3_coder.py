"""Qwen3-Coder, Qwen3.5, Nemotron 3: `<tool_call><function=n><parameter=k>raw</parameter></function></tool_call>`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments
from ..jsonstream import dumps
from ..markup_bodies import XmlParamsBody, XmlSyntax, xml_value
from ..schema import prop_schema, types_of

# a `<parameter=...>` left unclosed ends where the next parameter, the function or the block starts
SYNTAX = XmlSyntax(value_stops=("<parameter=", "</function>", "</tool_call>"))


_BODY = Spec(XmlParamsBody, syntax=SYNTAX)


def xml_tools(tools: Sequence[ToolSpec]) -> str:
    """The `<tools><function><name>…` listing Qwen3-Coder's template writes."""
    out = ["<tools>"]
    for t in tools:
        out += ["<function>", f"<name>{t.name}</name>"]
        if t.description:
            out.append(f"<description>{t.description.strip()}</description>")
        out.append("<parameters>")
        params: dict[str, Any] = t.parameters or {}
        for key in (params.get("properties") or {}):
            sub = prop_schema(params, key)
            out += ["<parameter>", f"<name>{key}</name>"]
            kinds = sorted(types_of(sub))
            if kinds:
                out.append(f"<type>{kinds[0] if len(kinds) == 1 else dumps(kinds)}</type>")
            if sub.get("description"):
                out.append(f"<description>{sub['description'].strip()}</description>")
            if "enum" in sub:
                out.append(f"<enum>{dumps(sub['enum'])}</enum>")
            out.append("</parameter>")
        if params.get("required"):
            out.append(f"<required>{dumps(params['required'])}</required>")
        out += ["</parameters>", "</function>"]
    out.append("</tools>")
    return "\n".join(out)


class Qwen3Coder(Format):
    FORMAT_ID = "qwen3_coder"
    REASONING = ("<think>", "</think>")
    TOOL_RESULT_ROLE = "user"
    GRAMMAR = Grammar(triggers=(Trigger("<tool_call>", _BODY, close="</tool_call>"),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return (
            "# Tools\n\nThese functions are at your disposal:\n\n" + xml_tools(tools) + "\n\n"
            "To use one, write exactly this layout and nothing after it:\n\n"
            "<tool_call>\n<function=function_name>\n<parameter=argument_name>\nvalue\n"
            "</parameter>\n</function>\n</tool_call>\n\n"
            "- One <function=...></function> block per call, each wrapped in its own <tool_call></tool_call> pair; "
            "write several in a row for several calls.\n"
            "- One <parameter=...></parameter> block per argument; never leave out a required one.\n"
            "- Results are returned between <tool_response></tool_response>.\n"
            "- When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        params = "".join(f"<parameter={k}>\n{xml_value(v)}\n</parameter>\n"
                         for k, v in call_arguments(call).items())
        return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"


FORMAT = Qwen3Coder()
