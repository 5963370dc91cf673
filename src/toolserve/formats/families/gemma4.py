"""Gemma 4: `<|tool_call>call:n{k:<|"|>v<|"|>,…}<tool_call|>` (several `call:` per block); reasoning in `<|channel>thought…<channel|>`.

The reasoning channel opens with `<|channel>`; the `thought` label after it is dropped when the
model writes it (vLLM and Ollama read `<|channel>…<channel|>` without it too). A bare
`call:n{…}` with no `<|tool_call>` is read where a content segment starts (the start of the
output, right after `<channel|>` or after another call), as vLLM does after `<channel|>`; in the
middle of text it stays text. A repeated `<tool_call|>` and a `<|tool_response>` the model writes
after its calls are special tokens and are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments
from ..kv_bodies import KvCallsBody, kv_value
from .functiongemma import declaration

ESC = '<|"|>'


_BODY = Spec(KvCallsBody, esc=ESC, close="<tool_call|>")


class Gemma4(Format):
    FORMAT_ID = "gemma4"
    REASONING = ("<|channel>thought", "<channel|>")
    GRAMMAR = Grammar(triggers=(Trigger("<|tool_call>", _BODY, close="<tool_call|>"),
                                Trigger("call:", _BODY, lead=True)),
                      reasoning_open=("<|channel>thought", "<|channel>"), reasoning_close=("<channel|>",),
                      drop=("<turn|>", "<tool_call|>", "<|tool_response>", "<tool_response|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "".join(f"<|tool>{declaration(t, ESC)}<tool|>" for t in tools)

    def render_tool_call(self, call: ToolCall) -> str:
        return f"<|tool_call>call:{call.name}{kv_value(call_arguments(call), ESC)}<tool_call|>"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<|tool_response>response:{name}{{value:{ESC}{content}{ESC}}}<tool_response|>"


FORMAT = Gemma4()
