"""Llama 4: `<|python_start|>[f(a=1)]<|python_end|>` (the bare list at the start is accepted too)."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Trigger, call_arguments
from ..pythonic import PyCallsBody, py_call
from .pythonic import PYTHON_START, render_pythonic_tools


class Llama4Pythonic(Format):
    FORMAT_ID = "llama4_pythonic"
    TOOL_RESULT_ROLE = "ipython"
    GRAMMAR = Grammar(triggers=(PYTHON_START, Trigger("[", PyCallsBody, lead=True)),
                      drop=("<|eom|>", "<|eot|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return render_pythonic_tools(tools)

    def render_tool_call(self, call: ToolCall) -> str:
        return "<|python_start|>[" + py_call(call.name, call_arguments(call)) + "]<|python_end|>"


FORMAT = Llama4Pythonic()
