"""GigaChat 3: the call is the next message, in the `function call` role:
`<|message_sep|>` blank line `function call<|role_sep|>` newline `{"name": n, "arguments": {...}}`.

GigaChat 3.1 writes `<|function_call|>` instead of the role header; both are read (vLLM reads
both). One call per turn: the template renders only a message's first call.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps

ROLE_HEADER, V31_HEADER = "function call<|role_sep|>", "<|function_call|>"


_BODY = Spec(JsonCallsBody, args_keys=("arguments",), lists=False, single=True, write={"layout": "object", "pad": "\n"})


class GigaChat3(Format):
    FORMAT_ID = "gigachat3"
    GRAMMAR = Grammar(triggers=(Trigger(ROLE_HEADER, _BODY), Trigger(V31_HEADER, _BODY)),
                      calls_wrap=(("<|message_sep|>\n\n",), ""),  # the call is a message of its own
                      drop=("<|message_sep|>", "</s>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = dumps([t["function"] for t in tool_dicts(tools)])
        return (
            "Function descriptions (JSON schemas):\n" + listing + "\n\n"
            "To call a function, end your message and write the `function call` role with the function's name "
            "and arguments as one JSON object:\n"
            'function call<|role_sep|>\n{"name": "function_name", "arguments": {"argument_name": "value"}}\n'
            "One call per turn; its result comes back as a `function result` message. "
            "When no function is needed, just answer in plain text."
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return f"<|message_sep|>\n\n{ROLE_HEADER}\n" + dumps({"name": call.name, "arguments": call_arguments(call)})


FORMAT = GigaChat3()
