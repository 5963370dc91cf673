"""GLM-4.5/4.6/4.7: `<tool_call>n` newline `<arg_key>k</arg_key>` newline `<arg_value>v</arg_value>…</tool_call>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..markup_bodies import XmlParamsBody, XmlSyntax, xml_value

SYNTAX = XmlSyntax(func_open=("", "\n"), func_close=None, param_open=("<arg_key>", "</arg_key>"),
                   value_open="<arg_value>", param_close="</arg_value>", strip_newline=False,
                   name_stops=("<arg_key>", "</tool_call>"), escaped=True)  # 4.6/4.7 escape values as JSON does


_BODY = Spec(XmlParamsBody, syntax=SYNTAX)


class Glm45(Format):
    FORMAT_ID = "glm45"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger("<tool_call>", _BODY, close="</tool_call>"),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(dumps(t) for t in tool_dicts(tools))
        return (
            "# Tools\n\nThese functions are at your disposal, one JSON schema per line between "
            f"<tools></tools>:\n<tools>\n{listing}\n</tools>\n\n"
            "To use one, write its name right after <tool_call>, then every argument as an "
            "<arg_key>/<arg_value> pair on its own lines, and close with </tool_call>:\n"
            "<tool_call>function_name\n<arg_key>first_argument</arg_key>\n<arg_value>value</arg_value>\n"
            "<arg_key>second_argument</arg_key>\n<arg_value>value</arg_value>\n</tool_call>\n"
            "Each call gets its own <tool_call> block; write several blocks in a row for several calls. "
            "Results are returned between <tool_response></tool_response>. "
            "When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        params = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_value(v)}</arg_value>\n" for k, v in call_arguments(call).items())
        return f"<tool_call>{call.name}\n{params}</tool_call>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"


def _value(value: object) -> str:
    """A value as the reader reads it back: it decodes JSON's short escapes (`SYNTAX.escaped`),
    so a string's backslashes are written doubled."""
    return xml_value(value.replace("\\", "\\\\") if isinstance(value, str) else value)


FORMAT = Glm45()
