"""Mistral pre-v11 tokenizer: `[TOOL_CALLS][{"name": n, "arguments": {...}, "id": "abcDEF123"}]`.

The model writes the 9-character id itself; it is kept (so the call waits for the id or the
end of its object before it starts).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps

# the id the template wants: 9 alphanumerics
_BODY = Spec(JsonCallsBody, id_keys=("id",), ignore_keys=("type",),
             write={"id_schema": {"type": "string", "pattern": "^[A-Za-z0-9]{9}$"}})


def mistral_id(call_id: str) -> str:
    """Mistral templates want 9 alphanumerics; longer OpenAI ids are cut to their last 9."""
    alnum = "".join(ch for ch in call_id if ch.isalnum())
    return (alnum[-9:] if len(alnum) >= 9 else alnum.rjust(9, "0"))


class Mistral(Format):
    FORMAT_ID = "mistral"
    GRAMMAR = Grammar(triggers=(Trigger("[TOOL_CALLS]", _BODY),), drop=("</s>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return f"[AVAILABLE_TOOLS]{dumps(tool_dicts(tools))}[/AVAILABLE_TOOLS]"

    def render_tool_call(self, call: ToolCall) -> str:
        item = {"name": call.name, "arguments": call_arguments(call), "id": mistral_id(call.id)}
        return f"[TOOL_CALLS]{dumps([item])}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        body = dumps({"content": content, "call_id": mistral_id(call_id)})
        return f"[TOOL_RESULTS]{body}[/TOOL_RESULTS]"


FORMAT = Mistral()
