"""Kimi K2 (Instruct, 0905, K2-Thinking, K2.5): `<|tool_call_begin|>functions.n:idx<|tool_call_argument_begin|>{...}<|tool_call_end|>`
inside `<|tool_calls_section_begin|>…<|tool_calls_section_end|>`; reasoning `<think>…</think>`.

The id the model writes (`functions.n:idx`, or `n:idx`) is kept as the call id. An id with no
`:idx`, or a bare counter that names no tool, is no call: its text is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, Trigger, call_arguments, tool_dicts
from ..grammar import lit, seq
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGS_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_KIMI_ID = re.compile(r"functions\.[^:\s]+:\d+\Z")


def _header(text: str) -> tuple[str, str | None] | None:
    call_id = text.strip()
    name = call_id.removeprefix("functions.").rpartition(":")[0] if ":" in call_id else call_id
    return (name, call_id) if name else None


def kimi_id(name: str, call_id: str) -> str:
    """The id a call and its result are written with: the model's own, else `functions.n:0`."""
    return call_id if _KIMI_ID.match(call_id) else f"functions.{name}:0"


# the id the model writes: `functions.n:index`
_BODY = Spec(NamedJsonBody, delim=ARGS_BEGIN, parse_header=_header,
             write={"head": lambda w, name: seq(lit(f"functions.{name}:"), w.terminal("index", "/[0-9]{1,3}/"))})


class KimiK2(Format):
    FORMAT_ID = "kimi_k2"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=(Trigger(CALL_BEGIN, _BODY, close=CALL_END),), calls_wrap=((SECTION_BEGIN,), SECTION_END),
                      reasoning_open=("<think>",), reasoning_close=("</think>",),
                      drop=(SECTION_BEGIN, SECTION_END, "<|im_end|>"))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "# Tools\n" + dumps(tool_dicts(tools))

    def render_tool_call(self, call: ToolCall) -> str:
        args = dumps(call_arguments(call))
        return f"{SECTION_BEGIN}{CALL_BEGIN}{kimi_id(call.name, call.id)}{ARGS_BEGIN}{args}{CALL_END}{SECTION_END}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"## Return of {kimi_id(name, call_id)}\n{content}"


FORMAT = KimiK2()
