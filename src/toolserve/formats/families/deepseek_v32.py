"""DeepSeek V3.2 "DSML": `<｜DSML｜function_calls>` around
`<｜DSML｜invoke name="n"><｜DSML｜parameter name="k" string="true|false">v</｜DSML｜parameter></｜DSML｜invoke>`.

V4 (deepseek_v4.py) writes the same invokes in a `<｜DSML｜tool_calls>` block; both families read
both block names (each is DSML markup, never prose).

A value is raw text: strings as they are (`string="true"`), everything else as JSON
(`string="false"`). The tool's schema types a value where it has a type; `string="false"` makes
an untyped value a JSON literal. Reasoning is `<think>`…`</think>`; with thinking on, the
template ends the prompt with `<think>` (thinking_open), with it off with `</think>`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..markup_bodies import XmlParamsBody, XmlSyntax, xml_value

DSML = "｜DSML｜"
V32_BLOCK, V4_BLOCK = "function_calls", "tool_calls"
EOS = "<｜end▁of▁sentence｜>"

SYNTAX = XmlSyntax(func_open=(f"<{DSML}invoke name=", ">"), func_close=f"</{DSML}invoke>",
                   param_open=(f"<{DSML}parameter name=", ">"), param_close=f"</{DSML}parameter>",
                   strip_newline=False, string_attr="string")


_BODY = Spec(XmlParamsBody, syntax=SYNTAX, write={"per_block": True})


def dsml_call(call: ToolCall, block: str) -> str:
    """One call as the templates write it (a parameter per line, `string` from the value's type)."""
    params = "".join(f'<{DSML}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
                     f"{xml_value(v)}</{DSML}parameter>\n" for k, v in call_arguments(call).items())
    return f'<{DSML}{block}>\n<{DSML}invoke name="{call.name}">\n{params}</{DSML}invoke>\n</{DSML}{block}>'


GRAMMAR = Grammar(triggers=tuple(Trigger(f"<{DSML}{b}>", _BODY, close=f"</{DSML}{b}>") for b in (V32_BLOCK, V4_BLOCK)),
                  reasoning_open=("<think>",), reasoning_close=("</think>",), drop=(EOS,))


class DeepseekV32(Format):
    FORMAT_ID = "deepseek_v32"
    REASONING = ("<think>", "</think>")
    GRAMMAR = GRAMMAR

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(dumps(t["function"]) for t in tool_dicts(tools))
        return (
            "## Tools\n\nYou can call the functions below by writing a "
            f'"<{DSML}function_calls>" block like this one as part of your reply:\n'
            f'<{DSML}function_calls>\n<{DSML}invoke name="$FUNCTION_NAME">\n'
            f'<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>\n'
            f"...\n</{DSML}invoke>\n</{DSML}function_calls>\n\n"
            "Write string values as they are, without quotes or escaping, with string=\"true\"; write numbers, "
            "booleans, arrays and objects as JSON with string=\"false\". Put one invoke element per call in the "
            "block. Results are returned between <function_results></function_results>. When no function is "
            "needed, just answer in plain text.\n\n"
            f"Here are the functions available in JSONSchema format:\n<functions>\n{listing}\n</functions>"
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return dsml_call(call, V32_BLOCK)

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<function_results>\n<result>{content}</result>\n</function_results>"


FORMAT = DeepseekV32()
