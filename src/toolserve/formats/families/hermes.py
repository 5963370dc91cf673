"""Hermes / Qwen / most ChatML models: `<tool_call>{"name": n, "arguments": {...}}</tool_call>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, PrefixChoice, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody


def _name(header: str) -> tuple[str, None]:
    return header.strip(), None


# one call per block on a line of its own, as the prompt shows it
_OBJECT = Spec(JsonCallsBody, write={"layout": "object", "pad": "\n"})
# seen in the wild: a JSON list in one block, and `<function=n>{...}</function>` inside it
_BODY = Spec(PrefixChoice, options=[("{", _OBJECT, False), ("[", JsonCallsBody, False),
                                    ("<function=", Spec(NamedJsonBody, delim=">", parse_header=_name, suffix="</function>"), True)])


class Hermes(Format):
    FORMAT_ID = "hermes"
    REASONING = ("<think>", "</think>")
    TOOL_RESULT_ROLE = "user"
    GRAMMAR = Grammar(triggers=(Trigger("<tool_call>", _BODY, close="</tool_call>"),),
                      reasoning_open=("<think>",), reasoning_close=("</think>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(dumps(t) for t in tool_dicts(tools))
        return (
            "# Tools\n\nThese functions are at your disposal, one JSON schema per line between "
            f"<tools></tools>:\n<tools>\n{listing}\n</tools>\n\n"
            "To use one, put its name and its arguments as a JSON object between <tool_call> and </tool_call>:\n"
            '<tool_call>\n{"name": "function_name", "arguments": {"argument_name": "value"}}\n</tool_call>\n'
            "Each call gets its own <tool_call> block; write several blocks in a row for several calls. "
            "Results are returned between <tool_response></tool_response>. "
            "When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        body = dumps({"name": call.name, "arguments": call_arguments(call)})
        return f"<tool_call>\n{body}\n</tool_call>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"


FORMAT = Hermes()
