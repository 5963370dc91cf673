"""Seed-OSS: `<seed:tool_call><function=n><parameter=k>raw</parameter></function></seed:tool_call>`; reasoning in `<seed:think>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..markup_bodies import XmlParamsBody, XmlSyntax, xml_value

SYNTAX = XmlSyntax()


_BODY = Spec(XmlParamsBody, syntax=SYNTAX)


class SeedOss(Format):
    FORMAT_ID = "seed_oss"
    REASONING = ("<seed:think>", "</seed:think>")
    GRAMMAR = Grammar(triggers=(Trigger("<seed:tool_call>", _BODY, close="</seed:tool_call>"),),
                      reasoning_open=("<seed:think>",), reasoning_close=("</seed:think>",),
                      drop=("<seed:eos>",), calls_in_reasoning=False)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(dumps(t) for t in tool_dicts(tools))
        return (
            "# Tools\nThese tools are at your disposal, one JSON schema per line:\n"
            f"{listing}\n\n"
            "To use one, write:\n<seed:tool_call>\n<function=function_name>\n"
            "<parameter=argument_name>value</parameter>\n</function>\n</seed:tool_call>\n"
            "Give each argument its own <parameter=...> element and each call its own <seed:tool_call> block. "
            "Results are returned in a tool message. When no tool is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        params = "".join(f"<parameter={k}>{xml_value(v, layout=True)}</parameter>\n" for k, v in call_arguments(call).items())
        return f"<seed:tool_call>\n<function={call.name}>\n{params}</function>\n</seed:tool_call>"


FORMAT = SeedOss()
