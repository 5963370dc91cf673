"""MiniMax M2: `<minimax:tool_call><invoke name="n"><parameter name="k">raw</parameter></invoke></minimax:tool_call>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..markup_bodies import XmlParamsBody, XmlSyntax, xml_value

SYNTAX = XmlSyntax(func_open=("<invoke name=", ">"), func_close="</invoke>",
                   param_open=("<parameter name=", ">"), unquote=True,
                   value_stops=("<parameter name=", "</invoke>", "</minimax:tool_call>"))


_BODY = Spec(XmlParamsBody, syntax=SYNTAX, write={"per_block": True})


class MinimaxM2(Format):
    FORMAT_ID = "minimax_m2"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger("<minimax:tool_call>", _BODY, close="</minimax:tool_call>"),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",),
                      calls_in_reasoning=False)  # a call written inside <think> is thinking (Ollama, vLLM)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(f"<tool>{dumps(t['function'])}</tool>" for t in tool_dicts(tools))
        return (
            "# Tools\nThese tools are at your disposal, each described by a JSON schema:\n\n"
            f"<tools>\n{listing}\n</tools>\n\n"
            "To use them, write one <minimax:tool_call> block with an <invoke> element per call and a "
            "<parameter> element per argument:\n\n"
            '<minimax:tool_call>\n<invoke name="tool_name">\n<parameter name="argument_name">value'
            "</parameter>\n</invoke>\n</minimax:tool_call>\n\n"
            "Results are returned between <response></response>. "
            "When no tool is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        params = "".join(f'<parameter name="{k}">{xml_value(v, layout=True)}</parameter>\n'
                         for k, v in call_arguments(call).items())
        return f'<minimax:tool_call>\n<invoke name="{call.name}">\n{params}</invoke>\n</minimax:tool_call>'

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<response>{content}</response>"


FORMAT = MinimaxM2()
