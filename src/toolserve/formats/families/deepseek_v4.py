"""DeepSeek V4 "DSML": V3.2's invokes (deepseek_v32.py) in a `<｜DSML｜tool_calls>` block; results come
back in the user turn as `<tool_result>…</tool_result>`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...types import ToolCall, ToolSpec
from ..base import Format, tool_dicts
from ..jsonstream import dumps
from .deepseek_v32 import DSML, GRAMMAR, V4_BLOCK, dsml_call


class DeepseekV4(Format):
    FORMAT_ID = "deepseek_v4"
    REASONING = ("<think>", "</think>")
    TOOL_RESULT_ROLE = "user"
    GRAMMAR = dataclasses.replace(GRAMMAR, triggers=GRAMMAR.triggers[::-1])  # its own block first: what it writes

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        schemas = "\n".join(dumps(t["function"]) for t in tool_dicts(tools))
        return (
            "## Tools\n\nYou can call tools by writing a "
            f'"<{DSML}tool_calls>" block like this one:\n\n'
            f'<{DSML}tool_calls>\n<{DSML}invoke name="$TOOL_NAME">\n'
            f'<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>\n'
            f"...\n</{DSML}invoke>\n</{DSML}tool_calls>\n\n"
            "Write string parameters as they are with string=\"true\"; write numbers, booleans, arrays and "
            "objects as JSON with string=\"false\". Put one invoke element per call in the block. Results are "
            "returned between <tool_result></tool_result>. When no tool is needed, just answer in plain text.\n\n"
            f"### Available Tool Schemas\n\n{schemas}\n"
        )

    def render_tool_call(self, call: ToolCall) -> str:
        return dsml_call(call, V4_BLOCK)

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<tool_result>{content}</tool_result>"


FORMAT = DeepseekV4()
