"""Pythonic calls at the start of the answer: `[f(a=1, b="x"), g()]` (Llama 3.2/3.3 python_list prompt);
Llama 4's `<|python_start|>[f(a=1)]<|python_end|>` anywhere."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, PrefixChoice, Spec, Trigger, call_arguments, tool_dicts
from ..jsonstream import dumps
from ..pythonic import PyCallsBody, py_call

PROMPT = (
    "To use the functions below, reply with nothing but a Python list of calls with keyword arguments "
    "and literal values, one entry per call:\n"
    '[function_name(argument_name="text", other_argument=1), other_function()]\n'
    "Results are returned in an ipython message. When no function is needed, answer in plain text; "
    "if none of them fits the request, or the request lacks a required argument, say so.\n\n"
    "Functions (JSON schemas):\n\n"
)


# after Llama 4's `<|python_start|>`: a bracketed list (as the renderer writes), or bare calls
PYTHON_START = Trigger("<|python_start|>", Spec(PrefixChoice, options=[("[", PyCallsBody, False),
                                                                        ("", Spec(PyCallsBody, bracketed=False), False)]),
                       close="<|python_end|>")


def render_pythonic_tools(tools: Sequence[ToolSpec]) -> str:
    return PROMPT + dumps([t["function"] for t in tool_dicts(tools)])


class Pythonic(Format):
    FORMAT_ID = "pythonic"
    TOOL_RESULT_ROLE = "ipython"
    GRAMMAR = Grammar(triggers=(Trigger("[", PyCallsBody, lead=True), PYTHON_START),  # the list is what it writes
                      drop=("<|eom_id|>", "<|eot_id|>", "<|eom|>", "<|eot|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return render_pythonic_tools(tools)

    def render_tool_call(self, call: ToolCall) -> str:
        return "[" + py_call(call.name, call_arguments(call)) + "]"


FORMAT = Pythonic()
