"""DeepSeek V3 / R1: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>n` newline ```json {...} ``` `<｜tool▁call▁end｜>`."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import BodyFactory, Format, Grammar, PrefixChoice, Spec, Trigger, call_arguments, tool_dicts
from ..grammar import lit, seq
from ..jsonstream import dumps
from ..named_json_bodies import NamedJsonBody

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
OUTPUT_BEGIN, OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
EOS = "<｜end▁of▁sentence｜>"


# Spellings of the calls opener that llama.cpp reads (R1 distills write them): each opens a block
# whose first per-call begin marker is optional.
OPENERS = (CALLS_BEGIN, "<｜tool_calls_begin｜>", "<｜tool calls begin｜>", "<｜tool\\_calls\\_begin｜>", "<｜tool▁calls｜>")


def call_triggers(body: BodyFactory) -> tuple[Trigger, ...]:
    """The per-call marker and every opener spelling, all reading one call with `body`."""
    after_opener = Spec(PrefixChoice, options=((CALL_BEGIN, body, True), ("", body, True)))
    return (Trigger(CALL_BEGIN, body, close=CALL_END),
            *(Trigger(m, after_opener, close=CALL_END) for m in OPENERS))


def _header(text: str) -> tuple[str, str | None] | None:
    if SEP not in text:
        return None
    return text.rpartition(SEP)[2].strip(), None


# `function<｜tool▁sep｜>n` newline, the arguments in a ```json fence
_BODY = Spec(NamedJsonBody, delim="\n", parse_header=_header,
             write={"head": lambda w, name: seq(lit("function"), w.mark(SEP), lit(name)), "fence": ("```json\n", "\n```")})


def deepseek_tools(tools: Sequence[ToolSpec]) -> str:
    listing = "\n".join(f"- `{t['function']['name']}`:\n```json\n{dumps(t['function'])}\n```"
                        for t in tool_dicts(tools))
    return "## Tools\n\n### Function\n\nThese functions are at your disposal:\n\n" + listing


def deepseek_call_syntax(example: str) -> str:
    """How to write calls and where results come back; `example` is one call in the family's syntax."""
    return (
        f"\n\nTo use them, write:\n{CALLS_BEGIN}{example}{CALLS_END}\n"
        f"For several calls, put one {CALL_BEGIN}…{CALL_END} after another inside the same "
        f"{CALLS_BEGIN}…{CALLS_END}. Results are returned between {OUTPUT_BEGIN} and {OUTPUT_END}. "
        "When no function is needed, just answer in plain text."
    )


class DeepseekV3(Format):
    FORMAT_ID = "deepseek_v3"
    REASONING = ("<think>", "</think>")
    GRAMMAR = Grammar(triggers=call_triggers(_BODY), calls_wrap=(OPENERS, CALLS_END),
                      reasoning_open=("<think>",), reasoning_close=("</think>",),
                      drop=(CALLS_END, EOS))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        example = f'{CALL_BEGIN}function{SEP}function_name\n```json\n{{"argument_name": "value"}}\n```{CALL_END}'
        return deepseek_tools(tools) + deepseek_call_syntax(example)

    def render_tool_call(self, call: ToolCall) -> str:
        args = dumps(call_arguments(call))
        return f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}{call.name}\n```json\n{args}\n```{CALL_END}{CALLS_END}"

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"{OUTPUT_BEGIN}{content}{OUTPUT_END}"


FORMAT = DeepseekV3()
