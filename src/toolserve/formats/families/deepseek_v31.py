"""DeepSeek V3.1 / V3.2 (non-DSML): `<｜tool▁call▁begin｜>n<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, Grammar, Spec, call_arguments
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody
from .deepseek_v3 import (
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN,
    CALLS_END,
    EOS,
    OPENERS,
    OUTPUT_BEGIN,
    OUTPUT_END,
    SEP,
    call_triggers,
    deepseek_call_syntax,
    deepseek_tools,
)


def _name(header: str) -> tuple[str, None]:
    return header.strip(), None


_BODY = Spec(NamedJsonBody, delim=SEP, parse_header=_name)


class DeepseekV31(Format):
    FORMAT_ID = "deepseek_v31"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=call_triggers(_BODY), calls_wrap=(OPENERS, CALLS_END),
                      reasoning_open=("<think>",), reasoning_close=("</think>",),
                      drop=(CALLS_END, EOS))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        example = f'{CALL_BEGIN}function_name{SEP}{{"argument_name": "value"}}{CALL_END}'
        return deepseek_tools(tools) + deepseek_call_syntax(example)

    def render_tool_call(self, call: ToolCall) -> str:
        return f"{CALLS_BEGIN}{CALL_BEGIN}{call.name}{SEP}{dumps(call_arguments(call))}{CALL_END}{CALLS_END}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"{OUTPUT_BEGIN}{content}{OUTPUT_END}"


FORMAT = DeepseekV31()
