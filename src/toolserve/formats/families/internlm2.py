"""InternLM 2 / 2.5: `<|action_start|><|plugin|>` newline `{"name": n, "parameters": {...}}` `<|action_end|>`.

One call per action block (the model writes one block per turn; several blocks in a row are
read as several calls). `"arguments"` is read as well as `"parameters"`, as vLLM does.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps

ACTION_START, ACTION_END = "<|action_start|><|plugin|>", "<|action_end|>"


class InternLM2(Format):
    FORMAT_ID = "internlm2"
    GRAMMAR = Grammar(triggers=(Trigger(ACTION_START, Spec(JsonCallsBody, args_keys=("parameters", "arguments"),
                                                       write={"layout": "object", "pad": "\n"}), close=ACTION_END),),
                      drop=("<|im_end|>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = dumps([t["function"] for t in tool_dicts(tools)])
        return (
            "You can use the plugins below. To call one, write <|action_start|><|plugin|>, then on a new line "
            "its name and parameters as one JSON object, then <|action_end|>:\n"
            '<|action_start|><|plugin|>\n{"name": "plugin_name", "parameters": {"parameter_name": "value"}}'
            "<|action_end|>\nResults come back in the next message. When no plugin is needed, just answer in "
            "plain text.\nPlugins (JSON schemas):\n" + listing
        )

    def render_tool_call(self, call: ToolCall) -> str:
        body = dumps({"name": call.name, "parameters": call_arguments(call)})
        return f"{ACTION_START}\n{body}{ACTION_END}"


FORMAT = InternLM2()
