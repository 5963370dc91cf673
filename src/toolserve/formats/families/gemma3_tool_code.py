"""Gemma 3: tools shown as Python signatures; calls in a ```tool_code fence, results in ```tool_output.

Small models also write `f("x")` and shell style `f some/path`: positional values are mapped
onto the schema's parameters in order, required first. A Python list of calls (`[f(a=1), g()]`)
is read inside the fence, and as the whole answer without one: the format of Google's
Python-style function-calling prompt for Gemma 3 and of vLLM's Gemma 3 template.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, PrefixChoice, Spec, Trigger, call_arguments
from ..pythonic import PyCallsBody, py_call
from ..schema import ordered_params, prop_schema, types_of

_PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
             "array": "list", "object": "dict", "null": "None"}


def _py_type(schema: dict[str, Any]) -> str:
    types = sorted(types_of(schema))
    if not types:
        return "str"
    names = [_PY_TYPES.get(t, "Any") for t in types]
    return names[0] if len(names) == 1 else " | ".join(names)


def python_signature(tool: ToolSpec) -> str:
    """`def f(a: int, b: str = None) -> dict:` plus a Google-style docstring."""
    params = tool.parameters or {}
    required = set(params.get("required") or [])
    args, docs = [], []
    for name in ordered_params(params):
        sub = prop_schema(params, name)
        args.append(f"{name}: {_py_type(sub)}" + ("" if name in required else " = None"))
        desc = sub.get("description", "")
        if "enum" in sub:
            desc = (desc + " " if desc else "") + "One of: " + ", ".join(map(str, sub["enum"])) + "."
        docs.append(f"        {name}: {desc}".rstrip())
    doc = tool.description or tool.name
    body = f'    """{doc}'
    if docs:
        body += "\n\n    Args:\n" + "\n".join(docs) + "\n    "
    body += '"""'
    return f"def {tool.name}({', '.join(args)}) -> dict:\n{body}"


_LIST = Spec(PyCallsBody, bracketed=True)
# a fence holds calls one per line (as the renderer writes them, on lines of their own), or a list
_BODY = Spec(PrefixChoice, options=(("[", _LIST, False), ("", Spec(PyCallsBody, bracketed=False, shell=True), False)),
             write={"canonical": 1, "pad": "\n"})


class Gemma3ToolCode(Format):
    FORMAT_ID = "gemma3_tool_code"
    TOOL_RESULT_ROLE = "user"
    GRAMMAR = Grammar(triggers=(Trigger("```tool_code", _BODY, close="```"), Trigger("[", _LIST, lead=True)),
                      drop=("<end_of_turn>",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        sigs = "\n\n".join(python_signature(t) for t in tools)
        return (
            "To use the Python functions below (already imported; only these can be called), write the "
            "calls in a ```tool_code``` block, one per line:\n"
            '```tool_code\nfunction_name(argument_name="value")\n```\n'
            "Results are returned in a ```tool_output``` block; use them to make more calls or to "
            "write your answer. When no function is needed, just answer in plain text.\n\n"
            f"Functions:\n\n```python\n{sigs}\n```"
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return f"```tool_code\n{py_call(call.name, call_arguments(call))}\n```"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"```tool_output\n{content}\n```"


FORMAT = Gemma3ToolCode()
