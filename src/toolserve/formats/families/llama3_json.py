"""Llama 3.1-3.3 JSON tool prompt: optional `<|python_tag|>`, `{"name": n, "parameters": {...}}`; `;`-joined.

After `<|python_tag|>` the object may also be a Python dict literal (`{'name': 'f', ...}`).
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import DONE, FAIL, MORE, Format, Grammar, PrefixChoice, Sink, Spec, Trigger, call_arguments, tool_dicts
from ..json_bodies import JsonCallsBody
from ..jsonstream import dumps
from ..pythonic import py_literal

log = logging.getLogger(__name__)


# `{"name": n, "parameters": {...}}` objects (or "arguments"), `;`-joined (as written) or in a list
json_calls = Spec(JsonCallsBody, args_keys=("parameters", "arguments"), lists=True, seps=";", write={"layout": "joined"})


class PyDictCall:
    """One call written as a Python dict literal, read whole once its braces close (ast, never eval)."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.text: list[str] = []
        self.depth = 0
        self.quote = ""
        self.escaped = False

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        for i in range(pos, len(buf)):
            c = buf[i]
            if self.quote:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == self.quote:
                    self.quote = ""
            elif c in "'\"":
                self.quote = c
            elif c in "{[(":
                self.depth += 1
            elif c in "}])":
                self.depth -= 1
                if self.depth == 0:
                    self.text.append(buf[pos:i + 1])
                    return i + 1, self._emit("".join(self.text))
        self.text.append(buf[pos:])
        return len(buf), FAIL if final else MORE

    def _emit(self, text: str) -> int:
        try:
            value = py_literal(ast.parse(text.strip(), mode="eval").body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return FAIL
        if not isinstance(value, dict):
            return FAIL
        name = value.get("name")
        args = value.get("parameters", value.get("arguments", {}))
        if not isinstance(name, str) or not isinstance(args, dict) or not self.sink.allowed(name):
            log.debug("python dict after <|python_tag|> is no call to an offered tool: %r", text[:80])
            return FAIL
        self.sink.start_call(name)
        self.sink.call_args(dumps(args))
        self.sink.end_call()
        return DONE


# after `<|python_tag|>`: a Python dict literal, else the JSON form (what it writes)
tagged_calls = Spec(PrefixChoice, options=[("{'", PyDictCall, False), ("", json_calls, False)], write={"canonical": 1})


class Llama3Json(Format):
    FORMAT_ID = "llama3_json"
    TOOL_RESULT_ROLE = "ipython"
    GRAMMAR = Grammar(triggers=(Trigger("{", json_calls, lead=True), Trigger("<|python_tag|>", tagged_calls)),  # bare JSON: what it writes
                      drop=("<|eom_id|>", "<|eot_id|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n\n".join(dumps(t) for t in tool_dicts(tools))
        return (
            "To use one of the functions below, reply with only a JSON object naming it and giving "
            "literal values for its arguments:\n"
            '{"name": "function_name", "parameters": {"argument_name": "value"}}\n'
            'For several calls, separate the objects with ";". Results are returned in an ipython message. '
            "When no function is needed, just answer in plain text.\n\nFunctions (JSON schemas):\n\n" + listing
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return dumps({"name": call.name, "parameters": call_arguments(call)})


FORMAT = Llama3Json()
